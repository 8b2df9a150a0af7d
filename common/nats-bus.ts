// Cluster mode's bus, gateway side. A command goes over NATS to the node that owns its partition;
// commands bound for the same node within one event-loop turn travel as ONE request, because a
// NATS round trip costs far more than the work behind it (ARCHITECTURE "Hot paths": ~12-15k
// requests/s per connection against ~185k logical requests/s batched). Every failure resolves as
// an `unavailable` Result, never a throw, and every request has a deadline (ARCHITECTURE 7).
// Only this file and nats-actor-server.ts import `nats` (STYLE 7).

import { connect, createInbox, ErrorCode, Events, NatsError, type Msg, type NatsConnection, type Subscription } from 'nats';
import { CLOSING, type Bus } from './bus.js';
import { DeadlineSweep } from './deadlines.js';
import { PARTITIONS } from './ids.js';
import { formatPartitions } from './partitions.js';
import {
  ANNOUNCE_SUBJECT,
  DISCOVER_SUBJECT,
  HEARTBEAT_MS,
  MISSED_HEARTBEATS,
  RECONNECT_WAIT_MS,
  decodeAnnouncement,
  decodeLate,
  decodeReply,
  packr,
  settleWithin,
  type Announcement,
  type WireRequest,
} from './nats-wire.js';
import { MAX_REPLY_BYTES, SHARED_READS, type Command, type Query, type Result, type SharedReadKind } from '../proto/messages.js';
import { deepFreeze } from './freeze.js';

/** A list page of 101 large orders fits in 8 MiB; the server default of 1 MiB may not. */
const RECOMMENDED_MAX_PAYLOAD = 8 * 1024 * 1024;

export interface NatsBusOptions {
  /** Deadline for every request, time spent waiting for its batch included. */
  timeoutMs: number;
  log?: (msg: string) => void;
  /** Most commands in one NATS message; more start another message. */
  maxBatch?: number;
  /** Most commands and queries queued or awaiting a reply; beyond it the bus answers unavailable. */
  maxInFlight?: number;
  /** Where startNatsBus says that NATS could not be reached at start (default: `log`). */
  warn?: (msg: string) => void;
}

// Details reach API clients as problem+json, so they name no hosts, nodes or NATS internals.
const unavailable = (detail: string): Result<never> => ({ ok: false, error: { code: 'unavailable', detail } });
const NO_OWNER = unavailable('No node is serving this data right now.');
const SOME_UNOWNED = unavailable('Some of this data has no node serving it right now.');
const TIMED_OUT = unavailable('The request could not be served in time.');
const BUS_DOWN = unavailable('The service cannot reach its data nodes right now.');
const OVERLOADED = unavailable('Too many requests are in flight.');
const TOO_LARGE: Result<never> = {
  ok: false,
  error: { code: 'payload-too-large', detail: 'The request is too large to forward.' },
};
const UNENCODABLE: Result<never> = { ok: false, error: { code: 'internal', detail: 'The request could not be encoded.' } };

/** Where a partition's commands go. */
export interface Owner {
  nodeId: string;
  subject: string;
}

/**
 * Who owns which partition. Today nodes announce static ranges (AnnouncedDirectory); partition
 * leases in a JetStream KV bucket (ARCHITECTURE "Partitions and scale-out") will implement this
 * same interface from a KV watch, and neither NatsBus nor the Bus interface changes.
 */
export interface OwnerDirectory {
  ownerOf(partition: number): Owner | undefined;
  /** The distinct live owners, and how many partitions have none. */
  snapshot(): { owners: Owner[]; unowned: number };
  /** Asks owners to state their claims again, e.g. after a reconnect. */
  refresh(): void;
  close(): Promise<void>;
}

interface Pending {
  cmd: Command;
  resolve: (r: Result<unknown>) => void;
  deadline: number;
  /** Requests for the same shared read that joined this one before it left (NatsBus.send). */
  joined: ((r: Result<unknown>) => void)[] | undefined;
}

/**
 * The commands bound for one node this turn, and its shared reads: by id, the key that nearly
 * always tells them apart (and costs no key to build); by kind, tenant and id for a read of an
 * id another tenant or kind read first.
 */
interface Queue {
  pending: Pending[];
  reads: Map<string, Pending> | undefined;
}

type SharedRead = Extract<Command, { kind: SharedReadKind }>;

