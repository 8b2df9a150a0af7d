// The webhook dispatcher (issue 5; SPEC §3.3 and §6; CONTRACT §10). It runs beside the actor host
// and reads that host's LMDB only, so in cluster mode every actor node dispatches the events its
// own partitions emitted.
//
//   outbox ──pump──▶ one delivery per matching enabled endpoint, its id fixed by (event,
//                    endpoint). Each endpoint's first few go out at once, stored only with their
//                    outcome; the rest are stored for its worker. The outbox row goes once every
//                    delivery of its event is stored, so a crash before that fans the event out
//                    again, and what was stored is found by its id and not sent again.
//   first attempts ──one batch per fan-out──▶ sign all (actors/signer.ts) ──▶ POSTs started in
//                    one loop ──▶ outcomes committed per event-loop turn; no promise per delivery
//   deliveries ──per-endpoint worker──▶ the same, for retries and what the batch left: a pending
//                    delivery is indexed by (endpoint, due time), so each endpoint's worker takes
//                    them in retry order, a few at a time (paced). An endpoint is either in a
//                    batch or in its worker, so it never has more than `perEndpoint` in flight.
//
// At least once: a delivery leaves `pending` only when its outcome is committed, and an event
// leaves the outbox only when all its deliveries are stored, so a process killed at any moment
// resends, after restart, what it may have sent already, with the event's stored id. Receivers
// deduplicate on that id (SPEC §6.2).
//
// Endpoints live in their tenant's partition. When this host owns it they are read from the
// local table; otherwise (cluster mode) they are asked of their owner over the bus and kept for
// ENDPOINT_CACHE_MS, so a change to an endpoint reaches other nodes' dispatchers within that.

import { BoundedMap } from '../common/bounded-map.js';
import type { Bus } from '../common/bus.js';
import { derivedId, partitionFor } from '../common/ids.js';
import type { Logger } from '../common/log.js';
import { signatureHeaders, type SignTask } from '../common/webhook-signature.js';
import { gatherPage } from '../gateway/collection.js';
import { eventBody } from '../gateway/resources/event-data.js';
import type { Command, Query, Result } from '../proto/messages.js';
import type { DeliveryAttempt, DeliveryRecord, EndpointRecord, EventRecord, OutboxEntry } from '../proto/webhooks.js';
import type { Store, Table, Write } from '../storage/store.js';
import { EVENTS, OUTBOX } from './events.js';
import { Signer, type SignedPart } from './signer.js';
import { DELIVERIES, ENDPOINTS, liveSecrets, MAX_ENDPOINTS_PER_TENANT, pendingPrefix, wants } from './webhooks.js';
import { WebhookSender, type SendResult } from './webhook-send.js';
import { parseTarget, resolveTarget, systemResolver, TargetRefused, type Address, type Resolver } from './webhook-target.js';

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
  /** Most connections to one receiving origin (actors/webhook-send.ts; tests lower it). */
  socketsPerOrigin?: number;
  /** Most fresh deliveries held in memory for busy endpoints, all of them together (tests lower it). */
  maxHandedOver?: number;
  /** Signs deliveries (tests put one in that fails). */
  signer?: Signer;
  /** How long sends wait while storage is short of room (NO_ROOM_RETRY_MS; tests shorten it). */
  noRoomRetryMs?: number;
}

/**
 * What the host adds to DispatchOptions: how long events are kept (its sweep's retention). No
 * attempt is planned after its event is swept, whatever the jitter or a Retry-After would make
 * the wait.
 */
export interface DispatcherSettings extends DispatchOptions {
  eventRetentionMs: number;
}

interface HostLink {
  owns(partition: number): boolean;
  /** The endpoints of a tenant this node owns, oldest first (actors/webhooks.ts OwnedEndpoints). */
  ownedEndpoints(tenant: string): EndpointRecord[];
  send(cmd: Command): Promise<Result<unknown>>;
  now(): number;
  log: Logger;
}

/** Where a delivery connects (its URL and checked addresses), or why it may not. */
type Target = { url: URL; addresses: Address[] } | string;

/** A host's checked addresses, or why it was refused: asked for at `at`, `settled` once known. */
interface Resolution {
  at: number;
  answer: Promise<Address[] | string>;
  settled?: Address[] | string;
}

interface Worker {
  tenant: string;
  running: boolean;
  again: boolean;
  timer: NodeJS.Timeout | undefined;
  /** Deliveries the fan-out just created, handed over so the first attempt needs no scan. */
  fresh: DeliveryRecord[];
}

/** A delivery to try, with its event. */
interface Item {
  d: DeliveryRecord;
  event: EventRecord;
}

/** One endpoint's share of a batch; `done` once every outcome is committed, or on an error. */
interface Job {
  endpoint: EndpointRecord;
  items: Item[];
  done: (err: unknown, retrying: boolean) => void;
}

interface Decision {
  write: Write<unknown>;
  /** When the delivery is tried again; undefined when it is settled. */
  next: number | undefined;
  /** Why the endpoint is to be disabled, after the write. */
  disable: string | undefined;
}

const FANOUT_CHUNK = 64;
const PER_ENDPOINT = 16;
const ENDPOINT_CACHE_MS = 2000;
const RETRY_AFTER_FAILURE_MS = 1000;
/**
 * While storage is short of room for webhook deliveries (storage/room.ts), nothing is sent, and
 * the pump and the workers look again this much later: a delivery sent whose outcome could not be
 * stored would be sent again, however its receiver answered.
 */
const NO_ROOM_RETRY_MS = 30_000;
/** The room asked for before a pass looks at the outbox at all. */
const SEND_ROOM_BYTES = 1024 * 1024;
/**
 * The room held for each delivery sent until its outcome is stored (Store.holdRoom): what
 * commitCost charges a delivery record and its index entries. Held, it is not taken by other
 * sends meanwhile; without it, sends could go out whose outcomes no room was left to store, and
 * each would be sent again.
 */
const DELIVERY_ROOM_BYTES = 40 * 1024;
/**
 * A fan-out that keeps failing is retried every RETRY_AFTER_FAILURE_MS, but logged once this
 * often, with how many times it failed since: an owner down for an hour is 60 lines, not 3,600.
 */
