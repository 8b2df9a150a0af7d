// One webhook POST (CONTRACT §10, SPEC §3.3): to the address the SSRF check passed (pinned
// through `lookup`, so no second DNS answer is used), over a keep-alive pool per origin, never
// following a redirect, with a deadline (WEBHOOK_TIMEOUT_MS) over the whole exchange from the
// moment it has a connection, reading at most RESPONSE_CAP bytes of the answer. TLS verifies
// the certificate against the URL's host name; tests add their own CA through `ca`, never by
// turning verification off.

import { performance } from 'node:perf_hooks';
import { Buffer } from 'node:buffer';
import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { rootCertificates } from 'node:tls';
import type { Address } from './webhook-target.js';

/** Most bytes of a receiver's answer read; the rest is dropped with the connection. */
export const RESPONSE_CAP = 4096;
/** Most sockets kept open to one origin. */
const SOCKETS_PER_ORIGIN = 64;

export interface SendResult {
  /** The HTTP status, or null when there was none (timeout, connection error). */
  status: number | null;
  /** Retry-After in ms, when the receiver sent one. */
  retryAfterMs: number | undefined;
  error: string | null;
  durationMs: number;
  /**
   * The sender gave the request up for a reason of its own, not the receiver's: no connection to
   * the origin came free in time (nothing was sent), or the sender closed (it may have been).
   */
  withdrawn?: true;
}

export interface SenderOptions {
  timeoutMs: number;
  /** Extra CA certificates (PEM) to trust, beside the system's. */
  ca?: string | Buffer | (string | Buffer)[];
  /** Keep-alive pools kept at once, one per receiving origin (MAX_AGENTS; tests set fewer). */
  maxAgents?: number;
  /** Most connections to one origin at once (SOCKETS_PER_ORIGIN; tests set fewer). */
  socketsPerOrigin?: number;
}

/** Retry-After as delay-seconds or an HTTP-date (RFC 9110 §10.2.3), in ms from now. */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** Keep-alive pools kept at once, one per receiving origin. */
const MAX_AGENTS = 1024;
/** A pooled socket idle this long is closed (longer than WEBHOOK_TIMEOUT_MS allows an exchange). */
const IDLE_SOCKET_MS = 125_000;

export class WebhookSender {
  private readonly agents = new Map<string, http.Agent>();
  private readonly targets = new Map<URL, { module: typeof http | typeof https; origin: string; options: http.RequestOptions }>();
  private readonly lookups = new Map<string, LookupFunction>();
  /** Pools past the bound whose requests were still under way when they went (agentFor). */
  private readonly retired = new Set<http.Agent>();
  /**
   * Requests not yet settled, with the way to settle each: close() answers them itself, since a
   * request still queued in a pool would otherwise be sent on a new connection once the pool's
   * destroyed sockets close, and hold close() for a whole timeout.
   */
  private readonly live = new Map<http.ClientRequest, (status: null, error: string, retryAfterMs: undefined, withdrawn: true) => void>();
  private closed = false;

  constructor(private readonly opts: SenderOptions) {}

  send(url: URL, addresses: Address[], headers: Record<string, string>, body: string): Promise<SendResult> {
    return new Promise((resolve) => this.post(url, addresses, { ...headers }, body, resolve));
  }

