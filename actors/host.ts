// The actor host: owns a set of partitions and runs every command for a key as one turn at a
// time (ARCHITECTURE property 1). Each turn loads the committed record, asks the resource actor
// for a decision, and commits it durably before replying. Reads skip the mailbox: they see
// committed state, and a write is acknowledged only once committed, so a client always reads
// its own acknowledged writes.

import { inspect } from 'node:util';
import { performance } from 'node:perf_hooks';
import { CLOSING, type ActorEndpoint, type Admission } from '../common/bus.js';
import type { Config } from '../common/config.js';
import { ApiError, fromWire, toWire } from '../common/errors.js';
import { deepFreeze } from '../common/freeze.js';
import { partitionFor, partitionOf } from '../common/ids.js';
import type { Logger } from '../common/log.js';
import { exitNow } from '../common/shutdown.js';
import { Store, type IndexKey, type Table, type Write } from '../storage/store.js';
import type { RoomTier } from '../storage/room.js';
import { lockDir, type DirLock } from '../storage/dir-lock.js';
import { libcFailure } from '../common/libc.js';
import { IDEMPOTENCY, idemRecord, type IdemRecord } from './idem-record.js';
import {
  assertNever,
  type Command,
  type IdemTag,
  type KeyedCommand,
  type ListPage,
  type ListQuery,
  type OrderRecord,
  type Query,
  type UserRecord,
  type TeamRecord,
  type MembershipRecord,
  type OperationRecord,
  type RefundRecord,
  type Result,
} from '../proto/messages.js';
import type { ActorDef, Versioned } from './actor.js';
import { articleActor } from './articles.js';
import { batchKeys, planBatch, type Plan } from './batch.js';
import { byUser, dropMemberships, memberActor, planTeamWrite, teamActor, type TeamTables } from './teams.js';
import { batchGetUsers, EMAIL_CLAIMS, planUserWrite, userActor, usersLock, type EmailClaim } from './users.js';
import { orderActor } from './orders.js';
import { productActor } from './products.js';
import { eventActor, EVENTS, eventWrites, OUTBOX } from './events.js';
import { deliveryActor, endpointActor, MAX_ENDPOINTS_PER_TENANT, OwnedEndpoints } from './webhooks.js';
import { Dispatcher, type DispatchOptions } from './dispatcher.js';
import { sweepEvents } from './event-sweep.js';
import type { DeliveryRecord, EndpointRecord, EventRecord, OutboxEntry } from '../proto/webhooks.js';
import { MAX_JOBS, RefundRunner, simulatedProcessor, type RefundProcessor } from './refund-runner.js';
import { operationActor, planOperationSweep, planRefundStart, refundActor, type RefundTables } from './refunds.js';
import { planUsageAdd, readUsage, USAGE, usageLock, type UsageRecord } from './usage.js';

export interface HostOptions {
  dataDir: string;
  /**
   * The host's own jobs (operations resumed, the sweeps, webhook deliveries) wait for start():
   * an actor node starts them once its partitions are claimed, so a node refused them never acts
   * on their data. Otherwise they start with the host.
   */
  deferJobs?: boolean;
  /** Partitions this host serves; commands for others are refused as unavailable. */
  partitions: ReadonlySet<number>;
  /** Most queued commands per key. */
  mailboxLimit: number;
  /** Most commands in flight across the host. */
  inflightLimit?: number;
  /** How long an Idempotency-Key's result is kept (IDEMPOTENCY_TTL_HOURS). */
  idempotencyTtlMs?: number;
  /** How long a finished operation stays readable (OPERATION_RETENTION_HOURS). */
  operationRetentionMs?: number;
  /** The payment processor refunds go to; by default one that succeeds after `refundProcessingMs`. */
  refundProcessor?: RefundProcessor;
  /** REFUND_PROCESSING_MS: the default processor's latency. */
  refundProcessingMs?: number;
  /** How long one processor call may take before it is abandoned and asked again (default 30 s). */
  refundProcessorTimeoutMs?: number;
  /** Pauses between failed processor calls (tests shorten them; actors/refund-runner.ts BACKOFF_MS). */
  refundBackoffMs?: readonly number[];
  /** Refund jobs at once (actors/refund-runner.ts MAX_JOBS; tests lower it). */
  refundMaxJobs?: number;
  /** Wall clock for record timestamps and key expiry; tests move it. */
  now?: () => number;
  log: Logger;
  /**
   * Storage that can no longer be trusted (storage/store.ts, Store.appliedAnyway). By default
   * logged at fatal level, and the process exits 1 for its supervisor to restart it on the data.
   */
  onStorageFatal?: (err: unknown) => void;
  /** How long events stay readable (EVENT_RETENTION_DAYS). */
  eventRetentionMs?: number;
  /** STORAGE_MAPPED_MB in bytes: the LMDB file's pages kept mapped (storage/mapped-pages.ts); 0 or unset: no limit. */
  mappedBudgetBytes?: number;
  /** STORAGE_RESERVE_MB in bytes: clients' writes are refused (503) once the data file's room would fall under it (storage/room.ts); unset: no guard. */
  storageReserveBytes?: number;
  /** How the data file's room is measured (storage/room.ts measureRoom); tests inject it. */
  measureStorageRoom?: () => number;
  /** Webhook delivery settings; without them events are kept but not dispatched. */
  webhooks?: DispatchOptions;
}

/** The host settings that come from the environment, alike for embedded mode and actor nodes. */
export function hostSettings(config: Config): Pick<HostOptions, 'mailboxLimit' | 'idempotencyTtlMs' | 'operationRetentionMs' | 'refundProcessingMs' | 'mappedBudgetBytes' | 'storageReserveBytes'> {
  return {
    mappedBudgetBytes: config.storageMappedMb * 1024 * 1024,
    storageReserveBytes: config.storageReserveMb * 1024 * 1024,
    mailboxLimit: config.mailboxLimit,
    idempotencyTtlMs: config.idempotencyTtlHours * 3600_000,
    operationRetentionMs: config.operationRetentionHours * 3600_000,
    refundProcessingMs: config.refundProcessingMs,
  };
}

interface Mailbox {
  key: string;
  /** The last turn queued (IDLE only while the first one is being started). */
  tail: Promise<unknown>;
  depth: number;
}

