// The webhook dispatcher (issue 5; SPEC §3.3 and §6; CONTRACT §10). It runs beside the actor host
// and reads that host's LMDB only, so in cluster mode every actor node dispatches the events its
// own partitions emitted.
//
//   outbox ──pump──▶ one delivery per matching enabled endpoint, written durably in the same
//                    transaction that removes the outbox row (a crash redoes the whole fan-out
//                    or none of it)
//   deliveries ──per-endpoint worker──▶ sign (batched, actors/signer.ts) ──▶ POST ──▶ outcome
//                    committed; a pending delivery is indexed by (endpoint, due time), so each
//                    endpoint's worker takes them in retry order, a few at a time (paced)
//
// At least once: a delivery leaves `pending` only when its outcome is committed, so a process
// killed at any moment resends, after restart, what it may have sent already, with the event's
// stored id. Receivers deduplicate on that id (SPEC §6.2).
//
// Endpoints live in their tenant's partition. When this host owns it they are read from the
// local table; otherwise (cluster mode) they are asked of their owner over the bus and kept for
// ENDPOINT_CACHE_MS, so a change to an endpoint reaches other nodes' dispatchers within that.

import type { Bus } from '../common/bus.js';
import { newId, partitionFor, partitionOf } from '../common/ids.js';
import type { Logger } from '../common/log.js';
import { signatureHeaders } from '../common/webhook-signature.js';
import { eventBody } from '../gateway/resources/event-data.js';
import type { Command, ListPage, Result } from '../proto/messages.js';
import type { DeliveryAttempt, DeliveryRecord, EndpointRecord, EventRecord, OutboxEntry } from '../proto/webhooks.js';
import type { Store, Table, Write } from '../storage/store.js';
import { EVENTS, OUTBOX } from './events.js';
import { Signer } from './signer.js';
import { DELIVERIES, ENDPOINTS, liveSecrets, MAX_ENDPOINTS_PER_TENANT, pendingPrefix, wants } from './webhooks.js';
import { WebhookSender, type SendResult } from './webhook-send.js';
import { parseTarget, resolveTarget, systemResolver, TargetRefused, type Resolver } from './webhook-target.js';

export interface DispatchOptions {
  /** Seconds between attempts (WEBHOOK_RETRY_SCHEDULE): one more attempt than entries. */
  retrySchedule: number[];
  timeoutMs: number;
  /** An endpoint failing without a success for this long is disabled (WEBHOOK_DISABLE_AFTER_HOURS). */
  disableAfterMs: number;
  allowPrivateTargets: boolean;
  /** DNS for delivery targets; tests inject one. */
  resolver?: Resolver;
  /** Extra CA certificates (PEM) receivers' certificates may chain to (tests). */
  ca?: string | Buffer | (string | Buffer)[];
  /** Cluster mode: reaches the owner of a tenant's endpoints on another node. */
  remote?: Bus;
  /** Most deliveries in flight to one endpoint. */
  perEndpoint?: number;
}

interface HostLink {
  owns(partition: number): boolean;
  send(cmd: Command): Promise<Result<unknown>>;
  now(): number;
  log: Logger;
}

interface Worker {
  tenant: string;
  running: boolean;
  again: boolean;
  timer: NodeJS.Timeout | undefined;
  /** Deliveries the fan-out just created, handed over so the first attempt needs no scan. */
  fresh: DeliveryRecord[];
}

const FANOUT_CHUNK = 64;
const PER_ENDPOINT = 16;
const ENDPOINT_CACHE_MS = 2000;
const RETRY_AFTER_FAILURE_MS = 1000;
/** Jitter spreads retries of many deliveries failing together (±20 %). */
const JITTER = 0.2;
const BODY_CACHE = 256;
/** Endpoints whose failing clock is kept; past it the oldest clock is forgotten (restarts later). */
const MAX_FAILING = 100_000;

