// One webhook POST (CONTRACT §10, SPEC §3.3): to the address the SSRF check passed (pinned
// through `lookup`, so no second DNS answer is used), over a keep-alive pool per origin, never
// following a redirect, with a deadline over the whole exchange (WEBHOOK_TIMEOUT_MS), reading at
// most RESPONSE_CAP bytes of the answer. TLS verifies the certificate against the URL's host
// name; tests add their own CA through `ca`, never by turning verification off.

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
}

export interface SenderOptions {
  timeoutMs: number;
  /** Extra CA certificates (PEM) to trust, beside the system's. */
  ca?: string | Buffer | (string | Buffer)[];
}

/** Retry-After as delay-seconds or an HTTP-date (RFC 9110 §10.2.3), in ms from now. */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

export class WebhookSender {
  private readonly agents = new Map<string, http.Agent>();

  constructor(private readonly opts: SenderOptions) {}

  send(url: URL, address: Address, headers: Record<string, string>, body: string): Promise<SendResult> {
    const started = performance.now();
    const secure = url.protocol === 'https:';
    const lookup: LookupFunction = (_host, options, cb) => {
      if (options.all) cb(null, [{ address: address.address, family: address.family }]);
      else cb(null, address.address, address.family);
    };
    return new Promise((resolve) => {
      let settled = false;
      const done = (status: number | null, error: string | null, retryAfterMs?: number): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve({ status, error, retryAfterMs, durationMs: Math.round(performance.now() - started) });
      };
      const req = (secure ? https : http).request(url, {
        method: 'POST',
        agent: this.agentFor(url),
        lookup,
        headers: { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'user-agent': 'orders-api-webhooks/1' },
      });
      const timer = setTimeout(() => {
        done(null, 'timeout');
        req.destroy();
      }, this.opts.timeoutMs);
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
    });
  }

  close(): void {
    for (const a of this.agents.values()) a.destroy();
    this.agents.clear();
  }

  private agentFor(url: URL): http.Agent {
    let agent = this.agents.get(url.origin);
    if (!agent) {
      const common = { keepAlive: true, maxSockets: SOCKETS_PER_ORIGIN, maxFreeSockets: SOCKETS_PER_ORIGIN, scheduling: 'lifo' as const };
      agent = url.protocol === 'https:' ? new https.Agent({ ...common, ca: this.opts.ca ? withSystemRoots(this.opts.ca) : undefined }) : new http.Agent(common);
      this.agents.set(url.origin, agent);
    }
    return agent;
  }
}

// `ca` replaces Node's roots; a test CA is added to them, so public receivers still verify.
function withSystemRoots(ca: string | Buffer | (string | Buffer)[]): (string | Buffer)[] {
  return [...(Array.isArray(ca) ? ca : [ca]), ...(rootCertificates as readonly string[])];
}