const IDLE: Promise<unknown> = Promise.resolve();
/** The mailbox limit of the service's own turns (internalTurn, the idempotency sweep): none. */
const UNBOUNDED = Infinity;

interface Stat {
  count: number;
  errors: number;
  totalMs: number;
}

// A registry entry pairs an actor with its opened table; the generic parameters are erased here
// because the host dispatches on the command's kind prefix at run time.
interface Bound {
  def: ActorDef<Versioned, KeyedCommand>;
  table: Table<Versioned>;
}

const DAY_MS = 24 * 3600_000;
const SWEEP_EVERY_MS = 60_000;
/**
 * How far a node's clock may differ from a sender's (a gateway's). A write is dropped unrun once
 * the node's clock reads within this of the sender's deadline (Command.deadlineAt): with the
 * clocks this close either way, no write begins after its sender has answered 503, and a node
 * whose clock is behind by the most still leaves its commit this long. Clocks kept by NTP differ
 * by milliseconds. A write given less than twice this (BUS_TIMEOUT_MS under 2 s) is allowed half
 * of its time instead (`skewAllowance`), or none would run.
 */
export const CLOCK_SKEW_MS = 1000;
/** How long before its sender's deadline a write of `budgetMs` is dropped by the wall clock (CLOCK_SKEW_MS). */
export function skewAllowance(budgetMs: number | undefined): number {
  return budgetMs === undefined ? CLOCK_SKEW_MS : Math.min(CLOCK_SKEW_MS, budgetMs / 2);
}
/** Writes dropped by the wall clock alone are logged at most this often (Host.lateByClock). */
const LATE_LOG_EVERY_MS = 60_000;
/** Open operations a resume pass reads at most, looking for ones to start. */
const RESUME_SCAN = 10_000;
const SWEEP_BATCH = 1000;
/** Most memberships one delete removes with its team or user (a team is bounded by the tenant's users). */
const MAX_CASCADE = 100_000;

const UNAVAILABLE = (detail: string): Result<never> => ({ ok: false, error: { code: 'unavailable', detail } });
const IN_FLIGHT: Result<never> = {
  ok: false,
  error: { code: 'idempotency-key-in-flight', detail: 'A request with this Idempotency-Key is still running; retry shortly.' },
};

// Tenants and keys hold no control characters (the token check and the header check refuse
// them), so NUL separates them unambiguously.
const idemId = (tenant: string, key: string): string => `${tenant}\u0000${key}`;
// Mailbox names for keys live beside record ids ('ord_…'); the prefix keeps them apart.
const idemBox = (id: string): string => `idem\u0000${id}`;

export class ActorHost implements ActorEndpoint {
  private readonly store: Store;
  /** This process's hold on dataDir (storage/dir-lock.ts). */
  private readonly lock: DirLock;
  private readonly events: { events: Table<EventRecord>; outbox: Table<OutboxEntry> };
  private readonly dispatcher: Dispatcher | undefined;
  private readonly actors: Record<'order' | 'product' | 'user' | 'article' | 'team' | 'member' | 'refund' | 'operation' | 'webhook' | 'event' | 'delivery', Bound>;
  private readonly refundTables: RefundTables;
  private readonly refunds: RefundRunner;
  private readonly teamTables: TeamTables;
  private readonly claims: Table<EmailClaim>;
  private readonly idem: Table<IdemRecord>;
  private readonly usage: Table<UsageRecord>;
  private readonly boxes = new Map<string, Mailbox>();
  /** Idempotency records whose expiry the sweeper is deleting, in their key's mailbox. */
  private readonly expiring = new Set<string>();
  private readonly ownedEndpoints: OwnedEndpoints;
  private inflight = 0;
  private readonly inflightLimit: number;
  /** Writes dropped as late by the wall clock alone (`lateByClock`), and when that was last logged. */
  private lateByClockDrops = 0;
  private lateByClockLoggedAt = -Infinity;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private sweeper: NodeJS.Timeout | undefined;
  /** Tables a sweep is running over. */
  private readonly sweeping = new Set<string>();
  /** The event sweep running, if one is (sweepEvents). */
  private eventSweep: Promise<number> | undefined;
  /** List forms of stored records (slimOf), kept as long as the record is. */
  private readonly slimmed = new WeakMap<object, Versioned>();
  private closing = false;
  private storeClosed = false;
  private resumeQueued = false;
  /** Where the next resume pass starts in the open operations (see resumeOperations). */
  private resumeCursor: [string | number, string] | undefined;
  readonly stats = new Map<string, Stat>();
  /** Settles once the node's file is on disk as it was found (Store.ready): serve after it. */
  get ready(): Promise<void> {
    return this.store.ready;
  }
  private lastKind = '';
  private lastStat: Stat | undefined = undefined;