const REPEAT_LOG_EVERY_MS = 60_000;
/** Failures logRepeated remembers at once; past it, the oldest are forgotten. */
const MAX_REPEATS_KEPT = 1000;
/** A pump pass starts from the beginning of the outbox at least this often. */
const FULL_PASS_MS = 1000;
/** Jitter spreads retries of many deliveries failing together (±20 %). */
const JITTER = 0.2;
/** Characters of rendered event bodies kept (a fan-out renders its event once per API version). */
const BODY_CACHE_CHARS = 4 * 1024 * 1024;
/** Endpoints of other nodes' tenants kept (cluster mode), counted one by one. */
const REMOTE_ENDPOINTS_KEPT = 50_000;
/** How long one DNS answer (checked) serves deliveries to its host. */
const RESOLVE_CACHE_MS = 1000;
/**
 * How long a host's last checked addresses stay in use while a new resolution of it is under
 * way or gets no answer (serve-stale, RFC 8767): deliveries to a host whose name servers fail go
 * on to the addresses checked last, for up to this long, rather than waiting or failing.
 */
const STALE_MS = 5 * 60_000;
/** Endpoints whose failing clock is kept; past it the oldest clock is forgotten (restarts later). */
const MAX_FAILING = 100_000;

export class Dispatcher {
  private readonly events: Table<EventRecord>;
  private readonly outbox: Table<OutboxEntry>;
  private readonly endpoints: Table<EndpointRecord>;
  private readonly deliveries: Table<DeliveryRecord>;
  private readonly workers = new Map<string, Worker>();
  private readonly remoteCache = new BoundedMap<string, { at: number; endpoints: EndpointRecord[] }>(REMOTE_ENDPOINTS_KEPT);
  private readonly bodies = new BoundedMap<string, string>(BODY_CACHE_CHARS);
  private readonly urls = new Map<string, URL>();
  private readonly resolved = new Map<string, Resolution>();
  /** Each host's last addresses that passed the check, and when they were resolved. */
  private readonly checked = new Map<string, { addresses: Address[]; at: number }>();
  private readonly failing = new Map<string, number>();
  /** When each endpoint last answered 2xx, as this process saw it. */
  private readonly succeeded = new Map<string, number>();
  /**
   * Since when `succeeded` knows every success: this process's start, or the newest success it
   * has forgotten to stay bounded. An endpoint missing from it may have succeeded before then.
   */
  private succeededKnownSince: number;
  private readonly signer: Signer;
  private readonly sender: WebhookSender;
  private readonly resolver: Resolver;
  private pumping = false;
  private pumpAgain = false;
  private pumpTimer: NodeJS.Timeout | undefined;
  private closing = false;
  private readonly busy = new Set<Promise<unknown>>();
  /** Failures that repeat (logRepeated), by what tells them apart: when last logged and seen, and how often since. */
  private readonly repeats = new BoundedMap<string, { at: number; last: number; since: number }>(MAX_REPEATS_KEPT);
  private outcomes: { write: Write<unknown>; done: (err?: unknown) => void }[] = [];
  /**
   * Outbox rows whose first attempts are out, by event id. `left` counts what is not stored yet:
   * each first attempt (with its outcome, or pending when it could not be sent) and the fan-out's
   * own commit (the deliveries handed to workers); the row is removed after the last. `failed`
   * marks one of them that could not be stored: the event is then fanned out again, and finds
   * the deliveries that were stored.
   */
  private readonly inFlight = new Map<string, { row: OutboxEntry; left: number; failed: boolean }>();
  /** Where a pass may start: past the outbox rows the last passes went through (see pump). */
  private pumpCursor: [number | string, string] | undefined;
  private fullPassAt = 0;
  /** A row behind the cursor waits: a row kept for its owner, a fan-out to redo. */
  private fullPassDue = true;
  /** After a pass that started at the cursor: a full pass within FULL_PASS_MS, even with no new event. */
  private fullPassTimer: NodeJS.Timeout | undefined;
  /** Deliveries handed to a worker whose storing commit failed: the event's next fan-out makes them anew. */
  private readonly unstored = new WeakSet<DeliveryRecord>();
  /** Fresh deliveries held by all workers together (`Worker.fresh`), bounded by MAX_HANDED_OVER. */
  private handedOverCount = 0;

  /** start() was called: until then nothing is sent. */
  private started = false;
  /** Most deliveries in flight to one endpoint (DispatchOptions.perEndpoint). */
  private readonly perEndpoint: number;
  /** How long sends wait while storage is short of room (DispatchOptions.noRoomRetryMs). */
  private readonly noRoomRetryMs: number;

  constructor(
    private readonly store: Store,
    private readonly opts: DispatcherSettings,
    private readonly host: HostLink,
  ) {
    this.events = store.table(EVENTS);
    this.outbox = store.table(OUTBOX);
    this.endpoints = store.table(ENDPOINTS);
    this.deliveries = store.table(DELIVERIES);
    this.sender = new WebhookSender({ timeoutMs: opts.timeoutMs, ca: opts.ca, socketsPerOrigin: opts.socketsPerOrigin });
    this.signer = opts.signer ?? new Signer();
    this.succeededKnownSince = host.now();
    this.resolver = opts.resolver ?? systemResolver;
    this.perEndpoint = opts.perEndpoint ?? PER_ENDPOINT;
    this.noRoomRetryMs = opts.noRoomRetryMs ?? NO_ROOM_RETRY_MS;
  }

  /** Resumes what a previous process left: the outbox, and every pending delivery. */
  start(): void {
    this.started = true;
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
    // Before start() (HostOptions.deferJobs) events only wait in the outbox: start() goes over it.
    if (this.closing || !this.started) return;
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
    clearTimeout(this.fullPassTimer);
    for (const w of this.workers.values()) clearTimeout(w.timer);
    // Requests under way are cut off first: a receiver that never answers would otherwise hold
    // shutdown for WEBHOOK_TIMEOUT_MS, past a supervisor's grace period. Each comes back
    // `withdrawn`, so its delivery is stored pending with no attempt counted against the
    // receiver, and is sent again after the restart (at least once: it may have arrived).
    this.sender.close();
    // What settles meanwhile may queue more: an outcome's commit, then its event's outbox row.
    while (this.busy.size) await Promise.allSettled([...this.busy]);
    await this.signer.close();
  }

  private track(p: Promise<unknown>): void {
    this.busy.add(p);
    void p.finally(() => this.busy.delete(p));
  }