  /**
   * `send` without a promise: `cb` gets the result, exactly once. A fan-out starts a thousand of
   * these in one loop; the request options of a URL and the lookup of an address are built once.
   * `headers` is taken over (the content headers are added to it).
   */
  post(url: URL, addresses: Address[], headers: Record<string, string>, body: string, cb: (res: SendResult) => void): void {
    if (this.closed) {
      cb({ status: null, error: 'the sender is closed', retryAfterMs: undefined, durationMs: 0, withdrawn: true });
      return;
    }
    let started = performance.now();
    const target = this.targetOf(url);
    let settled = false;
    const done = (status: number | null, error: string | null, retryAfterMs?: number, withdrawn?: true): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      this.live.delete(req);
      cb({ status, error, retryAfterMs, durationMs: Math.round(performance.now() - started), withdrawn });
    };
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(body));
    headers['user-agent'] = 'orders-api-webhooks/1';
    const req = target.module.request({ ...target.options, agent: this.agentFor(target.origin, url.protocol), lookup: this.lookupOf(addresses), headers });
    this.live.set(req, done);
    // Past SOCKETS_PER_ORIGIN a request waits in the pool for a connection to come free. That
    // wait is ours, not the receiver's: charged to WEBHOOK_TIMEOUT_MS, a receiver answering well
    // within it timed out behind the origin's other deliveries, and each was sent again. So the
    // deadline starts once the request has its socket (connecting included), and a request that
    // got none for a whole timeout is given up unsent (the pool still holds it, but a destroyed
    // request is skipped when a socket comes free), for the dispatcher to try again later
    // without counting an attempt.
    let timer = setTimeout(() => {
      done(null, 'no connection to the receiver came free', undefined, true);
      req.destroy();
    }, this.opts.timeoutMs);
    req.once('socket', () => {
      if (settled) return;
      clearTimeout(timer);
      started = performance.now();
      timer = setTimeout(() => {
        done(null, 'timeout');
        req.destroy();
      }, this.opts.timeoutMs);
    });
    req.on('error', (err: NodeJS.ErrnoException) => done(null, err.code ?? err.message));
    req.on('response', (res) => {
      let read = 0;
      const status = res.statusCode ?? 0;
      const retryAfter = parseRetryAfter(res.headers['retry-after']);
      res.on('data', (chunk: Buffer) => {
        read += chunk.length;
        // The answer is not ours to store: past the cap the connection goes, not the memory.
        if (read > RESPONSE_CAP) {
          done(status, null, retryAfter);
          res.destroy();
        }
      });
      res.on('end', () => done(status, null, retryAfter));
      res.on('error', () => done(status, null, retryAfter));
    });
    req.end(body);
  }

  /** Cuts off every request under way or queued (each answered `withdrawn`) and refuses new ones alike. */
  close(): void {
    this.closed = true;
    for (const [req, done] of [...this.live]) {
      done(null, 'the sender is closed', undefined, true);
      req.destroy();
    }
    // A destroyed request stays in its pool's queue, and a pool whose socket closes opens a new
    // connection for the first request queued, destroyed or not: emptied first, none is left.
    for (const a of [...this.agents.values(), ...this.retired]) {
      // Removed, not just emptied: the pool still reads an empty queue's first request, and
      // throws on the one that is not there.
      const queues = a.requests as NodeJS.Dict<http.ClientRequest[]>;
      for (const name of Object.keys(queues)) delete queues[name];
      a.destroy();
    }
    this.agents.clear();
    this.retired.clear();
  }

  /** The request options of a URL (what `http.request(url)` would derive each time), and its module. */
  private targetOf(url: URL): { module: typeof http | typeof https; origin: string; options: http.RequestOptions } {
    let target = this.targets.get(url);
    if (!target) {
      const secure = url.protocol === 'https:';
      target = {
        module: secure ? https : http,
        origin: url.origin,
        options: {
          method: 'POST',
          protocol: url.protocol,
          hostname: url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname,
          port: url.port || undefined,
          path: `${url.pathname}${url.search}`,
        },
      };
      if (this.targets.size >= 10_000) this.targets.clear();
      this.targets.set(url, target);
    }
    return target;
  }

  /**
   * Connects only to addresses that passed the check, never to a second DNS answer. Asked for
   * all (Node's happy-eyeballs connect), it gives every checked address, so a name with IPv6 and
   * IPv4 answers still connects from a node with only one of them.
   */
  private lookupOf(addresses: Address[]): LookupFunction {
    const key = addresses.map((a) => `${a.family}/${a.address}`).join(',');
    let lookup = this.lookups.get(key);
    if (!lookup) {
      const all = addresses.map((a) => ({ address: a.address, family: a.family }));
      const first = addresses[0]!;
      lookup = (_host, options, cb) => {
        if (options.all) cb(null, all);
        else cb(null, first.address, first.family);
      };
      if (this.lookups.size >= 10_000) this.lookups.clear();
      this.lookups.set(key, lookup);
    }
    return lookup;
  }

  /**
   * The origin's pool, taken for one request: the pool used longest ago goes once MAX_AGENTS are
   * open. Not at once: its requests under way finish (destroying it reset them, each a failed
   * attempt of another tenant's endpoint), and each of its sockets closes as it comes free.
   */
  private agentFor(origin: string, protocol: string): http.Agent {
    let agent = this.agents.get(origin);
    if (agent) {
      // Last in the map: the order of the map is the order of last use.
      this.agents.delete(origin);
      this.agents.set(origin, agent);
      return agent;
    }
    // Idle keep-alive sockets close after IDLE_SOCKET_MS (the agent destroys a free socket that
    // times out).
    const sockets = this.opts.socketsPerOrigin ?? SOCKETS_PER_ORIGIN;
    const common = { keepAlive: true, maxSockets: sockets, maxFreeSockets: sockets, scheduling: 'lifo' as const, timeout: IDLE_SOCKET_MS };
    agent = protocol === 'https:' ? new https.Agent({ ...common, ca: this.opts.ca ? withSystemRoots(this.opts.ca) : undefined }) : new http.Agent(common);
    if (this.agents.size >= (this.opts.maxAgents ?? MAX_AGENTS)) {
      const [oldest, old] = this.agents.entries().next().value!;
      this.agents.delete(oldest);
      retire(old);
      // Kept for close() while a request of theirs may be under way.
      for (const a of this.retired) if (idle(a)) this.retired.delete(a);
      if (!idle(old)) this.retired.add(old);
    }
    this.agents.set(origin, agent);
    return agent;
  }

  /** Pools open, for tests. */
  get pools(): number {
    return this.agents.size;
  }
}

function idle(agent: http.Agent): boolean {
  return Object.keys(agent.sockets).length === 0 && Object.keys(agent.requests).length === 0;
}

/** Closes a pool's idle sockets now and each busy one as its request ends (keeping none free). */
function retire(agent: http.Agent): void {
  agent.maxFreeSockets = 0;
  for (const list of Object.values(agent.freeSockets)) for (const socket of list ?? []) socket.destroy();
}

// `ca` replaces Node's roots; a test CA is added to them, so public receivers still verify.
function withSystemRoots(ca: string | Buffer | (string | Buffer)[]): (string | Buffer)[] {
  return [...(Array.isArray(ca) ? ca : [ca]), ...(rootCertificates as readonly string[])];
}