  constructor(private readonly opts: HostOptions) {
    this.lock = lockDir(opts.dataDir);
    if (!this.lock.held) opts.log.warn({ reason: String(libcFailure() ?? 'unknown') }, 'the data directory could not be locked: run one process per DATA_DIR');
    try {
      this.store = Store.open(opts.dataDir, {
        onFatal:
          opts.onStorageFatal ??
          ((err) => {
            opts.log.fatal({ err }, 'storage failed and cannot be trusted: exiting, to be started again on the data');
            exitNow(1, `storage failed and cannot be trusted: exiting, to be started again on the data: ${inspect(err)}`, opts.log);
          }),
        mappedBudgetBytes: opts.mappedBudgetBytes,
        reserveBytes: opts.storageReserveBytes,
        measureRoom: opts.measureStorageRoom,
        report: (problem, err) => opts.log.warn({ err }, problem),
      });
    } catch (err) {
      this.lock.release();
      throw err;
    }
    this.inflightLimit = opts.inflightLimit ?? 20_000;
    this.ttlMs = opts.idempotencyTtlMs ?? DAY_MS;
    this.now = opts.now ?? Date.now;
    const bind = <T extends Versioned, C extends KeyedCommand>(def: ActorDef<T, C>): Bound => ({
      def: def as unknown as ActorDef<Versioned, KeyedCommand>,
      table: this.store.table(def.table) as unknown as Table<Versioned>,
    });
    this.actors = {
      order: bind(orderActor),
      product: bind(productActor),
      user: bind(userActor),
      article: bind(articleActor),
      team: bind(teamActor),
      member: bind(memberActor),
      webhook: bind(endpointActor),
      event: bind(eventActor),
      delivery: bind(deliveryActor),
      refund: bind(refundActor),
      operation: bind(operationActor),
    };
    this.events = { events: this.store.table(EVENTS), outbox: this.store.table(OUTBOX) };
    this.ownedEndpoints = new OwnedEndpoints(this.store, this.actors.webhook.table as unknown as Table<EndpointRecord>);
    const members = this.actors.member;
    this.teamTables = {
      teams: this.actors.team.table as unknown as Table<TeamRecord>,
      members: members.table as unknown as Table<MembershipRecord>,
      users: this.actors.user.table as unknown as Table<UserRecord>,
      memberIds: (tenant, filter) =>
        this.store.scan(members.table as Table<unknown>, { prefix: [tenant, filter, 'joinedAt'], after: undefined, reverse: false, limit: MAX_CASCADE }).map((r) => r.id),
    };
    this.claims = this.store.table(EMAIL_CLAIMS);
    this.idem = this.store.table(IDEMPOTENCY);
    this.refundTables = {
      orders: this.actors.order.table as unknown as Table<OrderRecord>,
      refunds: this.actors.refund.table as unknown as Table<RefundRecord>,
      operations: this.actors.operation.table as unknown as Table<OperationRecord>,
    };
    this.refunds = new RefundRunner({
      tables: this.refundTables,
      processor: opts.refundProcessor ?? simulatedProcessor(opts.refundProcessingMs ?? 500),
      retentionMs: opts.operationRetentionMs ?? DAY_MS,
      processorTimeoutMs: opts.refundProcessorTimeoutMs ?? 30_000,
      backoffMs: opts.refundBackoffMs,
      maxJobs: opts.refundMaxJobs,
      // A slot came free: what waits starts now rather than at the next minute's pass.
      onRoom: () => {
        if (this.resumeQueued) return;
        this.resumeQueued = true;
        setImmediate(() => {
          this.resumeQueued = false;
          this.resumeOperations();
        });
      },
      commit: (orderId, kind, plan) => this.internalTurn(orderId, kind, plan),
      log: opts.log,
    });
    this.usage = this.store.table(USAGE);
    this.dispatcher = opts.webhooks
      ? new Dispatcher(this.store, { ...opts.webhooks, eventRetentionMs: this.eventRetentionMs }, {
          owns: (p) => this.owns(p),
          ownedEndpoints: (tenant) => this.ownedEndpoints.of(tenant),
          send: (cmd) => this.handle(cmd),
          now: this.now,
          log: opts.log,
        })
      : undefined;
    if (!opts.deferJobs) this.start();
  }

  /** Starts the host's own jobs (HostOptions.deferJobs); once. */
  start(): void {
    if (this.sweeper !== undefined || this.closing) return;
    // Operations cut off by the last stop carry on now (and any a failed commit left, each minute).
    this.resumeOperations();
    this.sweeper = setInterval(() => {
      void this.sweepIdempotency();
      void this.sweepOperations();
      void this.sweepEvents();
      this.resumeOperations();
    }, SWEEP_EVERY_MS).unref();
    this.dispatcher?.start();
  }

  /**
   * Forgets events and settled deliveries older than EVENT_RETENTION_DAYS, a chunk per
   * transaction; resolves with how many it removed. One runs at a time (a call while one runs
   * gets that one's count), and close() waits for it. It never rejects: a commit that fails (a
   * full disk) is logged, and the next sweep, a minute later, carries on from the oldest.
   */
  sweepEvents(): Promise<number> {
    if (this.eventSweep) return this.eventSweep;
    const deliveries = this.actors.delivery.table as unknown as Table<DeliveryRecord>;
    const swept = sweepEvents(this.store, { events: this.events.events, deliveries }, this.now() - this.eventRetentionMs, SWEEP_BATCH, () => this.closing).catch((err: unknown) => {
      this.opts.log.warn({ err }, 'the event sweep could not remove expired events; the next sweep carries on');
      return 0;
    });
    const run = whenSettled(swept, () => {
      this.eventSweep = undefined;
    });
    this.eventSweep = run;
    return run;
  }

  /** How long events are kept (EVENT_RETENTION_DAYS): the sweep's cutoff, and the dispatcher's last retry. */
  private get eventRetentionMs(): number {
    return this.opts.eventRetentionMs ?? 30 * DAY_MS;
  }

  owns(partition: number): boolean {
    return this.opts.partitions.has(partition);
  }

  /**
   * Whether an event may have someone to deliver it to, so it needs an outbox row. A tenant
   * with no webhook endpoint at all has nobody: its events are stored (GET /v1/events) and go
   * no further, which spares every write of such a tenant the row, its removal and a fan-out.
   * Only the owner of the tenant's endpoints can tell, in its own LMDB; for any other tenant
   * (cluster mode) the row is written and the fan-out decides. An endpoint whose creation was
   * acknowledged is seen here: its commit renewed the read snapshot, and moved the endpoints
   * table's stamp, which `ownedEndpoints` checks.
   */
  private readonly deliverable = (e: EventRecord): boolean => {
    if (e.endpointId !== undefined || !this.owns(partitionFor(e.tenant))) return true;
    return this.ownedEndpoints.of(e.tenant).length > 0;
  };