  /**
   * Logs a failure at once the first time, then at most every REPEAT_LOG_EVERY_MS while it
   * repeats, with `repeated`: how many times it happened since it was last logged. Failures are
   * told apart by message, tenant and kind of error, so one never hides another.
   */
  private logRepeated(level: 'warn' | 'error', fields: { err?: unknown; tenant?: string; waiting?: number }, msg: string): void {
    const now = Date.now();
    const kind = fields.err instanceof Error ? fields.err.name : '';
    const key = `${msg}\u0000${fields.tenant ?? ''}\u0000${kind}`;
    const seen = this.repeats.get(key);
    if (seen !== undefined && now - seen.at < REPEAT_LOG_EVERY_MS) {
      seen.since++;
      seen.last = now;
      return;
    }
    // Repeats of an episode that ended long ago are not this one's.
    const repeated = seen !== undefined && now - seen.last < REPEAT_LOG_EVERY_MS ? seen.since : 0;
    this.host.log[level]({ ...fields, repeated }, msg);
    this.repeats.set(key, { at: now, last: now, since: 0 });
  }

  private async pump(): Promise<void> {
    try {
      do {
        this.pumpAgain = false;
        // Rows whose endpoints could not be read stay in the outbox; the scan goes on past them,
        // so one tenant's unreachable owner holds up no one else, and they are tried again later.
        // Rows whose first attempts are out stay too, up to WEBHOOK_TIMEOUT_MS: a pass starts
        // past those the last pass went through (new rows sort after them, by creation time),
        // and from the beginning whenever something there waits, nothing is out, or a second has
        // gone by; a pass from the cursor sets a timer for that full pass. So a row that sorts
        // behind the cursor (one committed after another of the same millisecond with a higher
        // id, or written under a clock that went back) waits about a second at most.
        const now = this.host.now();
        const full = this.fullPassDue || this.inFlight.size === 0 || now - this.fullPassAt >= FULL_PASS_MS || now < this.fullPassAt;
        if (full) {
          this.fullPassDue = false;
          this.fullPassAt = now;
        } else {
          this.fullPassTimer ??= setTimeout(
            () => {
              this.fullPassTimer = undefined;
              this.fullPassDue = true;
              this.kick();
            },
            Math.max(0, this.fullPassAt + FULL_PASS_MS - now),
          ).unref();
        }
        let after = full ? undefined : this.pumpCursor;
        let kept = 0;
        let chunk = FANOUT_CHUNK;
        let waitingForRoom = false;
        for (;;) {
          if (this.closing) return;
          if (!this.store.hasRoom('webhooks', SEND_ROOM_BYTES)) throw new ShortOfRoom();
          const rows = this.store.scan(this.outbox as Table<unknown>, { prefix: [], after, reverse: false, limit: chunk });
          if (!rows.length) break;
          try {
            kept += await this.fanOut(rows.map((r) => r.id));
            chunk = FANOUT_CHUNK;
          } catch (err) {
            if (!(err instanceof ShortOfRoom)) throw err;
            // No room to hold for this chunk's sends: fewer events at once. One event alone
            // (to many endpoints) that still does not fit waits, and the pass goes on past it,
            // so smaller events behind it still go out.
            if (chunk > 1) {
              chunk = Math.max(1, chunk >> 1);
              continue;
            }
            waitingForRoom = true;
            chunk = FANOUT_CHUNK;
          }
          const last = rows[rows.length - 1]!;
          after = [last.v, last.id];
          this.pumpCursor = after;
        }
        if (waitingForRoom) throw new ShortOfRoom();
        if (kept > 0) throw new WaitingForOwner(kept);
      } while (this.pumpAgain);
      this.pumping = false;
    } catch (err) {
      this.fullPassDue = true;
      // Events waiting for an owner that does not answer are an outage elsewhere, not a fault here.
      if (err instanceof WaitingForOwner) this.logRepeated('warn', { waiting: err.waiting }, 'webhook events wait for their endpoints\' owner; retrying');
      else if (err instanceof ShortOfRoom) this.logRepeated('warn', {}, 'webhook events wait for room in storage (STORAGE_RESERVE_MB); retrying');
      else this.logRepeated('error', { err }, 'webhook fan-out failed; retrying');
      this.pumpTimer = setTimeout(
        () => {
          this.pumping = false;
          this.kick();
        },
        err instanceof ShortOfRoom ? this.noRoomRetryMs : RETRY_AFTER_FAILURE_MS,
      ).unref();
    }
  }