export class Dispatcher {
  private readonly events: Table<EventRecord>;
  private readonly outbox: Table<OutboxEntry>;
  private readonly endpoints: Table<EndpointRecord>;
  private readonly deliveries: Table<DeliveryRecord>;
  private readonly workers = new Map<string, Worker>();
  private readonly remoteCache = new Map<string, { at: number; endpoints: EndpointRecord[] }>();
  private readonly bodies = new Map<string, string>();
  private readonly urls = new Map<string, URL>();
  private readonly failing = new Map<string, number>();
  private readonly signer = new Signer();
  private readonly sender: WebhookSender;
  private readonly resolver: Resolver;
  private pumping = false;
  private pumpAgain = false;
  private pumpTimer: NodeJS.Timeout | undefined;
  private closing = false;
  private readonly busy = new Set<Promise<unknown>>();
  private outcomes: { write: Write<unknown>; done: (err?: unknown) => void }[] = [];

  constructor(
    private readonly store: Store,
    private readonly opts: DispatchOptions,
    private readonly host: HostLink,
  ) {
    this.events = store.table(EVENTS);
    this.outbox = store.table(OUTBOX);
    this.endpoints = store.table(ENDPOINTS);
    this.deliveries = store.table(DELIVERIES);
    this.sender = new WebhookSender({ timeoutMs: opts.timeoutMs, ca: opts.ca });
    this.resolver = opts.resolver ?? systemResolver;
  }

  /** Resumes what a previous process left: the outbox, and every pending delivery. */
  start(): void {
    this.kick();
    let after: [number | string, string] | undefined;
    for (;;) {
      const rows = this.store.scan(this.deliveries as Table<unknown>, { prefix: pendingPrefix(), after, reverse: false, limit: 1000 });
      for (const { id } of rows) {
        const d = this.deliveries.get(id);
        if (d && !this.workers.has(d.endpointId)) this.wake(d.endpointId, d.tenant);
      }
      const last = rows[rows.length - 1];
      if (rows.length < 1000 || !last) break;
      // Keys are (endpoint, due time, id), and v is the endpoint: resuming at (endpoint, id), a
      // string where a number (the due time) stands, lands past that endpoint's keys (ordered-
      // binary sorts numbers before strings), so each endpoint is woken once.
      after = [last.v, last.id];
    }
  }