  async handle(cmd: Command, admission?: Admission): Promise<Result<unknown>> {
    if (this.storeClosed) return CLOSING;
    if (!this.owns(cmd.partition)) return UNAVAILABLE('The owner of this resource is moving; retry shortly.');
    const answered = this.read(cmd);
    if (answered) return answered;
    switch (cmd.kind) {
      case 'order.batch': {
        const orders = this.actors.order.table as unknown as Table<OrderRecord>;
        // Only the orders it patches or deletes are looked at: its creates' ids are new.
        const named = new Set(cmd.ops.flatMap((op) => (op.op === 'create' ? [] : [op.id])));
        const keys = named.size ? batchKeys(cmd).filter((id) => !named.has(id) || !this.othersRecord(orders, id, cmd.tenant)) : batchKeys(cmd);
        return this.write(admission, cmd, keys, (now) => planBatch(cmd, orders, now));
      }
      case 'user.create':
      case 'user.replace':
      case 'user.patch':
      case 'user.delete': {
        const users = this.actors.user.table as unknown as Table<UserRecord>;
        // A deleted user leaves no membership behind: same lock, same transaction.
        const cascade = (): Write<unknown>[] => dropMemberships(this.teamTables, cmd.tenant, byUser(cmd.id));
        return this.write(admission, cmd, [usersLock(cmd.tenant), ...this.ownKeys(users, cmd.id, cmd.tenant, cmd.kind)], (now) => planUserWrite(cmd, users, this.claims, now, cascade));
      }
      case 'webhook.create': {
        // Creates of one tenant take turns, so the count they check cannot be passed by a race.
        const bound = this.actors.webhook;
        return this.write(admission, cmd, [`webhooks\u0000${cmd.tenant}`, cmd.id], (now) => {
          const held = this.store.scan(bound.table, { prefix: bound.def.listPrefix({ tenant: cmd.tenant } as ListQuery), after: undefined, reverse: false, limit: MAX_ENDPOINTS_PER_TENANT });
          if (held.length >= MAX_ENDPOINTS_PER_TENANT) {
            throw new ApiError('conflict', `A tenant has at most ${MAX_ENDPOINTS_PER_TENANT} webhook endpoints; delete one first.`);
          }
          return this.plan(cmd, bound, now);
        });
      }
      case 'refund.create':
        return this.write(admission, cmd, this.othersRecord(this.refundTables.orders, cmd.orderId, cmd.tenant) ? [] : [cmd.orderId], (now) => planRefundStart(cmd, this.refundTables, now)).then((result) => {
          if (result.ok && !result.replayed) this.refunds.kick(result.value as OperationRecord);
          return result;
        });
      case 'team.create':
      case 'team.delete':
      case 'member.add':
      case 'member.patch':
      case 'member.remove': {
        const table = cmd.kind.startsWith('team.') ? this.teamTables.teams : this.teamTables.members;
        return this.write(admission, cmd, [usersLock(cmd.tenant), ...this.ownKeys(table, cmd.id, cmd.tenant, cmd.kind)], (now) => planTeamWrite(cmd, this.teamTables, now));
      }
      case 'usage.add':
        return this.write(admission, cmd, [usageLock(cmd.partition)], () => planUsageAdd(cmd, this.usage));
      case 'idem.take':
        return this.write(admission, cmd, [], () => ({ writes: [], reply: null }));
      case 'idem.peek':
      case 'user.batchGet':
      case 'order.batchCheck':
        throw new Error('answered by read()');
      default: {
        const bound = this.actorFor(cmd);
        return this.write(admission, cmd, this.ownKeys(bound.table, cmd.id, cmd.tenant, cmd.kind), (now) => this.plan(cmd, bound, now));
      }
    }
  }

  /**
   * The key a write of `kind` holds for the record `id`: none when the record is another
   * tenant's (othersRecord). A create's id was minted for it by the gateway, so nothing is
   * stored under it, and it is not looked up: a lookup of an id not stored is a read of LMDB,
   * where a stored record is mostly a cache hit.
   */
  private ownKeys(table: Table<Versioned>, id: string, tenant: string, kind: string): string[] {
    return kind.endsWith('.create') || kind === 'member.add' || !this.othersRecord(table, id, tenant) ? [id] : [];
  }

  /**
   * Whether `id` names another tenant's record. For the caller it does not exist, and its turn,
   * which only answers so (and keeps that answer under its Idempotency-Key), must not queue
   * behind the owner's writes, nor hold them up or fill their mailbox. A record's tenant never
   * changes, and no other tenant can create one under its id.
   */
  private othersRecord(table: Table<Versioned>, id: string, tenant: string): boolean {
    const stored = table.get(id);
    return stored !== undefined && stored.tenant !== tenant;
  }

  /** Reads answer from committed state at once, without a turn; undefined for a write. */
  read(cmd: Command): Result<unknown> | undefined {
    if (this.storeClosed) return CLOSING;
    if (!this.owns(cmd.partition) || cmd.kind === 'order.batch' || cmd.kind === 'usage.add' || cmd.kind === 'idem.take') return undefined;
    if (cmd.kind === 'idem.peek') return this.peek(cmd.tenant, cmd.idem);
    if (cmd.kind === 'order.batchCheck') {
      const orders = this.actors.order.table as unknown as Table<OrderRecord>;
      // Planned as the atomic batch it checks; what the plan would write is dropped.
      const plan = planBatch({ kind: 'order.batch', tenant: cmd.tenant, partition: cmd.partition, atomic: true, ops: cmd.ops }, orders, this.now());
      return { ok: true, value: plan.reply };
    }
    if (cmd.kind === 'user.batchGet') {
      const users = this.actors.user.table as unknown as Table<UserRecord>;
      return { ok: true, value: batchGetUsers(cmd.tenant, cmd.ids, users) };
    }
    const bound = this.actorFor(cmd);
    return bound.def.isRead(cmd) ? this.readNow(cmd, bound) : undefined;
  }

  async query(q: Query): Promise<Result<unknown>> {
    if (this.storeClosed) return CLOSING;
    return this.wrapped(q.kind, async () => {
      switch (q.kind) {
        case 'order.list':
          return this.list(this.actors.order, q);
        case 'product.list':
          return this.list(this.actors.product, q);
        case 'user.list':
          return this.list(this.actors.user, q);
        case 'team.list':
          return this.list(this.actors.team, q);
        case 'member.list':
          return this.list(this.actors.member, q);
        case 'article.list':
          return this.list(this.actors.article, q);
        case 'webhook.list':
          return this.list(this.actors.webhook, q);
        case 'event.list':
          return this.list(this.actors.event, q);
        case 'delivery.list':
          return this.list(this.actors.delivery, q);
        case 'refund.list':
          return this.list(this.actors.refund, q);
        case 'usage.read':
          return readUsage(q, (range) => this.store.scan(this.usage as Table<unknown>, { ...range, reverse: false }), this.usage);
        default:
          return assertNever(q);
      }
    });
  }