  /**
   * Turns outbox rows into deliveries. Each endpoint's first few are sent at once and stored with
   * their outcome; the rest are stored here, for the endpoint's worker, in one transaction with
   * the removal of the rows none of whose deliveries went out (the others go with their last
   * outcome). Answers how many rows it kept because their tenant's endpoints could not be read
   * (an owner not answering).
   */
  private async fanOut(ids: string[]): Promise<number> {
    const now = this.host.now();
    const writes: Write<unknown>[] = [];
    const woken = new Map<string, { endpoint: EndpointRecord; items: Item[] }>();
    const unreadable = new Set<string>();
    const rows = new Map<string, OutboxEntry>();
    let kept = 0;
    for (const id of ids) {
      // Its first attempts are out; the row goes with their outcomes.
      if (this.inFlight.has(id)) continue;
      const row = this.outbox.get(id);
      if (!row) continue;
      // An event swept by retention before it was fanned out has nobody left to tell.
      const event = this.events.get(id);
      let all: EndpointRecord[] = [];
      if (event && !unreadable.has(event.tenant)) {
        try {
          all = await this.endpointsOf(event.tenant);
        } catch (err) {
          this.logRepeated('warn', { err, tenant: event.tenant }, 'webhook endpoints unreadable; the events wait');
          unreadable.add(event.tenant);
        }
      }
      if (event && unreadable.has(event.tenant)) {
        kept++;
        continue;
      }
      if (!event) {
        writes.push(this.outboxRemoval(id, row));
        continue;
      }
      rows.set(id, row);
      const targets = event.endpointId
        ? all.filter((e) => e.id === event.endpointId && e.status === 'enabled')
        : all.filter((e) => wants(e, event.type));
      const taken = new Set<string>();
      for (const e of targets) {
        const deliveryId = this.deliveryIdOf(event.id, e.id, taken);
        // Stored by an earlier fan-out of this event, before a crash or a failed attempt: it is
        // settled, or its endpoint's worker has it.
        if (deliveryId === undefined) continue;
        const d: DeliveryRecord = {
          id: deliveryId,
          tenant: event.tenant,
          // 0: not stored yet (see settled()).
          version: 0,
          endpointId: e.id,
          eventId: event.id,
          eventType: event.type,
          status: 'pending',
          nextAttemptAt: now,
          attempts: [],
          createdAt: now,
          updatedAt: now,
        };
        const entry = woken.get(e.id);
        if (entry) entry.items.push({ d, event });
        else woken.set(e.id, { endpoint: e, items: [{ d, event }] });
      }
    }
    if (this.closing) return kept;
    // Marks the deliveries it hands to workers as stored (version 1): they are, by this commit.
    // Endpoints some of whose deliveries were only stored, not held: their workers scan for them.
    const overflow = new Map<string, string>();
    let sending = 0;
    for (const { items } of woken.values()) sending += Math.min(items.length, this.perEndpoint);
    const release = sending ? this.store.holdRoom('webhooks', sending * DELIVERY_ROOM_BYTES) : () => undefined;
    if (!release) throw new ShortOfRoom();
    const jobs = this.freshBatch(woken, overflow);
    releaseAfter(jobs, release);
    const out = new Map<string, number>();
    const handed: DeliveryRecord[] = [];
    for (const { items } of woken.values()) {
      for (const { d } of items) {
        if (d.version === 0) out.set(d.eventId, (out.get(d.eventId) ?? 0) + 1);
        else {
          handed.push(d);
          writes.push({ table: this.deliveries as Table<unknown>, id: d.id, before: undefined, after: d });
        }
      }
    }
    for (const [id, row] of rows) {
      const left = out.get(id);
      if (left === undefined) writes.push(this.outboxRemoval(id, row));
      // One more than its first attempts: this commit, which stores what the workers got.
      else this.inFlight.set(id, { row, left: left + 1, failed: false });
    }
    // The batch starts before this commit lands (its signatures are asked for first, so the
    // pool signs while the commit is encoded). A handed-over delivery is tried by its worker, and
    // an outcome stored, only after this commit was queued: lmdb-js commits in queue order.
    if (jobs.length) void this.sendAll(jobs);
    try {
      if (writes.length) await this.store.commit(writes, { tier: 'webhooks' });
    } catch (err) {
      // What the workers got is not stored: they drop what they have not taken yet (freshOf),
      // and each event is fanned out again once its first attempts are done. The rows this
      // commit was to remove stay, for the pump's retry.
      for (const d of handed) this.unstored.add(d);
      for (const id of out.keys()) this.firstSettled(id, false);
      throw err;
    }
    for (const id of out.keys()) this.firstSettled(id, true);
    // Woken only now: a scan started before this commit landed would not see them.
    for (const [endpointId, tenant] of overflow) this.wake(endpointId, tenant);
    return kept;
  }

  private outboxRemoval(id: string, row: OutboxEntry): Write<unknown> {
    return { table: this.outbox as Table<unknown>, id, before: row, after: undefined };
  }

  /**
   * The id of the delivery of an event to an endpoint, or undefined when it is stored already.
   * Two endpoints whose ids hash alike under one event (odds about n²/2^53 for n endpoints) must
   * not share one: the later (endpoints come oldest first, so the same one every time) takes the
   * next id derived with a count. `taken` holds the ids this fan-out of the event gave out.
   */
  private deliveryIdOf(eventId: string, endpointId: string, taken: Set<string>): string | undefined {
    for (let n = 0; ; n++) {
      const id = derivedId('delivery', eventId, n === 0 ? endpointId : `${endpointId}\u0000${n}`);
      if (taken.has(id)) continue;
      taken.add(id);
      const stored = this.deliveries.get(id);
      if (stored === undefined) return id;
      if (stored.eventId === eventId && stored.endpointId === endpointId) return undefined;
    }
  }

  /**
   * The first attempts of a fan-out, as one batch: signed together, their requests started in
   * one loop, their outcomes committed together, with no promise chain per delivery. An endpoint
   * whose worker is busy gets its deliveries handed over instead, so pacing holds: an endpoint
   * has at most `perEndpoint` deliveries in flight, from the batch or from its worker, never both.
   * What it hands over is marked stored (version 1): the caller stores it.
   */
  private freshBatch(woken: Map<string, { endpoint: EndpointRecord; items: Item[] }>, overflow: Map<string, string>): Job[] {
    const jobs: Job[] = [];
    let left = 0;
    let finished: () => void = () => undefined;
    const stored = (items: Item[]): DeliveryRecord[] =>
      items.map(({ d }) => {
        d.version = 1;
        return d;
      });
    for (const [endpointId, { endpoint, items }] of woken) {
      let w = this.workers.get(endpointId);
      if (!w) {
        w = { tenant: endpoint.tenant, running: false, again: false, timer: undefined, fresh: [] };
        this.workers.set(endpointId, w);
      }
      if (w.running) {
        if (!this.handOver(w, stored(items))) overflow.set(endpointId, endpoint.tenant);
        w.again = true;
        continue;
      }
      // A timer the worker set for a later retry stays: the batch does not scan.
      w.running = true;
      if (!this.handOver(w, stored(items.slice(this.perEndpoint)))) overflow.set(endpointId, endpoint.tenant);
      const worker = w;
      left++;
      jobs.push({
        endpoint,
        items: items.length > this.perEndpoint ? items.slice(0, this.perEndpoint) : items,
        done: (err, retrying) => {
          this.release(endpointId, worker, err, retrying);
          if (--left === 0) finished();
        },
      });
    }
    if (jobs.length) this.track(new Promise<void>((resolve) => (finished = resolve)));
    return jobs;
  }

  /**
   * One of the things an event's outbox row waits for (`inFlight`) is stored (`ok`), or could
   * not be. After the last one the row goes, or, if any could not be stored, the event is fanned
   * out again later: what was stored is found by its id, the rest is sent again.
   */
  private firstSettled(eventId: string, ok: boolean): void {
    const f = this.inFlight.get(eventId);
    if (!f) return;
    if (!ok) f.failed = true;
    if (--f.left > 0) return;
    if (f.failed) {
      this.inFlight.delete(eventId);
      this.pumpLater();
      return;
    }
    this.queueOutcome(this.outboxRemoval(eventId, f.row), (err) => {
      this.inFlight.delete(eventId);
      if (err !== undefined) this.pumpLater();
    });
  }

  /** Fans out again after RETRY_AFTER_FAILURE_MS: what a failure left in the outbox. */
  private pumpLater(): void {
    if (this.closing) return;
    setTimeout(() => {
      this.fullPassDue = true;
      this.kick();
    }, RETRY_AFTER_FAILURE_MS).unref();
  }