  /** Something was added to the outbox: fan it out soon. */
  kick(): void {
    if (this.closing) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    setImmediate(() => this.track(this.pump()));
  }

  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.pumpTimer);
    for (const w of this.workers.values()) clearTimeout(w.timer);
    await Promise.allSettled([...this.busy]);
    this.sender.close();
    await this.signer.close();
  }

  private track(p: Promise<unknown>): void {
    this.busy.add(p);
    void p.finally(() => this.busy.delete(p));
  }

  private async pump(): Promise<void> {
    try {
      do {
        this.pumpAgain = false;
        for (;;) {
          if (this.closing) return;
          const rows = this.store.scan(this.outbox as Table<unknown>, { prefix: [], after: undefined, reverse: false, limit: FANOUT_CHUNK });
          if (!rows.length) break;
          await this.fanOut(rows.map((r) => r.id));
        }
      } while (this.pumpAgain);
      this.pumping = false;
    } catch (err) {
      this.host.log.error({ err }, 'webhook fan-out failed; retrying');
      this.pumpTimer = setTimeout(() => {
        this.pumping = false;
        this.kick();
      }, RETRY_AFTER_FAILURE_MS).unref();
    }
  }

  /** Turns outbox rows into deliveries, in one transaction with their removal. */
  private async fanOut(ids: string[]): Promise<void> {
    const now = this.host.now();
    const writes: Write<unknown>[] = [];
    const woken = new Map<string, { tenant: string; fresh: DeliveryRecord[] }>();
    for (const id of ids) {
      const row = this.outbox.get(id);
      if (!row) continue;
      writes.push({ table: this.outbox as Table<unknown>, id, before: row, after: undefined });
      // An event swept by retention before it was fanned out has nobody left to tell.
      const event = this.events.get(id);
      if (!event) continue;
      const targets = event.endpointId
        ? (await this.endpointsOf(event.tenant)).filter((e) => e.id === event.endpointId && e.status === 'enabled')
        : (await this.endpointsOf(event.tenant)).filter((e) => wants(e, event.type));
      for (const e of targets) {
        const d: DeliveryRecord = {
          id: newId('delivery', partitionOf(event.id)),
          tenant: event.tenant,
          version: 1,
          endpointId: e.id,
          eventId: event.id,
          eventType: event.type,
          status: 'pending',
          nextAttemptAt: now,
          attempts: [],
          createdAt: now,
          updatedAt: now,
        };
        writes.push({ table: this.deliveries as Table<unknown>, id: d.id, before: undefined, after: d });
        const entry = woken.get(e.id);
        if (entry) entry.fresh.push(d);
        else woken.set(e.id, { tenant: e.tenant, fresh: [d] });
      }
    }
    // First attempts start while this commit flushes: should it never land, the outbox rows it
    // removes stay, and the fan-out is done again (at least once). Each outcome's commit queues
    // behind it, so an outcome is never stored before its delivery.
    const committed = this.store.commit(writes);
    for (const [endpointId, { tenant, fresh }] of woken) this.wake(endpointId, tenant, fresh);
    await committed;
  }

  private async endpointsOf(tenant: string): Promise<EndpointRecord[]> {
    const partition = partitionFor(tenant);
    if (this.host.owns(partition)) {
      const rows = this.store.scan(this.endpoints as Table<unknown>, { prefix: [tenant, '*', 'createdAt'], after: undefined, reverse: false, limit: MAX_ENDPOINTS_PER_TENANT });
      return rows.flatMap(({ id }) => {
        const e = this.endpoints.get(id);
        return e && e.tenant === tenant ? [e] : [];
      });
    }
    const cached = this.remoteCache.get(tenant);
    if (cached && this.host.now() - cached.at < ENDPOINT_CACHE_MS) return cached.endpoints;
    if (!this.opts.remote) throw new Error(`no owner for the endpoints of partition ${partition}`);
    const answers = await this.opts.remote.scatter({
      kind: 'webhook.list',
      query: { tenant, filter: undefined, sort: 'createdAt', dir: 'asc', after: undefined, limit: MAX_ENDPOINTS_PER_TENANT, withChildren: true },
    });
    const endpoints: EndpointRecord[] = [];
    for (const a of answers) {
      if (!a.ok) throw new Error(`the owner of partition ${partition} did not answer: ${a.error.detail}`);
      for (const row of (a.value as ListPage<EndpointRecord>).rows) endpoints.push(row.record);
    }
    if (this.remoteCache.size > 10_000) this.remoteCache.clear();
    this.remoteCache.set(tenant, { at: this.host.now(), endpoints });
    return endpoints;
  }

  private async endpoint(tenant: string, id: string): Promise<EndpointRecord | undefined> {
    if (this.host.owns(partitionFor(tenant))) {
      const e = this.endpoints.get(id);
      return e && e.tenant === tenant ? e : undefined;
    }
    return (await this.endpointsOf(tenant)).find((e) => e.id === id);
  }

  private wake(endpointId: string, tenant: string, fresh: DeliveryRecord[] = []): void {
    if (this.closing) return;
    let w = this.workers.get(endpointId);
    if (!w) {
      w = { tenant, running: false, again: false, timer: undefined, fresh: [] };
      this.workers.set(endpointId, w);
    }
    w.fresh.push(...fresh);
    clearTimeout(w.timer);
    w.timer = undefined;
    if (w.running) {
      w.again = true;
      return;
    }
    this.track(this.work(endpointId, w));
  }

  /** One endpoint's deliveries, due ones first, a few in flight at a time. */
  private async work(endpointId: string, w: Worker): Promise<void> {
    w.running = true;
    let retryIn: number | undefined;
    try {
      do {
        w.again = false;
        for (;;) {
          if (this.closing) return;
          const now = this.host.now();
          const handedOver = w.fresh.length > 0;
          const records = handedOver ? this.freshOf(w) : this.dueOf(endpointId, w, now);
          if (typeof records === 'number') {
            retryIn = records;
            break;
          }
          if (!records?.length) {
            if (handedOver) continue;
            break;
          }
          const endpoint = await this.endpoint(w.tenant, endpointId);
          if (!endpoint || endpoint.status !== 'enabled') {
            await Promise.all(records.map((d) => this.settle(d, { attempt: d.attempts.length, at: now, outcome: 'failed', responseStatus: null, error: endpoint ? 'endpoint disabled' : 'endpoint deleted', durationMs: 0 }, undefined)));
            continue;
          }
          await this.attempt(endpoint, records);
        }
      } while (w.again);
    } catch (err) {
      this.host.log.error({ err, endpointId }, 'webhook worker failed; retrying');
      retryIn = RETRY_AFTER_FAILURE_MS;
    } finally {
      w.running = false;
    }
    if (retryIn !== undefined && !this.closing) {
      w.timer = setTimeout(() => this.wake(endpointId, w.tenant), Math.min(retryIn, 2 ** 31 - 1));
      w.timer.unref();
    } else if (!w.timer) {
      this.workers.delete(endpointId);
    }
  }

  /** The next deliveries the fan-out handed over, still pending as committed. */
  private freshOf(w: Worker): DeliveryRecord[] {
    return w.fresh.splice(0, this.opts.perEndpoint ?? PER_ENDPOINT).flatMap((f) => {
      // Not stored yet: its fan-out commit is on its way, and nothing can have tried it. Stored:
      // a scan may have found and tried it already.
      const d = this.deliveries.get(f.id);
      if (!d) return [f];
      return d.status === 'pending' && d.version === f.version ? [d] : [];
    });
  }

  /** Due pending deliveries in due order; ms until the first is due; or undefined for none. */
  private dueOf(endpointId: string, w: Worker, now: number): DeliveryRecord[] | number | undefined {
    // The scan sees every pending delivery, the handed-over ones included.
    w.fresh = [];
    const rows = this.store.scan(this.deliveries as Table<unknown>, { prefix: pendingPrefix(endpointId), after: undefined, reverse: false, limit: this.opts.perEndpoint ?? PER_ENDPOINT });
    if (!rows.length) return undefined;
    const due = rows.filter((r) => typeof r.v === 'number' && r.v <= now);
    if (!due.length) return Math.max(0, (rows[0]!.v as number) - now);
    return due.flatMap(({ id }) => {
      const d = this.deliveries.get(id);
      return d ? [d] : [];
    });
  }

  private async attempt(endpoint: EndpointRecord, records: DeliveryRecord[]): Promise<void> {
    const now = this.host.now();
    let target: { url: URL; address: { address: string; family: 4 | 6 } } | undefined;
    let refused: string | undefined;
    try {
      const url = this.urlOf(endpoint);
      // Checked at every delivery, after resolution; the send connects to what was checked.
      const [address] = await resolveTarget(url, this.resolver, this.opts.allowPrivateTargets);
      target = { url, address: address! };
    } catch (err) {
      if (!(err instanceof TargetRefused)) throw err;
      refused = `refused target: ${err.message}`;
    }
    const secrets = liveSecrets(endpoint, now);
    const t = Math.floor(now / 1000);
    let gone = false;
    await Promise.all(
      records.map(async (d) => {
        const event = this.events.get(d.eventId);
        if (!event) {
          await this.settle(d, { attempt: d.attempts.length + 1, at: now, outcome: 'failed', responseStatus: null, error: 'event no longer kept', durationMs: 0 }, undefined);
          return;
        }
        let res: SendResult;
        if (target) {
          const body = this.bodyOf(event, endpoint);
          const sig = await this.signer.sign({ id: event.id, t, body, secrets });
          res = await this.sender.send(target.url, target.address, signatureHeaders(event.id, t, sig), body);
        } else {
          res = { status: null, error: refused ?? 'refused target', retryAfterMs: undefined, durationMs: 0 };
        }
        gone = (await this.record(d, res, endpoint)) || gone;
      }),
    );
    if (gone) this.remoteCache.delete(endpoint.tenant);
  }

  /** The endpoint's URL, parsed and checked once per version of the endpoint. */
  private urlOf(endpoint: EndpointRecord): URL {
    const key = `${endpoint.id}@${endpoint.version}`;
    let url = this.urls.get(key);
    if (!url) {
      url = parseTarget(endpoint.endpointUrl, this.opts.allowPrivateTargets);
      if (this.urls.size >= 10_000) this.urls.clear();
      this.urls.set(key, url);
    }
    return url;
  }

  private bodyOf(event: EventRecord, endpoint: EndpointRecord): string {
    const key = `${event.id}\u0000${endpoint.apiVersion}`;
    let body = this.bodies.get(key);
    if (body === undefined) {
      body = eventBody(event, endpoint.apiVersion);
      // A fan-out renders its event once for all its endpoints.
      if (this.bodies.size >= BODY_CACHE) this.bodies.delete(this.bodies.keys().next().value!);
      this.bodies.set(key, body);
    }
    return body;
  }

  /** Applies the delivery policy to one answer; true when the endpoint was disabled. */
  private async record(d: DeliveryRecord, res: SendResult, endpoint: EndpointRecord): Promise<boolean> {
    const now = this.host.now();
    const n = d.attempts.length + 1;
    const base = { attempt: n, at: now, responseStatus: res.status, error: res.error, durationMs: res.durationMs };
    const s = res.status;
    if (s !== null && s >= 200 && s < 300) {
      this.failing.delete(endpoint.id);
      await this.settle(d, { ...base, outcome: 'delivered' }, undefined, 'delivered');
      return false;
    }
    if (s === 410) {
      await this.settle(d, { ...base, outcome: 'disabled' }, undefined);
      await this.disable(endpoint, 'gone');
      return true;
    }
    // No success to this endpoint for longer than allowed, across its deliveries: disable.
    if (now - this.failingSince(endpoint.id, d.attempts[0]?.at ?? now) >= this.opts.disableAfterMs) {
      await this.settle(d, { ...base, outcome: 'disabled' }, undefined);
      await this.disable(endpoint, 'failing');
      return true;
    }
    const retryable = s === null || (s >= 300 && s < 400) || s === 408 || s === 429 || s >= 500;
    const wait = this.opts.retrySchedule[n - 1];
    if (!retryable || wait === undefined) {
      await this.settle(d, { ...base, outcome: 'failed' }, undefined);
      return false;
    }
    const jittered = wait * 1000 * (1 + (Math.random() * 2 - 1) * JITTER);
    // Retry-After is honoured, up to the longest wait the schedule allows.
    const longest = Math.max(...this.opts.retrySchedule) * 1000;
    const delay = Math.max(jittered, Math.min(res.retryAfterMs ?? 0, longest));
    await this.settle(d, { ...base, outcome: 'retry' }, now + Math.round(delay));
    return false;
  }

  /**
   * Since when an endpoint has had no success: the first attempt of the oldest delivery that
   * failed since the last success this process saw. Kept in memory beside the workers (an
   * endpoint may fail its every delivery and sit idle between events); after a restart the clock
   * starts again at the first attempt of the first delivery that fails, which can only delay a
   * disable, never cause one early.
   */
  private failingSince(endpointId: string, firstAttempt: number): number {
    let since = this.failing.get(endpointId);
    if (since === undefined) {
      if (this.failing.size >= MAX_FAILING) this.failing.delete(this.failing.keys().next().value!);
      this.failing.set(endpointId, (since = firstAttempt));
    }
    return since;
  }

  /** Commits an attempt; `next` keeps the delivery pending until then. */
  private async settle(d: DeliveryRecord, attempt: DeliveryAttempt, next: number | undefined, status: 'delivered' | 'failed' = 'failed'): Promise<void> {
    const after: DeliveryRecord = {
      ...d,
      version: d.version + 1,
      status: next === undefined ? status : 'pending',
      nextAttemptAt: next,
      attempts: [...d.attempts, attempt],
      updatedAt: attempt.at,
    };
    await this.commitSoon({ table: this.deliveries as Table<unknown>, id: d.id, before: d, after });
  }

  /**
   * Outcomes settled in one event-loop turn share one transaction: a fan-out's answers arrive
   * together, and one commit of many records costs far less than many commits of one.
   */
  private commitSoon(write: Write<unknown>): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.outcomes.length === 0) {
        setImmediate(() => {
          const batch = this.outcomes;
          this.outcomes = [];
          this.store.commit(batch.map((o) => o.write)).then(
            () => batch.forEach((o) => o.done()),
            (err: unknown) => batch.forEach((o) => o.done(err)),
          );
        });
      }
      this.outcomes.push({ write, done: (err) => (err === undefined ? resolve() : reject(err as Error)) });
    });
  }

  private async disable(endpoint: EndpointRecord, reason: string): Promise<void> {
    const partition = partitionFor(endpoint.tenant);
    const cmd: Command = { kind: 'webhook.disable', tenant: endpoint.tenant, partition, id: endpoint.id, reason };
    const result = this.host.owns(partition) ? await this.host.send(cmd) : await this.opts.remote?.send(cmd);
    if (!result?.ok) this.host.log.warn({ endpointId: endpoint.id, reason }, 'could not disable a webhook endpoint');
    else this.host.log.warn({ endpointId: endpoint.id, reason }, 'webhook endpoint disabled');
  }
}