  /**
   * Forgets Idempotency-Keys past their expiry, each in its key's turn (an expired key is ignored
   * on read meanwhile).
   */
  sweepIdempotency(): Promise<number> {
    return this.sweepDue(this.idem as Table<unknown>, [], (id, now) => {
      // Marked, so the key is not taken for one in flight while its expired record is deleted.
      this.expiring.add(id);
      const removed = this.enqueue(
        idemBox(id),
        async () => {
          const rec = this.idem.get(id);
          if (!rec || rec.expiresAt > now) return { ok: true, value: false };
          await this.store.commit([{ table: this.idem as Table<unknown>, id, before: rec, after: undefined }], { tier: 'service' });
          return { ok: true, value: true };
        },
        true,
        UNBOUNDED,
      );
      return whenSettled(removed, () => this.expiring.delete(id)).then((r) => r.ok && r.value === true);
    });
  }

  /** Removes finished operations past OPERATION_RETENTION_HOURS, each in its order's turn; the refund itself stays. */
  sweepOperations(): Promise<number> {
    return this.sweepDue(this.refundTables.operations as Table<unknown>, ['done'], (id) => this.sweepOperation(id));
  }

  /**
   * Removes the entries of `table` whose index value under `prefix` (an expiry) has passed, each
   * by `remove` in its own turn, a bounded chunk at a time until none is due, so a sweep keeps up
   * with any rate. A chunk that removed nothing (every key busy) waits for the next tick; a
   * failed removal is logged and tried again by the next sweep. One sweep per table at a time.
   */
  private async sweepDue(table: Table<unknown>, prefix: IndexKey, remove: (id: string, now: number) => Promise<boolean>): Promise<number> {
    const name = table.spec.name;
    if (this.sweeping.has(name)) return 0;
    this.sweeping.add(name);
    let removed = 0;
    try {
      while (!this.closing) {
        const now = this.now();
        const due = this.store.scan(table, { prefix, after: undefined, reverse: false, limit: SWEEP_BATCH }).filter(({ v }) => typeof v === 'number' && v <= now);
        let short = 0;
        const gone = await Promise.all(
          due.map(({ id }) =>
            remove(id, now).catch((err: unknown) => {
              // Want of room is told once by the store; each entry waits for the next sweep.
              if (err instanceof ApiError && err.slug === 'unavailable') short++;
              else this.opts.log.warn({ err, table: name }, 'a sweep could not remove an expired entry');
              return false;
            }),
          ),
        );
        if (short > 0) this.opts.log.warn({ table: name, entries: short }, 'a sweep waits for room in storage (STORAGE_RESERVE_MB)');
        const count = gone.filter(Boolean).length;
        removed += count;
        if (due.length < SWEEP_BATCH || count === 0) break;
      }
      return removed;
    } finally {
      this.sweeping.delete(name);
    }
  }

  private async sweepOperation(id: string): Promise<boolean> {
    const op = this.refundTables.operations.get(id);
    if (!op) return false;
    return (await this.internalTurn(op.orderId, 'operation.sweep', (at) => planOperationSweep(id, this.refundTables, at))) !== undefined;
  }

  /** Operations still running in the background on this node. */
  get runningOperations(): number {
    return this.refunds.active;
  }

  /** Fresh webhook deliveries held in memory for busy endpoints' workers (the rest wait in LMDB). */
  get heldDeliveries(): number {
    return this.dispatcher?.handedOver ?? 0;
  }

  /**
   * Starts jobs for unfinished operations this node owns that have none, while the runner has
   * room: from where the last pass stopped, wrapping around once, so operations that run or rest
   * (refund-runner.ts) are passed over once per round rather than read again by every pass; at
   * most RESUME_SCAN of them per pass.
   */
  private resumeOperations(): void {
    if (this.closing) return;
    const table = this.refundTables.operations as Table<unknown>;
    const page = MAX_JOBS * 2;
    const from = this.resumeCursor;
    let after = from;
    let wrapped = from === undefined;
    for (let scanned = 0; scanned < RESUME_SCAN && this.refunds.room > 0; ) {
      const open = this.store.scan(table, { prefix: ['open'], after, reverse: false, limit: page });
      for (const { id, v } of open) {
        scanned++;
        this.resumeCursor = [v as string | number, id];
        // Back where this pass began: every open operation was offered once.
        if (wrapped && from !== undefined && isAfter(this.resumeCursor, from)) return;
        const op = this.refundTables.operations.get(id);
        if (op && this.owns(partitionOf(op.orderId))) this.refunds.kick(op);
        if (this.refunds.room <= 0) return;
      }
      if (open.length < page) {
        if (wrapped) {
          this.resumeCursor = undefined;
          return;
        }
        wrapped = true;
        after = undefined;
      } else {
        after = this.resumeCursor;
      }
    }
  }