  /** After a batch: the worker resumes what is left (a retry to schedule, more deliveries). */
  private release(endpointId: string, w: Worker, err: unknown, retrying: boolean): void {
    w.running = false;
    if (this.closing) return;
    if (err !== undefined) {
      this.host.log.error({ err, endpointId }, 'webhook delivery failed; retrying');
      clearTimeout(w.timer);
      w.timer = setTimeout(() => this.wake(endpointId, w.tenant), RETRY_AFTER_FAILURE_MS);
      w.timer.unref();
      return;
    }
    if (retrying || w.again || w.fresh.length) this.track(this.work(endpointId, w));
    else if (!w.timer) this.workers.delete(endpointId);
  }

  private async endpointsOf(tenant: string): Promise<EndpointRecord[]> {
    const partition = partitionFor(tenant);
    if (this.host.owns(partition)) return this.host.ownedEndpoints(tenant);
    const cached = this.remoteCache.get(tenant);
    if (cached && this.host.now() - cached.at < ENDPOINT_CACHE_MS) return cached.endpoints;
    if (!this.opts.remote) throw new Error(`no owner for the endpoints of partition ${partition}`);
    // Asked again past a page its owner cut to fit its reply (gatherPage), so none is left out.
    const remote = this.opts.remote;
    const owners = {
      gather: async (q: Query): Promise<unknown[]> =>
        (await remote.scatter(q)).map((a) => {
          if (!a.ok) throw new Error(`the owner of partition ${partition} did not answer: ${a.error.detail}`);
          return a.value;
        }),
    };
    const page = await gatherPage<EndpointRecord>(owners, 'webhook.list', { tenant, filter: undefined, sort: 'createdAt', dir: 'asc', after: undefined, limit: MAX_ENDPOINTS_PER_TENANT, withChildren: true });
    const endpoints = page.rows.map((row) => row.record);
    this.remoteCache.set(tenant, { at: this.host.now(), endpoints }, endpoints.length + 1);
    return endpoints;
  }

  private async endpoint(tenant: string, id: string): Promise<EndpointRecord | undefined> {
    if (this.host.owns(partitionFor(tenant))) {
      const e = this.endpoints.get(id);
      return e && e.tenant === tenant ? e : undefined;
    }
    return (await this.endpointsOf(tenant)).find((e) => e.id === id);
  }