/** A read that may share its answer (SHARED_READS); one that carries an Idempotency-Key stays alone. */
const shareable = (cmd: Command): cmd is SharedRead => SHARED_READS.has(cmd.kind as SharedReadKind) && cmd.idem === undefined;

const sameRead = (a: Command, b: SharedRead): boolean => a.kind === b.kind && a.tenant === b.tenant;
const fullKey = (cmd: SharedRead): string => `${cmd.kind}\n${cmd.tenant}\n${cmd.id}`;

/** A message on the wire waiting for its reply. */
interface Awaiting {
  count: number;
  deadline: number;
  resolve: (reply: { results: (Result<unknown> | undefined)[] }) => void;
}

const filled = (count: number, r: Result<unknown>): { results: Result<unknown>[] } => ({ results: Array<Result<unknown>>(count).fill(r) });

/** A message of commands on the wire: each resolved once, from its reply or a late result. */
interface Outstanding {
  batch: Pending[];
  settled: boolean[];
  left: number;
  timer: NodeJS.Timeout | undefined;
}

export class NatsBus implements Bus {
  private readonly queues = new Map<string, Queue>();
  private readonly exchanges = new Set<Promise<unknown>>();
  private flushScheduled = false;
  private inFlight = 0;
  private connected = true;
  private closed = false;
  private readonly maxBatch: number;
  private readonly maxInFlight: number;
  private readonly log: (msg: string) => void;
  /** Where nodes send the results of commands still running when they reply (nats-wire LateTo). */
  private readonly lateSubject = createInbox();
  private readonly outstanding = new Map<number, Outstanding>();
  /**
   * Replies come to `<replyInbox>.<rid>`, one subscription for all: nats.js's `request()` costs a
   * timer, a `Promise.race` and a mux entry per message, which one DeadlineSweep replaces.
   */
  private readonly replyInbox = createInbox();
  private readonly awaiting: DeadlineSweep<number, Awaiting>;
  private nextRid = 0;
  private nextXid = 0;
  /** close() waiting for the last outstanding command to be answered. */
  private readonly drained: (() => void)[] = [];

  constructor(
    private readonly nc: NatsConnection,
    private readonly directory: OwnerDirectory,
    private readonly opts: NatsBusOptions,
  ) {
    this.maxBatch = opts.maxBatch ?? 256;
    this.maxInFlight = opts.maxInFlight ?? 10_000;
    this.log = opts.log ?? (() => {});
    // A reply past its deadline is answered at most one sweep late.
    this.awaiting = new DeadlineSweep(opts.timeoutMs, (a) => a.resolve(filled(a.count, TIMED_OUT)));
    this.nc.subscribe(this.lateSubject, { callback: (err, msg) => (err ? this.log(`late results: ${err.message}`) : this.onLate(msg)) });
    this.nc.subscribe(`${this.replyInbox}.*`, { callback: (err, msg) => (err ? this.log(`replies: ${err.message}`) : this.onReply(msg)) });
    void this.watchConnection();
  }

  send(cmd: Command): Promise<Result<unknown>> {
    const refused = this.refusal();
    if (refused) return Promise.resolve(refused);
    const owner = this.directory.ownerOf(cmd.partition);
    if (!owner) return Promise.resolve(NO_OWNER);
    this.inFlight++;
    return new Promise((resolve) => {
      let queue = this.queues.get(owner.subject);
      if (!queue) this.queues.set(owner.subject, (queue = { pending: [], reads: undefined }));
      // The same read already waiting to leave: both would be answered from the same committed
      // state, in the same message, so this one takes that one's answer. Nothing acknowledged
      // before this request arrived can be missing from it, as the message has not left yet.
      let key: string | undefined;
      if (shareable(cmd)) {
        key = cmd.id;
        let leader = queue.reads?.get(key);
        if (leader !== undefined && !sameRead(leader.cmd, cmd)) leader = queue.reads!.get((key = fullKey(cmd)));
        if (leader !== undefined) {
          (leader.joined ??= []).push(resolve);
          return;
        }
      }
      const pending: Pending = { cmd, resolve, deadline: Date.now() + this.opts.timeoutMs, joined: undefined };
      queue.pending.push(pending);
      if (key !== undefined) (queue.reads ??= new Map()).set(key, pending);
      if (queue.pending.length >= this.batchLimit()) {
        this.queues.delete(owner.subject);
        this.dispatch(owner.subject, queue.pending);
      } else if (!this.flushScheduled) {
        this.flushScheduled = true;
        // setImmediate, not a microtask: it runs after the I/O callbacks of this turn, so every
        // request the turn parsed has queued its command before the batch leaves.
        setImmediate(() => this.flush());
      }
    });
  }