  /** A turn of the service's own (background jobs, sweeps): holds the order, commits durably. */
  private async internalTurn(orderId: string, kind: string, plan: (now: number) => Plan | undefined): Promise<Plan | undefined> {
    // Past MAILBOX_LIMIT too: the limit sheds clients' writes, and a refund job refused a turn
    // behind them would rest a minute with the processor's answer in hand. These turns are
    // bounded by the jobs and sweeps that ask for them.
    const result = await this.holding(
      [orderId],
      () =>
        this.wrapped(kind, async () => {
          const p = plan(this.now());
          const emitted = p?.events?.length ? eventWrites(p.events, this.events, this.deliverable) : undefined;
          const writes = emitted ? [...p!.writes, ...emitted.writes] : (p?.writes ?? []);
          // Work the service took on (a refund it accepted, a sweep) finishes in the storage reserve.
          if (writes.length) await this.store.commit(writes, { tier: 'service' });
          if (emitted?.queued) this.dispatcher?.kick();
          return p;
        }),
      UNBOUNDED,
    );
    if (!result.ok) throw fromWire(result.error);
    return result.value as Plan | undefined;
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.sweeper);
    await this.dispatcher?.close();
    await this.refunds.close();
    await Promise.allSettled([...this.boxes.values()].map((b) => b.tail));
    // It stops before its next chunk (closing is set); its commit under way lands first.
    await this.eventSweep;
    // Whatever still reaches the host (a bus not yet closed, a node's late message) is refused
    // as a failure to retry, not failed against a closed store.
    this.storeClosed = true;
    try {
      await this.store.close();
    } finally {
      this.lock.release();
    }
  }

  private actorFor(cmd: KeyedCommand): Bound {
    const kind = cmd.kind;
    if (kind.startsWith('order.')) return this.actors.order;
    if (kind.startsWith('product.')) return this.actors.product;
    if (kind.startsWith('user.')) return this.actors.user;
    if (kind.startsWith('team.')) return this.actors.team;
    if (kind.startsWith('member.')) return this.actors.member;
    if (kind.startsWith('article.')) return this.actors.article;
    if (kind.startsWith('webhook.')) return this.actors.webhook;
    if (kind.startsWith('event.')) return this.actors.event;
    if (kind.startsWith('refund.')) return this.actors.refund;
    if (kind.startsWith('operation.')) return this.actors.operation;
    throw new Error(`no actor for ${kind}`);
  }

  private list(bound: Bound, q: Exclude<Query, { kind: 'usage.read' }>): ListPage<Versioned> {
    const { query } = q;
    const ids = this.store.scan(bound.table, {
      prefix: bound.def.listPrefix(query),
      after: query.after ? [query.after.v, query.after.id] : undefined,
      reverse: query.dir === 'desc',
      limit: query.limit + 1,
    });
    const rows: ListPage<Versioned>['rows'] = [];
    for (const { v, id } of ids) {
      const record = bound.table.get(id);
      // An index entry is written in the record's transaction, so a miss means a concurrent
      // delete committed between the scan and the get. The tenant and id checks are a second
      // wall: whatever a key decodes to, a page only ever holds the caller's own records.
      if (record && record.tenant === query.tenant && record.id === id) rows.push({ v, record: !query.withChildren && bound.def.slim ? this.slimOf(bound, record) : record });
    }
    return { rows };
  }

  /**
   * A record's list form (ActorDef.slim), made once per stored record: the table keeps a read
   * record until it changes, and a page of the same records read again would copy each anew.
   */
  private slimOf(bound: Bound, record: Versioned): Versioned {
    let slim = this.slimmed.get(record);
    // Frozen like the record: every page that lists it shares it.
    if (slim === undefined) this.slimmed.set(record, (slim = deepFreeze(bound.def.slim!(record))));
    return slim;
  }

  /** The record as this caller may see it: another tenant's record does not exist for them (CONTRACT §3). */
  private load(cmd: KeyedCommand, bound: Bound): { stored: Versioned | undefined; current: Versioned | undefined } {
    const stored = bound.table.get(cmd.id);
    const current = stored && stored.tenant === cmd.tenant ? stored : undefined;
    if (stored && !current && cmd.kind.endsWith('.create')) throw new ApiError('conflict', 'That id is taken.');
    return { stored, current };
  }

  /** A read decides over committed state and writes nothing: no turn, no await. */
  private readNow(cmd: KeyedCommand, bound: Bound): Result<unknown> {
    const stat = this.stat(cmd.kind);
    const started = performance.now();
    try {
      return { ok: true, value: bound.def.decide(cmd, this.load(cmd, bound).current, this.now()).reply };
    } catch (err) {
      return this.failed(stat, cmd.kind, err);
    } finally {
      stat.totalMs += performance.now() - started;
    }
  }

  private plan(cmd: KeyedCommand, bound: Bound, now: number): Plan {
    const { stored, current } = this.load(cmd, bound);
    const decision = bound.def.decide(cmd, current, now);
    const writes: Write<unknown>[] = decision.next === current ? [] : [{ table: bound.table as Table<unknown>, id: cmd.id, before: stored, after: decision.next }];
    return { writes, reply: decision.reply, events: decision.events };
  }

  /**
   * Admits a write: bounded, keyed, and run as one turn holding every key it names. A write with
   * an Idempotency-Key also holds the key, so two requests with one key never run side by side.
   * A write whose sender gave up before its turn (`admission` in process, `budgetMs` or `deadlineAt` over NATS)
   * is dropped unrun.
   */
  private write(admission: Admission | undefined, cmd: Command, keys: string[], plan: (now: number) => Plan): Promise<Result<unknown>> {
    let held = keys;
    const id = cmd.idem ? idemId(cmd.tenant, cmd.idem.key) : '';
    if (cmd.idem) {
      // Answered here, as idem.peek answers, before any bound or queue: a retry of a kept request
      // is replayed however busy its keys are (the gateway sends the write without asking first
      // when nothing else comes before it). The turn reads the record again for its commit.
      // One string for the key's mailbox, looked up here and held below: V8 hashes it once.
      const box = idemBox(id);
      const found = this.keptOrBusy(id, box, cmd.idem, cmd.kind === 'idem.take');
      if (found) return Promise.resolve(found);
      held = [box, ...keys];
    }
    // Queued and running writes both count: the bound is on everything accepted (ARCHITECTURE 7).
    if (this.inflight >= this.inflightLimit) return Promise.resolve(UNAVAILABLE('The service is overloaded; retry shortly.'));
    const expiresAt = cmd.budgetMs === undefined ? Infinity : performance.now() + cmd.budgetMs;
    const allowance = skewAllowance(cmd.budgetMs);
    const dueBy = cmd.deadlineAt === undefined ? Infinity : cmd.deadlineAt - allowance;
    this.inflight++;
    const turn = this.holding(held, () => {
      // The sender gave up on it (and answered 503): running it now would surprise a retry.
      if (admission ? !admission.start() : performance.now() > expiresAt || this.lateByClock(dueBy, expiresAt, allowance)) return Promise.resolve(UNAVAILABLE('The request could not be served in time.'));
      return this.turn(cmd, id, plan);
    });
    return whenSettled(turn, () => this.inflight--);
  }

  /**
   * Whether a write is past `dueBy`, its cutoff on the wall clock. A write dropped by that while
   * its budget, counted from when this node read it, has more than `allowance` left shows the
   * two clocks disagree: its message was held up before this node read it, or this node's clock
   * is ahead of the sender's, and then every write from that sender may be dropped. That is said
   * at warn level, at most once a minute, with how many since. (A write that waited its time out
   * in its key's queue is late by both and is not counted.)
   */
  private lateByClock(dueBy: number, expiresAt: number, allowance: number): boolean {
    const now = Date.now();
    if (now <= dueBy) return false;
    const at = performance.now();
    if (expiresAt - at <= allowance) return true;
    this.lateByClockDrops++;
    if (at - this.lateByClockLoggedAt >= LATE_LOG_EVERY_MS) {
      this.lateByClockLoggedAt = at;
      this.opts.log.warn(
        { dropped: this.lateByClockDrops, pastCutoffMs: now - dueBy, budgetLeftMs: Math.round(expiresAt - at), allowanceMs: allowance },
        "writes dropped unrun: by this node's clock their gateway's deadline is past, or nearer than the allowance for the clocks' difference, while the time they carry says otherwise. Either their messages were held up (a stalled nats-server, a paused process), or this node's clock is ahead of the gateway's: check both clocks",
      );
      this.lateByClockDrops = 0;
    }
    return true;
  }

  /**
   * One turn: decide, then commit the effect and (with an Idempotency-Key) its result in one
   * transaction, durably, before replying. A refusal (4xx) is kept under the key as well, so a
   * retry gets the same answer; a failure of ours (5xx) is not kept (CONTRACT §7). `id` names
   * the key's record when the command has one.
   */
  private async turn(cmd: Command, id: string, plan: (now: number) => Plan): Promise<Result<unknown>> {
    const stat = this.stat(cmd.kind);
    const started = performance.now();
    try {
      const now = this.now();
      const before = cmd.idem ? this.idem.get(id) : undefined;
      if (cmd.idem) {
        const prior = this.priorResult(before, cmd.idem, cmd.kind === 'idem.take');
        if (prior) return prior;
      }
      let result: Result<unknown>;
      let writes: Write<unknown>[] = [];
      let emitted = false;
      let keep = true;
      try {
        const p = plan(now);
        writes = p.writes;
        // The outbox rows ride in the change's own transaction (ARCHITECTURE property 3).
        if (p.events?.length) {
          const events = eventWrites(p.events, this.events, this.deliverable);
          writes = [...writes, ...events.writes];
          emitted = events.queued;
        }
        result = { ok: true, value: p.reply };
      } catch (err) {
        if (!(err instanceof ApiError) || err.status >= 500) throw err;
        stat.errors++;
        result = { ok: false, error: toWire(err) };
        // Answered, not kept: the retry this answer asks for must run.
        keep = err.extra.retry !== true;
      }
      let keptUntil: number | undefined;
      if (cmd.idem && keep) {
        keptUntil = Math.min(cmd.idem.until ?? Infinity, now + this.ttlMs);
        const after: IdemRecord = cmd.kind === 'idem.take' ? { id, fingerprint: cmd.idem.fingerprint, expiresAt: keptUntil, taken: true } : idemRecord(id, cmd.idem.fingerprint, keptUntil, result, writes);
        writes.push({ table: this.idem as Table<unknown>, id, before, after });
      }
      if (writes.length) await this.store.commit(writes, { tier: tierOf(cmd.kind) });
      if (emitted) this.dispatcher?.kick();
      // The expiry goes back with the answer: a batch keeps its other groups until then.
      return keptUntil === undefined ? result : withExpiry(result, keptUntil);
    } catch (err) {
      return this.failed(stat, cmd.kind, err);
    } finally {
      stat.totalMs += performance.now() - started;
    }
  }

  /** What a retry finds before doing anything (keptOrBusy), or nothing (null). */
  private peek(tenant: string, tag: IdemTag): Result<unknown> {
    const id = idemId(tenant, tag.key);
    return this.keptOrBusy(id, idemBox(id), tag) ?? { ok: true, value: null };
  }

  /**
   * The key busy, the kept answer (or a reuse of the key), or undefined: what a request under the
   * key meets before it queues. Busy first: the first request's answer is readable from its
   * commit on, but is not on disk until its flush, and the key stays busy until then. A replay
   * sent earlier would answer 2xx for a write a power cut could still lose (ARCHITECTURE 2).
   */
  private keptOrBusy(id: string, box: string, tag: IdemTag, taking = false): Result<unknown> | undefined {
    if (this.keyBusy(id, box)) return IN_FLIGHT;
    return this.priorResult(this.idem.get(id), tag, taking);
  }

  /**
   * Whether a request with this key is queued or running. The sweeper deleting the key's expired
   * record holds the key's mailbox too, but is not one: a request then waits for it in the
   * mailbox, where a 409 would send its client away for nothing. `box`: the key's mailbox name.
   */
  private keyBusy(id: string, box: string): boolean {
    const mailbox = this.boxes.get(box);
    return mailbox !== undefined && !(mailbox.depth === 1 && this.expiring.has(id));
  }

  /**
   * The answer an earlier request with this key left, if it is still kept. Taking the key
   * (`taking`), any record of the same request means it is taken already; for anything else, a
   * key only taken has no answer yet.
   */
  private priorResult(rec: IdemRecord | undefined, tag: IdemTag, taking = false): Result<unknown> | undefined {
    if (!rec || rec.expiresAt <= this.now()) return undefined;
    if (rec.fingerprint !== tag.fingerprint) {
      return { ok: false, error: { code: 'idempotency-key-reused', detail: 'This Idempotency-Key was first used with another method, path or body.' } };
    }
    if (taking) return { ok: true, value: null, replayed: true, keptUntil: rec.expiresAt };
    if (rec.taken) return undefined;
    const result = rec.bytes ? this.keptRecord(rec.table!, rec.bytes) : rec.result!;
    // Bytes that cannot be read back are our failure, answered as one, never as a replay.
    if (rec.bytes && !result.ok) return result;
    return asReplay(result, rec.expiresAt, rec.expiresAt - this.now());
  }

  /** A record kept as bytes under a key; one naming a table this host has not opened is a fault of ours (500). */
  private keptRecord(table: string, bytes: Uint8Array): Result<unknown> {
    const owner = this.store.tableNamed(table);
    if (owner) return { ok: true, value: owner.decode(bytes) };
    this.opts.log.error({ table }, 'an idempotency record names a table that is not open');
    return { ok: false, error: { code: 'internal', detail: 'The request could not be completed.' } };
  }

  private stat(kind: string): Stat {
    // The kind counted last, remembered: runs of one kind (reads of one sort, mostly) skip the
    // Map. Kinds are never removed, so the remembered entry is always the Map's.
    let stat = kind === this.lastKind ? this.lastStat : this.stats.get(kind);
    if (!stat) this.stats.set(kind, (stat = { count: 0, errors: 0, totalMs: 0 }));
    this.lastKind = kind;
    this.lastStat = stat;
    stat.count++;
    return stat;
  }

  private failed(stat: Stat, kind: string, err: unknown): Result<never> {
    stat.errors++;
    if (err instanceof ApiError) return { ok: false, error: toWire(err) };
    this.store.failedWith(err);
    this.opts.log.error({ err, kind }, 'actor handler failed');
    return { ok: false, error: { code: 'internal', detail: 'The request could not be completed.' } };
  }

  /** Every handler is wrapped the same way: count, time, turn errors into data, always reply. */
  private async wrapped(kind: string, work: () => Promise<unknown> | unknown): Promise<Result<unknown>> {
    const started = performance.now();
    const stat = this.stat(kind);
    try {
      return { ok: true, value: await work() };
    } catch (err) {
      return this.failed(stat, kind, err);
    } finally {
      stat.totalMs += performance.now() - started;
    }
  }

  /**
   * Runs `run` once it holds every key. Keys are taken all at once when none is held, or else in
   * one global (sorted) order, so two turns that share keys queue behind each other and never
   * wait on each other in a cycle.
   */
  private holding(keys: string[], run: () => Promise<Result<unknown>>, limit = this.opts.mailboxLimit): Promise<Result<unknown>> {
    if (keys.length === 1) return this.enqueue(keys[0]!, run, true, limit);
    const distinct = keys.length === 2 ? (keys[0] === keys[1] ? [keys[0]!] : keys) : [...new Set(keys)];
    if (distinct.length === 1) return this.enqueue(distinct[0]!, run, true, limit);
    // None held (most keyed writes, most batches): all taken at once, given back by one reaction.
    if (this.noneHeld(distinct)) return this.startHoldingAll(distinct, run);
    const sorted = distinct.length === 2 ? (distinct[0]! < distinct[1]! ? distinct : [distinct[1]!, distinct[0]!]) : distinct.sort();
    // One at a time in the global order. Only the first is taken in this call: each next one
    // after a turn of the microtask queue, so a batch of thousands of keys never nests thousands
    // of calls deep.
    const take = (i: number): Promise<Result<unknown>> => (i === sorted.length ? run() : this.enqueue(sorted[i]!, () => take(i + 1), i === 0, limit));
    return take(0);
  }

  /**
   * Runs `run` after everything queued under `key` before it. With nothing queued (most turns)
   * and `now`, it starts at once, in this call: waiting for an already resolved promise would only
   * cost a promise and a turn of the microtask queue. (A turn started so must not queue under its
   * own key before its first await: that one would not wait for it. None does.)
   */
  private enqueue(key: string, run: () => Promise<Result<unknown>>, now: boolean, limit: number): Promise<Result<unknown>> {
    let mine = this.boxes.get(key);
    let result: Promise<Result<unknown>>;
    if (mine === undefined) {
      // A mailbox exists only while something is queued or running under its key (depth >= 1).
      mine = { key, tail: IDLE, depth: 1 };
      this.boxes.set(key, mine);
      result = now ? startNow(run) : IDLE.then(run);
    } else {
      if (mine.depth >= limit) return Promise.resolve(UNAVAILABLE('Too many pending changes to this resource; retry shortly.'));
      mine.depth++;
      // After the turn before it, however that one ended: a turn that rejected must not take the
      // turns queued behind it down unrun. (Turns return errors as data; the sweep's may not.)
      result = mine.tail.then(run, run);
    }
    mine.tail = result;
    const box = mine;
    return whenSettled(result, () => this.release(box));
  }

  /** Whether no mailbox is open under any of `keys`. */
  private noneHeld(keys: string[]): boolean {
    for (const key of keys) if (this.boxes.has(key)) return false;
    return true;
  }

  /** `run`, started now holding `keys` (distinct, none held), as one after another would. */
  private startHoldingAll(keys: string[], run: () => Promise<Result<unknown>>): Promise<Result<unknown>> {
    const boxes: Mailbox[] = [];
    for (const key of keys) {
      const box: Mailbox = { key, tail: IDLE, depth: 1 };
      this.boxes.set(key, box);
      boxes.push(box);
    }
    const result = startNow(run);
    for (const box of boxes) box.tail = result;
    return whenSettled(result, () => {
      for (const box of boxes) this.release(box);
    });
  }

  /** One turn under `key` is over; the mailbox goes once nothing is left in it. */
  private release(box: Mailbox): void {
    if (--box.depth === 0 && this.boxes.get(box.key) === box) this.boxes.delete(box.key);
  }
}