  private wake(endpointId: string, tenant: string): void {
    if (this.closing) return;
    let w = this.workers.get(endpointId);
    if (!w) {
      w = { tenant, running: false, again: false, timer: undefined, fresh: [] };
      this.workers.set(endpointId, w);
    }
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
          const release = this.store.holdRoom('webhooks', this.perEndpoint * DELIVERY_ROOM_BYTES);
          if (!release) {
            retryIn = this.noRoomRetryMs;
            break;
          }
          // Held until this batch's outcomes are stored.
          try {
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
            const endpoint = await this.endpoint(w.tenant, endpointId).catch((err: unknown) => {
              throw new EndpointsUnreadable(err);
            });
            if (!endpoint || endpoint.status !== 'enabled') {
              await Promise.all(records.map((d) => this.settle(d, { attempt: d.attempts.length + 1, at: now, outcome: 'failed', responseStatus: null, error: endpoint ? 'endpoint disabled' : 'endpoint deleted', durationMs: 0 }, undefined)));
              continue;
            }
            await this.attempt(endpoint, records);
          } finally {
            release();
          }
        }
      } while (w.again);
    } catch (err) {
      // Once a minute per tenant and kind of error, however many endpoints' workers meet it. An
      // owner that does not answer (down, or not yet announced after a restart) is an outage
      // elsewhere: a warning, as for the fan-out.
      if (err instanceof EndpointsUnreadable) this.logRepeated('warn', { err: err.cause, tenant: w.tenant }, 'webhook endpoints unreadable; the deliveries wait');
      else this.logRepeated('error', { err, tenant: w.tenant }, 'webhook worker failed; retrying');
      retryIn = RETRY_AFTER_FAILURE_MS;
    } finally {
      w.running = false;
    }
    if (retryIn !== undefined && !this.closing) {
      // A timer set before (one a batch left running, then release() called this) is replaced,
      // not left to fire beside the new one.
      clearTimeout(w.timer);
      w.timer = setTimeout(() => this.wake(endpointId, w.tenant), Math.min(retryIn, 2 ** 31 - 1));
      w.timer.unref();
    } else if (!w.timer) {
      this.workers.delete(endpointId);
    }
  }

  /**
   * Hands new deliveries to a worker, within MAX_FRESH for it and MAX_HANDED_OVER for all; false
   * when some were left out: stored, they are found by the worker's due scan.
   */
  private handOver(w: Worker, records: DeliveryRecord[]): boolean {
    const room = Math.min(MAX_FRESH - w.fresh.length, (this.opts.maxHandedOver ?? MAX_HANDED_OVER) - this.handedOverCount);
    const taken = room <= 0 ? 0 : Math.min(room, records.length);
    if (taken > 0) {
      w.fresh.push(...(taken < records.length ? records.slice(0, taken) : records));
      this.handedOverCount += taken;
    }
    return taken === records.length;
  }

  /** Fresh deliveries held in memory for their workers, all endpoints together. */
  get handedOver(): number {
    return this.handedOverCount;
  }

  /** The next deliveries the fan-out handed over, still pending as committed. */
  private freshOf(w: Worker): DeliveryRecord[] {
    const taken = w.fresh.splice(0, this.perEndpoint);
    this.handedOverCount -= taken.length;
    return taken.flatMap((f) => {
      // Not stored yet: its fan-out commit is on its way, and nothing can have tried it. Stored:
      // a scan may have found and tried it already.
      const d = this.deliveries.get(f.id);
      if (!d) return this.unstored.has(f) ? [] : [f];
      return d.status === 'pending' && d.version === f.version ? [d] : [];
    });
  }

  /** Due pending deliveries in due order; ms until the first is due; or undefined for none. */
  private dueOf(endpointId: string, w: Worker, now: number): DeliveryRecord[] | number | undefined {
    // The scan sees every pending delivery, the handed-over ones included.
    this.handedOverCount -= w.fresh.length;
    w.fresh = [];
    const rows = this.store.scan(this.deliveries as Table<unknown>, { prefix: pendingPrefix(endpointId), after: undefined, reverse: false, limit: this.perEndpoint });
    if (!rows.length) return undefined;
    const due = rows.filter((r) => typeof r.v === 'number' && r.v <= now);
    if (!due.length) return Math.max(0, (rows[0]!.v as number) - now);
    const records = due.flatMap(({ id }) => {
      const d = this.deliveries.get(id);
      // Pending as stored: an index entry outliving its record's change is never resent.
      return d && d.status === 'pending' ? [d] : [];
    });
    // Only such entries were due (left by a failed commit): look again later rather than stop.
    return records.length ? records : RETRY_AFTER_FAILURE_MS;
  }

  private async attempt(endpoint: EndpointRecord, records: DeliveryRecord[]): Promise<void> {
    const now = this.host.now();
    const items: Item[] = [];
    const gone: Promise<void>[] = [];
    for (const d of records) {
      const event = this.events.get(d.eventId);
      if (event) items.push({ d, event });
      else gone.push(this.settle(d, { attempt: d.attempts.length + 1, at: now, outcome: 'failed', responseStatus: null, error: 'event no longer kept', durationMs: 0 }, undefined));
    }
    if (items.length) {
      gone.push(new Promise((resolve, reject) => void this.sendAll([{ endpoint, items, done: (err) => (err === undefined ? resolve() : reject(err as Error)) }])));
    }
    // Every send's outcome is stored (or failed) before this returns, a failure or not: the
    // worker's room is held until then, and its next round must not find a delivery still on
    // its way pending, and send it again.
    const settled = await Promise.allSettled(gone);
    for (const s of settled) if (s.status === 'rejected') throw s.reason;
  }

  /**
   * Sends each job's deliveries: the target checked (after DNS) once per host for the batch,
   * every signature asked for at once, each part's requests started as soon as it is signed, and
   * each outcome committed in the turn's shared transaction. A job's `done` runs once all its
   * outcomes are committed, or with the error that stopped it (its deliveries stay pending).
   */
  private async sendAll(jobs: Job[]): Promise<void> {
    const now = this.host.now();
    const t = Math.floor(now / 1000);
    const state = jobs.map((job) => ({ job, left: job.items.length, err: undefined as unknown, retrying: false, gone: false }));
    type State = (typeof state)[number];
    const finish = (s: State, err?: unknown): void => {
      if (err !== undefined && s.err === undefined) s.err = err;
      if (--s.left === 0) {
        if (s.gone) this.remoteCache.delete(s.job.endpoint.tenant);
        s.job.done(s.err, s.retrying);
      }
    };
    // Stored pending, due RETRY_AFTER_FAILURE_MS from now, with no attempt added.
    const later = (d: DeliveryRecord, done: (err?: unknown) => void): void => {
      const after: DeliveryRecord = { ...d, version: d.version + 1, nextAttemptAt: this.host.now() + RETRY_AFTER_FAILURE_MS };
      this.queueDelivery(d, { table: this.deliveries as Table<unknown>, id: d.id, before: d.version === 0 ? undefined : d, after }, done);
    };
    // A fan-out's first attempt (version 0) is stored only with its outcome. One that could not
    // be sent is stored pending instead, for its endpoint's worker to try again (the job's `done`
    // with an error wakes it after RETRY_AFTER_FAILURE_MS).
    const unsent = (d: DeliveryRecord): void => {
      if (d.version === 0) later(d, () => undefined);
    };
    const outcome = (s: State, d: DeliveryRecord, res: SendResult, eventAt: number): void => {
      // Given up for a reason of ours (the origin's connections all busy, or shutting down):
      // nothing is held against the receiver; the delivery is tried again shortly, or after
      // the restart.
      if (res.withdrawn) {
        s.retrying = true;
        later(d, (err) => finish(s, err));
        return;
      }
      let decided: Decision;
      try {
        decided = this.decide(d, res, s.job.endpoint, eventAt);
      } catch (err) {
        unsent(d);
        finish(s, err);
        return;
      }
      if (decided.next !== undefined) s.retrying = true;
      this.queueDelivery(d, decided.write, (err) => {
        if (err !== undefined || !decided.disable) return finish(s, err);
        // As before the batch: the endpoint's next deliveries wait for its disable.
        s.gone = true;
        this.disable(s.job.endpoint, decided.disable).then(
          () => finish(s),
          (e: unknown) => finish(s, e),
        );
      });
    };
    let targets: Target[];
    const tasks: SignTask[] = [];
    const sends: { s: State; d: DeliveryRecord; eventAt: number; url: URL; addresses: Address[]; body: string }[] = [];
    const unrenderable: { s: State; d: DeliveryRecord; err: unknown }[] = [];
    try {
      // Each distinct host resolved and checked once for the whole batch; no await when every
      // answer is already known.
      const found = state.map((s) => this.targetOf(s.job.endpoint, now));
      targets = found.some((x) => x instanceof Promise) ? await Promise.all(found.map(async (x) => x)) : (found as Target[]);
      for (let j = 0; j < state.length; j++) {
        const s = state[j]!;
        const target = targets[j]!;
        if (typeof target === 'string') continue;
        const secrets = liveSecrets(s.job.endpoint, now);
        for (const { d, event } of s.job.items) {
          let body: string;
          try {
            body = this.bodyOf(event, s.job.endpoint);
          } catch (err) {
            unrenderable.push({ s, d, err });
            continue;
          }
          tasks.push({ id: event.id, t, body, secrets });
          sends.push({ s, d, eventAt: event.created, url: target.url, addresses: target.addresses, body });
        }
      }
    } catch (err) {
      // Nothing was sent: stored deliveries stay pending, for the worker to try again.
      for (const s of state) {
        for (const { d } of s.job.items) unsent(d);
        s.job.done(err, false);
      }
      return;
    }
    for (let j = 0; j < state.length; j++) {
      const target = targets[j]!;
      if (typeof target !== 'string') continue;
      const s = state[j]!;
      for (const { d, event } of s.job.items) outcome(s, d, { status: null, error: target, retryAfterMs: undefined, durationMs: 0 }, event.created);
    }
    // A stored event never changes, so one that does not render never will: its delivery fails
    // at once, without a retry, instead of holding its endpoint's queue.
    for (const { s, d, err } of unrenderable) {
      this.host.log.error({ err, eventId: d.eventId, endpointId: d.endpointId }, 'a webhook event could not be rendered; its delivery fails');
      const { write } = this.settled(d, { attempt: d.attempts.length + 1, at: now, outcome: 'failed', responseStatus: null, error: 'the event could not be rendered', durationMs: 0 }, undefined);
      this.queueDelivery(d, write, (e) => finish(s, e));
    }
    if (!tasks.length) return;
    let parts: SignedPart[];
    try {
      parts = this.signer.parts(tasks);
    } catch (err) {
      for (const x of sends) {
        unsent(x.d);
        finish(x.s, err);
      }
      return;
    }
    for (const part of parts) {
      const to = Math.min(part.to, sends.length);
      part.sigs.then(
        (sigs) => {
          // The part's requests, started in one loop.
          for (let i = part.from; i < to; i++) {
            const x = sends[i]!;
            try {
              this.sender.post(x.url, x.addresses, signatureHeaders(tasks[i]!.id, t, sigs[i - part.from]!), x.body, (res) => outcome(x.s, x.d, res, x.eventAt));
            } catch (err) {
              unsent(x.d);
              finish(x.s, err);
            }
          }
        },
        (err: unknown) => {
          for (let i = part.from; i < to; i++) {
            unsent(sends[i]!.d);
            finish(sends[i]!.s, err);
          }
        },
      );
    }
  }

  /**
   * Where a delivery to `endpoint` connects: the URL and the first address its host resolves to,
   * all of them checked (CONTRACT §10), or why not. The check runs at each delivery; deliveries
   * within RESOLVE_CACHE_MS of each other share one resolution (a fan-out's thousand deliveries
   * to one host, one DNS answer), and while the next one is under way they go to the addresses
   * checked last. So a DNS change reaches deliveries that much and one resolution late, and a
   * host whose name servers stop answering keeps its last checked addresses for STALE_MS; a
   * resolution that refuses the host ends their use. Whatever address is used was checked, and
   * the request connects to it (actors/webhook-send.ts pins it).
   */
  private targetOf(endpoint: EndpointRecord, now: number): Target | Promise<Target> {
    let url: URL;
    try {
      url = this.urlOf(endpoint);
    } catch (err) {
      if (!(err instanceof TargetRefused)) throw err;
      return `refused target: ${err.message}`;
    }
    const key = url.hostname;
    let cached = this.resolved.get(key);
    // A resolution under way is shared however long it takes (systemResolver bounds that): a
    // second one for the same host would only queue behind it.
    if (!cached || (cached.settled !== undefined && (now - cached.at >= RESOLVE_CACHE_MS || now < cached.at))) {
      const entry: Resolution = {
        at: now,
        answer: resolveTarget(url, this.resolver, this.opts.allowPrivateTargets).then(
          (addresses) => {
            // Only the host's current resolution speaks for it: one overtaken by a later one
            // (the cache cleared meanwhile) may not bring back what that one refused.
            if (this.resolved.get(key) === entry) {
              if (this.checked.size >= 10_000) this.checked.clear();
              this.checked.set(key, { addresses, at: now });
            }
            return (entry.settled = addresses);
          },
          (err: unknown) => {
            if (!(err instanceof TargetRefused)) throw err;
            // No answer at all: the addresses checked last, while they are recent enough.
            const stale = err.unresolved ? this.staleOf(key, now) : undefined;
            if (stale) return (entry.settled = stale);
            // Refused for where it points: the addresses checked before are not used again.
            if (!err.unresolved) this.checked.delete(key);
            // The tenant sees the attempt refused; which address it met is for the operator.
            this.host.log.warn({ endpointId: endpoint.id, reason: err.reason }, 'a webhook target was refused');
            return (entry.settled = `refused target: ${err.message}`);
          },
        ),
      };
      cached = entry;
      if (this.resolved.size >= 10_000) this.resolved.clear();
      this.resolved.set(key, entry);
      // A failed resolution is not kept.
      entry.answer.catch(() => {
        if (this.resolved.get(key) === entry) this.resolved.delete(key);
      });
    }
    // A settled answer is used at once: the fan-out then asks for its signatures in the same
    // turn, and the pool signs while this thread stores the deliveries.
    const settled = cached.settled;
    if (settled !== undefined) return typeof settled === 'string' ? settled : { url, addresses: settled };
    // While a host is resolved again, its deliveries go on to the addresses checked last: a batch
    // waits only for a host it has no recent answer for.
    const stale = this.staleOf(key, now);
    if (stale) return { url, addresses: stale };
    return cached.answer.then((addresses) => (typeof addresses === 'string' ? addresses : { url, addresses }));
  }

  /** The host's last checked addresses, unless they are older than STALE_MS. */
  private staleOf(host: string, now: number): Address[] | undefined {
    const last = this.checked.get(host);
    return last && now - last.at < STALE_MS && now >= last.at ? last.addresses : undefined;
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
      this.bodies.set(key, body, body.length);
    }
    return body;
  }

  /** Applies the delivery policy to one answer: the delivery's next record, and a disable. */
  private decide(d: DeliveryRecord, res: SendResult, endpoint: EndpointRecord, eventAt: number): Decision {
    const now = this.host.now();
    const n = d.attempts.length + 1;
    const base = { attempt: n, at: now, responseStatus: res.status, error: res.error, durationMs: res.durationMs };
    const s = res.status;
    if (s !== null && s >= 200 && s < 300) {
      this.failing.delete(endpoint.id);
      this.remember(this.succeeded, endpoint.id, now);
      return this.settled(d, { ...base, outcome: 'delivered' }, undefined, 'delivered');
    }
    if (s === 410) return { ...this.settled(d, { ...base, outcome: 'disabled' }, undefined), disable: 'gone' };
    // No success to this endpoint for longer than allowed, across its deliveries: disable.
    if (now - this.failingSince(endpoint, d.attempts[0]?.at ?? now) >= this.opts.disableAfterMs) {
      return { ...this.settled(d, { ...base, outcome: 'disabled' }, undefined), disable: 'failing' };
    }
    const retryable = s === null || (s >= 300 && s < 400) || s === 408 || s === 429 || s >= 500;
    const wait = this.opts.retrySchedule[n - 1];
    if (!retryable || wait === undefined) return this.settled(d, { ...base, outcome: 'failed' }, undefined);
    const jittered = wait * 1000 * (1 + (Math.random() * 2 - 1) * JITTER);
    // Retry-After is honoured, up to the longest wait the schedule allows.
    const longest = Math.max(...this.opts.retrySchedule) * 1000;
    const delay = Math.max(jittered, Math.min(res.retryAfterMs ?? 0, longest));
    // The event is swept once its retention ends; the last attempt comes before that, sooner
    // than the wait would have it if need be (the sweep's margin: a hundredth, at most a minute).
    const retention = this.opts.eventRetentionMs;
    const lastChance = eventAt + retention - Math.min(60_000, retention / 100);
    if (lastChance <= now) return this.settled(d, { ...base, outcome: 'failed', error: base.error ?? 'the event is not kept long enough for another attempt' }, undefined);
    return this.settled(d, { ...base, outcome: 'retry' }, Math.min(now + Math.round(delay), Math.floor(lastChance)));
  }

  /**
   * Since when an endpoint has had no success: the first attempt of the oldest delivery that
   * failed since the last success this process saw. Kept in memory beside the workers (an
   * endpoint may fail its every delivery and sit idle between events); a success this process
   * cannot know of (before it started, or forgotten) is assumed as late as it could have been,
   * so a restart can only delay a disable, never cause one early.
   */
  private failingSince(endpoint: EndpointRecord, firstAttempt: number): number {
    // Never before the endpoint was (re-)enabled, nor before its last success.
    const floor = Math.max(endpoint.enabledAt ?? endpoint.createdAt, this.succeeded.get(endpoint.id) ?? this.succeededKnownSince);
    let since = this.failing.get(endpoint.id);
    if (since === undefined || since < floor) this.remember(this.failing, endpoint.id, (since = Math.max(firstAttempt, floor)));
    return since;
  }

  /** Sets a per-endpoint time in a map bounded by MAX_FAILING (the oldest entry goes first). */
  private remember(map: Map<string, number>, endpointId: string, at: number): void {
    map.delete(endpointId);
    if (map.size >= MAX_FAILING) {
      const [oldest, time] = map.entries().next().value!;
      map.delete(oldest);
      // Entries go in time order, so every success forgotten so far was at or before this one.
      if (map === this.succeeded) this.succeededKnownSince = Math.max(this.succeededKnownSince, time);
    }
    map.set(endpointId, at);
  }

  /** Commits an attempt; `next` keeps the delivery pending until then. */
  private settle(d: DeliveryRecord, attempt: DeliveryAttempt, next: number | undefined, status: 'delivered' | 'failed' = 'failed'): Promise<void> {
    const { write } = this.settled(d, attempt, next, status);
    return new Promise((resolve, reject) => this.queueOutcome(write, (err) => (err === undefined ? resolve() : reject(err as Error))));
  }

  /** The write that records an attempt; `next` keeps the delivery pending until then. */
  private settled(d: DeliveryRecord, attempt: DeliveryAttempt, next: number | undefined, status: 'delivered' | 'failed' = 'failed'): Decision {
    const after: DeliveryRecord = {
      ...d,
      version: d.version + 1,
      status: next === undefined ? status : 'pending',
      nextAttemptAt: next,
      attempts: [...d.attempts, attempt],
      updatedAt: attempt.at,
    };
    // Version 0: a fan-out's first attempt, stored for the first time with its outcome.
    return { write: { table: this.deliveries as Table<unknown>, id: d.id, before: d.version === 0 ? undefined : d, after }, next, disable: undefined };
  }

  /**
   * queueOutcome for a write of delivery `d`: should `d` be a fan-out's first attempt (version 0),
   * its event's outbox row counts it as stored, or not, before `done` runs.
   */
  private queueDelivery(d: DeliveryRecord, write: Write<unknown>, done: (err?: unknown) => void): void {
    this.queueOutcome(write, (err) => {
      if (d.version === 0) this.firstSettled(d.eventId, err === undefined);
      done(err);
    });
  }

  /**
   * Outcomes settled in one event-loop turn share one transaction: a fan-out's answers arrive
   * together, and one commit of many records costs far less than many commits of one.
   */
  private queueOutcome(write: Write<unknown>, done: (err?: unknown) => void): void {
    if (this.outcomes.length === 0) {
      // Tracked, so close() waits for it (and for what its callbacks queue) before the store closes.
      this.track(
        new Promise<void>((resolve) =>
          setImmediate(() => {
            const batch = this.outcomes;
            this.outcomes = [];
            this.store
              .commit(
                batch.map((o) => o.write),
                { tier: 'webhooks' },
              )
              .then(
                () => batch.forEach((o) => o.done()),
                (err: unknown) => batch.forEach((o) => o.done(err)),
              )
              .catch((err: unknown) => this.host.log.error({ err }, 'a webhook outcome callback failed'))
              .finally(resolve);
          }),
        ),
      );
    }
    this.outcomes.push({ write, done });
  }

  private async disable(endpoint: EndpointRecord, reason: string): Promise<void> {
    const partition = partitionFor(endpoint.tenant);
    const cmd: Command = { kind: 'webhook.disable', tenant: endpoint.tenant, partition, id: endpoint.id, reason, version: endpoint.version };
    const result = this.host.owns(partition) ? await this.host.send(cmd) : await this.opts.remote?.send(cmd);
    if (!result?.ok) this.host.log.warn({ endpointId: endpoint.id, reason }, 'could not disable a webhook endpoint');
    else if ((result.value as EndpointRecord).status !== 'disabled') this.host.log.info({ endpointId: endpoint.id, reason }, 'webhook endpoint changed since the attempt began; not disabled');
    else this.host.log.warn({ endpointId: endpoint.id, reason }, 'webhook endpoint disabled');
  }
}