  /**
   * Whether another node than `home`'s owns `partition` now: each actor node keeps its keys in
   * its own LMDB. (With partitions that move between nodes, a key would have to move with its
   * partition.)
   */
  keptApart(home: number, partition: number): boolean {
    const owner = this.directory.ownerOf(partition);
    return owner !== undefined && owner.nodeId !== this.directory.ownerOf(home)?.nodeId;
  }

  async scatter(q: Query): Promise<Result<unknown>[]> {
    const { owners, unowned } = this.directory.snapshot();
    const results = await Promise.all(owners.map((o) => this.query(o.subject, q)));
    if (unowned > 0) results.push(SOME_UNOWNED);
    return results;
  }

  /** Resolves true once every partition listed has a live owner; for readiness checks and tests. */
  async waitForOwners(partitions: readonly number[], withinMs: number): Promise<boolean> {
    const until = Date.now() + withinMs;
    for (;;) {
      if (partitions.every((p) => this.directory.ownerOf(p))) return true;
      if (Date.now() >= until) return false;
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.flush();
    // Let what is on the wire be answered (each exchange is bounded by its deadline) before the
    // drain closes the reply subscription under it.
    await Promise.all(this.exchanges);
    // Results still due late are waited for too, each until its deadline at most (its timer).
    if (this.outstanding.size > 0) await new Promise<void>((resolve) => this.drained.push(resolve));
    await this.directory.close();
    await settleWithin(this.nc.drain(), this.opts.timeoutMs);
    if (!this.nc.isClosed()) await this.nc.close();
  }

  private refusal(): Result<never> | undefined {
    if (this.closed) return CLOSING;
    // While disconnected nats.js would buffer the request and send it on reconnect, after we had
    // already answered 503: a write the client was told failed would then happen. Refuse instead.
    if (!this.connected) return BUS_DOWN;
    if (this.inFlight >= this.maxInFlight) return OVERLOADED;
    return undefined;
  }

  private flush(): void {
    this.flushScheduled = false;
    for (const [subject, queue] of this.queues) this.dispatch(subject, queue.pending);
    this.queues.clear();
  }

  private dispatch(subject: string, batch: Pending[]): void {
    const xid = this.nextXid++;
    const x: Outstanding = { batch, settled: batch.map(() => false), left: batch.length, timer: undefined };
    const now = Date.now();
    // A command is built for one send (BusClient.call), so its budget is set on it. A spread copy
    // per command filled the gateway's old space under load, a mark-compact every 200 ms
    // (bench/README.md, "Evening of 2026-11-24").
    for (const p of batch) {
      p.cmd.budgetMs = Math.max(1, p.deadline - now);
      p.cmd.deadlineAt = p.deadline;
    }
    const payload = encode({ v: 1, commands: batch.map((p) => p.cmd), late: { to: this.lateSubject, xid } });
    if (!payload) return this.settleRest(xid, x, UNENCODABLE);
    if (payload.length > this.maxPayload()) {
      if (batch.length === 1) return this.settleRest(xid, x, TOO_LARGE);
      const half = batch.length >> 1;
      this.dispatch(subject, batch.slice(0, half));
      this.dispatch(subject, batch.slice(half));
      return;
    }
    // Known before the request leaves: a late result may arrive before its reply is read.
    this.outstanding.set(xid, x);
    const replied = this.exchange(subject, payload, batch.length, batch[0]!.deadline).then(({ results }) => {
      results.forEach((r, i) => r && this.settleOne(xid, x, i, r));
      if (x.left === 0) return;
      // The rest come late; each is answered by its own deadline at the latest.
      const last = Math.max(...batch.filter((_, i) => !x.settled[i]).map((p) => p.deadline));
      x.timer = setTimeout(() => this.settleRest(xid, x, TIMED_OUT), Math.max(0, last - Date.now()));
    });
    // close() waits for the reply to be read, not only received.
    this.exchanges.add(replied);
    void replied.finally(() => this.exchanges.delete(replied));
  }

  private settleOne(xid: number, x: Outstanding, i: number, r: Result<unknown>): void {
    if (x.settled[i]) return;
    x.settled[i] = true;
    x.left--;
    this.inFlight--;
    const p = x.batch[i]!;
    if (p.joined !== undefined) {
      // Every reader holds the same answer, so none may change it: frozen, as the store's
      // shared records are (and the renderer keeps the bytes of a frozen record).
      deepFreeze(r);
      this.inFlight -= p.joined.length;
      for (const resolve of p.joined) resolve(r);
    }
    p.resolve(r);
    if (x.left === 0) {
      clearTimeout(x.timer);
      this.outstanding.delete(xid);
      if (this.outstanding.size === 0) for (const resolve of this.drained.splice(0)) resolve();
    }
  }

  private settleRest(xid: number, x: Outstanding, r: Result<unknown>): void {
    x.batch.forEach((_, i) => this.settleOne(xid, x, i, r));
  }

  private onLate(msg: Msg): void {
    const late = decodeLate(msg.data);
    const x = late && this.outstanding.get(late.xid);
    if (!x) return; // answered already (its deadline passed), or not ours
    for (const [i, r] of late.results) if (i >= 0 && i < x.batch.length) this.settleOne(late.xid, x, i, r);
  }

  private async query(subject: string, q: Query): Promise<Result<unknown>> {
    const refused = this.refusal();
    if (refused) return refused;
    const payload = encode({ v: 1, query: q, cuts: true });
    if (!payload) return UNENCODABLE;
    if (payload.length > this.maxPayload()) return TOO_LARGE;
    this.inFlight++;
    const { results } = await this.exchange(subject, payload, 1, Date.now() + this.opts.timeoutMs);
    this.inFlight--;
    return results[0] ?? UNENCODABLE;
  }

  /**
   * One NATS request/reply. Never rejects: every failure becomes `count` error Results. A command
   * the node is still running has no result here (see dispatch).
   */
  private exchange(subject: string, payload: Uint8Array, count: number, deadline: number): Promise<{ results: (Result<unknown> | undefined)[] }> {
    const work = new Promise<{ results: (Result<unknown> | undefined)[] }>((resolve) => {
      const rid = this.nextRid++;
      this.awaiting.add(rid, { count, deadline, resolve });
      try {
        this.nc.publish(subject, payload, { reply: `${this.replyInbox}.${rid}` });
      } catch (err) {
        this.awaiting.take(rid);
        resolve(filled(count, this.failure(err)));
      }
    });
    this.exchanges.add(work);
    return work.finally(() => this.exchanges.delete(work));
  }

  private onReply(msg: Msg): void {
    const rid = Number(msg.subject.slice(this.replyInbox.length + 1));
    const a = this.awaiting.take(rid);
    if (!a) return; // answered already: its deadline passed
    // The server's own answer when nothing listens on the subject: an empty 503 status message.
    // The directory still listed the node, but it just left.
    if (msg.data.length === 0 && msg.headers?.code === 503) a.resolve(filled(a.count, NO_OWNER));
    else a.resolve(decodeReply(msg.data, a.count));
  }

  /** What a refused publish means to the caller (a deadline passing and no listener are answered in the sweep and onReply). */
  private failure(err: unknown): Result<never> {
    if (err instanceof NatsError) {
      switch (err.code as ErrorCode) {
        case ErrorCode.Disconnect:
        case ErrorCode.ConnectionClosed:
        case ErrorCode.ConnectionDraining:
          return BUS_DOWN;
      }
    }
    this.log(`bus request failed: ${err instanceof Error ? err.message : String(err)}`);
    return BUS_DOWN;
  }

  /** Commands per message: as many as the server lets the whole reply carry (MAX_REPLY_BYTES each). */
  private batchLimit(): number {
    return Math.max(1, Math.min(this.maxBatch, Math.floor(this.maxPayload() / MAX_REPLY_BYTES)));
  }

  private maxPayload(): number {
    return this.nc.info?.max_payload ?? 1024 * 1024;
  }

  private async watchConnection(): Promise<void> {
    try {
      for await (const s of this.nc.status()) {
        if (s.type === Events.Disconnect) {
          this.connected = false;
          this.log('NATS connection lost; answering unavailable until it is back');
        } else if (s.type === Events.Reconnect) {
          this.connected = true;
          this.log('NATS connection restored');
          this.directory.refresh();
        }
      }
    } catch (err) {
      this.log(`NATS status watch ended: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}

function encode(req: WireRequest): Uint8Array | undefined {
  try {
    return packr.pack(req);
  } catch {
    return undefined;
  }
}

interface Claim extends Owner {
  partitions: number[];
  /** Ranges as announced, to tell a heartbeat from a change of claim. */
  key: string;
  /** When this gateway first heard the claim: the older claim wins an overlap. */
  since: number;
  expiresAt: number;
}

const CLAIM_TTL_MS = HEARTBEAT_MS * MISSED_HEARTBEATS;

/** Static ownership: each node announces the ranges it serves; silent nodes expire. */
export class AnnouncedDirectory implements OwnerDirectory {
  private readonly claims = new Map<string, Claim>();
  private table: (Claim | undefined)[] = [];
  private readonly sub: Subscription;
  private readonly sweeper: NodeJS.Timeout;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly log: (msg: string) => void,
  ) {
    this.sub = nc.subscribe(ANNOUNCE_SUBJECT, {
      callback: (err, msg) => {
        if (err) return this.log(`announcement subscription error: ${err.message}`);
        this.onAnnouncement(decodeAnnouncement(msg.data));
      },
    });
    this.sweeper = setInterval(() => this.sweep(), HEARTBEAT_MS / 2);
    this.sweeper.unref();
  }

  static async start(nc: NatsConnection, log: (msg: string) => void): Promise<AnnouncedDirectory> {
    const directory = new AnnouncedDirectory(nc, log);
    // The subscription must be registered at the server before the nodes answer the discover.
    await nc.flush();
    directory.refresh();
    return directory;
  }

  ownerOf(partition: number): Owner | undefined {
    const claim = this.table[partition];
    return claim && claim.expiresAt > Date.now() ? claim : undefined;
  }

  snapshot(): { owners: Owner[]; unowned: number } {
    const owners = new Set<Owner>();
    let unowned = 0;
    for (let p = 0; p < PARTITIONS; p++) {
      const owner = this.ownerOf(p);
      if (owner) owners.add(owner);
      else unowned++;
    }
    return { owners: [...owners], unowned };
  }

  refresh(): void {
    try {
      this.nc.publish(DISCOVER_SUBJECT);
    } catch (err) {
      this.log(`could not ask actor nodes to announce: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  close(): Promise<void> {
    clearInterval(this.sweeper);
    if (!this.sub.isClosed()) this.sub.unsubscribe();
    return Promise.resolve();
  }

  private onAnnouncement(a: Announcement | undefined): void {
    if (!a) return this.log('ignored a malformed ownership announcement');
    const known = this.claims.get(a.nodeId);
    if (a.ranges.length === 0) {
      // A node that leaves says so, so its partitions do not wait CLAIM_TTL_MS to fail over.
      if (known && this.claims.delete(a.nodeId)) this.rebuild();
      return;
    }
    const now = Date.now();
    const key = JSON.stringify(a.ranges);
    if (known && known.key === key) {
      const lapsed = known.expiresAt <= now;
      known.expiresAt = now + CLAIM_TTL_MS;
      if (!lapsed) return;
    } else {
      const partitions = a.ranges.flatMap(([lo, hi]) => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i));
      this.claims.set(a.nodeId, { nodeId: a.nodeId, subject: a.subject, partitions, key, since: known?.since ?? now, expiresAt: now + CLAIM_TTL_MS });
    }
    this.rebuild();
  }

  private sweep(): void {
    const now = Date.now();
    let changed = false;
    for (const [nodeId, claim] of this.claims) {
      if (claim.expiresAt > now) continue;
      this.claims.delete(nodeId);
      this.log(`actor node ${nodeId} missed ${MISSED_HEARTBEATS} heartbeats; its partitions have no owner`);
      changed = true;
    }
    if (changed) this.rebuild();
  }

  private rebuild(): void {
    const now = Date.now();
    const table: (Claim | undefined)[] = Array.from({ length: PARTITIONS }, () => undefined);
    // Static configs can overlap by mistake. The older claim keeps the partition, so ownership does
    // not flap with every heartbeat; leases will make claims exclusive by construction.
    const live = [...this.claims.values()].filter((c) => c.expiresAt > now).sort((a, b) => a.since - b.since);
    for (const claim of live) {
      const lost: number[] = [];
      for (const p of claim.partitions) {
        if (table[p]) lost.push(p);
        else table[p] = claim;
      }
      if (lost.length > 0) {
        this.log(`actor node ${claim.nodeId} claims partitions ${formatPartitions(lost)} that older claims hold; ignoring those`);
      }
    }
    this.table = table;
  }
}

/** Connects the gateway to NATS; throws only if the first connection fails, then reconnects forever. */
export async function connectNatsBus(url: string, opts: NatsBusOptions): Promise<NatsBus> {
  const log = opts.log ?? (() => {});
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: url,
      name: 'gateway',
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: RECONNECT_WAIT_MS,
      // No Error captured per request for async stack traces: it costs more than the request.
      noAsyncTraces: true,
    });
  } catch (err) {
    throw new Error(`cannot connect to NATS at ${url}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const maxPayload = nc.info?.max_payload ?? 0;
  if (maxPayload < RECOMMENDED_MAX_PAYLOAD) {
    log(`NATS max_payload is ${maxPayload} bytes; run nats-server with max_payload >= 8MB (see nats.conf): larger replies are split into several messages`);
  }
  let directory: AnnouncedDirectory;
  try {
    directory = await AnnouncedDirectory.start(nc, log);
  } catch (err) {
    // Lost while starting: closed, or it would go on reconnecting for nobody.
    await nc.close().catch(() => undefined);
    throw err;
  }
  return new NatsBus(nc, directory, { ...opts, log });
}

/**
 * A bus to NATS for a process that must run whether or not NATS can be reached when it starts:
 * connected at once when it can be; otherwise a ConnectingBus, which answers 503 until then.
 */
export async function startNatsBus(url: string, opts: NatsBusOptions): Promise<Bus> {
  try {
    return await connectNatsBus(url, opts);
  } catch (err) {
    if (!unreachable(err)) throw err;
    (opts.warn ?? opts.log ?? (() => {}))(`${err instanceof Error ? err.message : String(err)}; what needs it is refused (503) until a connection is made, tried every ${RECONNECT_WAIT_MS} ms`);
    return new ConnectingBus(url, opts);
  }
}

/**
 * The bus of a gateway started while NATS cannot be reached. Every call is refused as a gateway
 * that lost NATS refuses it (503 with Retry-After) while a connection is tried again every
 * RECONNECT_WAIT_MS; once one is made, the connected bus answers, and reconnects by itself after.
 */
export class ConnectingBus implements Bus {
  private bus: NatsBus | undefined;
  private timer: NodeJS.Timeout | undefined;
  private attempt: Promise<void> | undefined;
  private closed = false;

  constructor(
    private readonly url: string,
    private readonly opts: NatsBusOptions,
  ) {
    this.retry();
  }

  send(cmd: Command): Promise<Result<unknown>> {
    return this.bus ? this.bus.send(cmd) : Promise.resolve(this.closed ? CLOSING : BUS_DOWN);
  }

  keptApart(home: number, partition: number): boolean {
    return this.bus?.keptApart(home, partition) ?? false;
  }

  scatter(q: Query): Promise<Result<unknown>[]> {
    return this.bus ? this.bus.scatter(q) : Promise.resolve([this.closed ? CLOSING : BUS_DOWN]);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.attempt;
    await this.bus?.close();
  }

  private retry(): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      // Quiet while it fails: the first failure was logged, and every request says 503.
      this.attempt = connectNatsBus(this.url, this.opts).then(
        async (bus) => {
          if (this.closed) return bus.close();
          this.bus = bus;
          this.opts.log?.(`connected to NATS at ${this.url}`);
        },
        () => {
          if (!this.closed) this.retry();
        },
      );
    }, RECONNECT_WAIT_MS);
  }
}

/** Whether connecting failed only because no NATS server answered (not a bad URL or credentials). */
export function unreachable(err: unknown): boolean {
  const code = err instanceof NatsError ? err.code : err instanceof Error && err.cause instanceof NatsError ? err.cause.code : undefined;
  return code === ErrorCode.ConnectionRefused || code === ErrorCode.ConnectionTimeout;
}