/**
 * `work`, with `done` run once it settles either way. Two handlers rather than `finally`, which
 * costs three promises where this costs one.
 */
function whenSettled<T>(work: Promise<T>, done: () => void): Promise<T> {
  return work.then(
    (r) => {
      done();
      return r;
    },
    (err: unknown) => {
      done();
      throw err;
    },
  );
}

/** `run`'s promise, started in this call; a synchronous throw becomes its rejection. */
function startNow(run: () => Promise<Result<unknown>>): Promise<Result<unknown>> {
  try {
    return run();
  } catch (err) {
    return Promise.reject(err);
  }
}

/** Whether index position `a` (sort value, id) comes after `b`. */
function isAfter(a: [string | number, string], b: [string | number, string]): boolean {
  return a[0] !== b[0] ? a[0] > b[0] : a[1] > b[1];
}

// The answer with its expiry, and its replay mark, built member by member: a spread of the
// result gave every kept answer a map of its own, so each one missed V8's inline caches where it
// was built and made megamorphic every site that reads answers (BusClient's unwrap among them).
function withExpiry(result: Result<unknown>, keptUntil: number): Result<unknown> {
  return result.ok ? { ok: true, value: result.value, keptUntil } : { ok: false, error: result.error, keptUntil };
}

function asReplay(result: Result<unknown>, keptUntil: number, keptForMs: number): Result<unknown> {
  return result.ok ? { ok: true, value: result.value, replayed: true, keptUntil, keptForMs } : { ok: false, error: result.error, replayed: true, keptUntil, keptForMs };
}

/**
 * Whose write a command is, and so how deep into the storage reserve it may go (storage/room.ts).
 * Every command is a client's, but for the dispatcher's disabling of an endpoint whose receiver
 * answered 410 or kept failing: that is webhook work, and it must go ahead wherever deliveries
 * still do, or the endpoint would be sent to again.
 */
function tierOf(kind: Command['kind']): RoomTier {
  return kind === 'webhook.disable' ? 'webhooks' : 'client';
}