/** Most deliveries handed to one worker in memory; past it they wait in LMDB for the due scan. */
const MAX_FRESH = 1024;
/**
 * Most handed to all workers together: many slow endpoints, each with its own MAX_FRESH, would
 * otherwise hold millions of deliveries. Past it the rest wait in LMDB too.
 */
const MAX_HANDED_OVER = 16 * 1024;

/** Storage is short of room for webhook deliveries: the pump waits (NO_ROOM_RETRY_MS). */
class ShortOfRoom extends Error {
  constructor() {
    super('storage is short of room for webhook deliveries');
  }
}

/** A worker could not read its endpoint: its tenant's endpoints live at an owner that did not answer. */
class EndpointsUnreadable extends Error {
  constructor(cause: unknown) {
    super('the endpoints could not be read', { cause });
  }
}

/** A fan-out pass that left events in the outbox because their endpoints' owner did not answer. */
class WaitingForOwner extends Error {
  constructor(readonly waiting: number) {
    super(`${waiting} events wait for their endpoints' owner`);
  }
}

/** Gives back room held for `jobs`' sends (Store.holdRoom) once every job is done: its outcomes stored, or failed. */
function releaseAfter(jobs: Job[], release: () => void): void {
  let left = jobs.length;
  if (left === 0) return release();
  for (const job of jobs) {
    const done = job.done;
    job.done = (err, retrying) => {
      if (--left === 0) release();
      done(err, retrying);
    };
  }
}
