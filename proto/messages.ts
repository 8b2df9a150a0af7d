// Message contracts between gateway and actors. These shapes cross the bus as plain objects
// (in-process) or msgpackr (NATS), so they hold only data: no class instances, no functions.
// Every command names the partition that owns its key; the bus routes on it alone.

import type { WireError } from '../common/errors.js';
import type { ArticleInput, ArticlePatch, ArticleRecord } from './articles.js';
import type { WebhookCommand, WebhookQuery, WebhookReplies } from './webhooks.js';

export type { ArticleInput, ArticlePatch, ArticleRecord, Translation } from './articles.js';

// ---- records: the actor state as stored, rendered by the gateway per API version ----

export type OrderStatus = 'pending' | 'paid' | 'cancelled' | 'refunded';

export interface ItemRecord {
  id: string;
  productId: string;
  quantity: number;
  /** Integer minor units of the order's currency. */
  unitPrice: number;
  createdAt: number;
  updatedAt: number;
}

export interface OrderRecord {
  id: string;
  tenant: string;
  /** Bumped on every change to the order or its items; the ETag is built from it. */
  version: number;
  status: OrderStatus;
  currency: string;
  customerId: string | null;
  note: string | null;
  metadata: Record<string, string>;
  items: ItemRecord[];
  /** Sum of quantity × unitPrice over items, kept with the record so it can be indexed. */
  total: number;
  /** Minor units refunded so far (succeeded refunds); absent means 0. */
  refunded?: number;
  /** Minor units held by refunds still being processed; absent means 0. */
  refundHeld?: number;
  /** Refunds ever started on this order (bounded by MAX_REFUNDS_PER_ORDER); absent means 0. */
  refundCount?: number;
  createdAt: number;
  updatedAt: number;
}

export type RefundStatus = 'pending' | 'succeeded' | 'failed';

/** A refund lives in its order's partition, so the order, the refund and its operation change in one transaction. */
export interface RefundRecord {
  id: string;
  tenant: string;
  version: number;
  orderId: string;
  /** Integer minor units of `currency` (the order's). */
  amount: number;
  currency: string;
  reason: string | null;
  status: RefundStatus;
  /** The operation that processes it. */
  operationId: string;
  /** Why the processor refused it, when `failed`. */
  failureReason: string | null;
  createdAt: number;
  updatedAt: number;
}

export type OperationStatus = 'pending' | 'running' | 'succeeded' | 'failed';

/** A background job (CONTRACT §8). Today every operation processes one refund. */
export interface OperationRecord {
  id: string;
  tenant: string;
  version: number;
  type: 'refund';
  status: OperationStatus;
  refundId: string;
  orderId: string;
  /** Set when it failed: the problem, as data. */
  error: WireError | null;
  /** Processor calls made so far (a resumed job counts again). */
  attempts: number;
  createdAt: number;
  updatedAt: number;
  /** When it reached succeeded or failed. */
  finishedAt: number | null;
  /** When a finished operation is swept (OPERATION_RETENTION_HOURS after it finished). */
  expiresAt: number | null;
}

export interface ProductRecord {
  id: string;
  tenant: string;
  version: number;
  name: string;
  price: number;
  currency: string;
  createdAt: number;
  updatedAt: number;
}

export interface UserRecord {
  id: string;
  tenant: string;
  version: number;
  /** As given; uniqueness is per tenant and ignores case. */
  email: string;
  name: string | null;
  createdAt: number;
  updatedAt: number;
}

export interface TeamRecord {
  id: string;
  tenant: string;
  version: number;
  name: string;
  createdAt: number;
  updatedAt: number;
}

export type TeamRole = 'owner' | 'admin' | 'member';

/** A user's membership of a team; its id is `<teamId>:<userId>`. */
export interface MembershipRecord {
  id: string;
  tenant: string;
  version: number;
  teamId: string;
  userId: string;
  role: TeamRole;
  joinedAt: number;
  updatedAt: number;
}

// ---- inputs: what the gateway has already validated against the JSON Schemas ----

export interface ItemInput {
  id: string;
  productId: string;
  quantity: number;
  unitPrice: number;
}

export interface OrderInput {
  currency: string;
  customerId: string | null;
  note: string | null;
  metadata: Record<string, string>;
}

/** JSON Merge Patch (RFC 7396) of the writable members; null removes (sets to null). */
export interface OrderPatch {
  currency?: string;
  customerId?: string | null;
  note?: string | null;
  metadata?: Record<string, string | null> | null;
}

export interface ProductInput {
  name: string;
  price: number;
  currency: string;
}

export interface UserInput {
  email: string;
  name: string | null;
}

export interface UserPatch {
  email?: string;
  name?: string | null;
}

export interface ProductPatch {
  name?: string;
  price?: number;
  currency?: string;
}

/** Versions the client's If-Match names; '*' matches any existing record. */
export type IfMatch = number[] | '*' | undefined;

/**
 * A write's preconditions on the record it acts on (RFC 9110 §13.1.1-2), as versions: If-Match
 * must name the current version; If-None-Match must not (and `*` fails on any existing record).
 */
export interface Guarded {
  ifMatch: IfMatch;
  ifNoneMatch?: IfMatch;
}

export type SortDir = 'asc' | 'desc';

/**
 * What the NATS bus reckons the encoded reply to one command takes, when it sizes each coalesced
 * message so its reply fits the server's max_payload. Most records are far smaller; one as large
 * as the schemas allow (50 metadata values of 500 characters, at four bytes a character) is
 * larger, and a node sends what does not fit its reply after it (common/reply-fit.ts).
 */
export const MAX_REPLY_BYTES = 64 * 1024;

export interface ListQuery {
  tenant: string;
  /** Secondary-index filter value, or undefined for all. */
  filter: string | undefined;
  sort: string;
  dir: SortDir;
  /** Keyset position: the last (sort value, id) the client saw. */
  after: { v: number | string; id: string } | undefined;
  limit: number;
  /** When false the actor may drop children (line items) the page will not render. */
  withChildren: boolean;
}

/**
 * An Idempotency-Key on the request that sent a write (CONTRACT §7). The owner keeps the write's
 * result under (tenant, key) in the write's own transaction, so a retry replays it.
 */
export interface IdemTag {
  key: string;
  /** Hash of method, path, query and body: the same key with another request is refused. */
  fingerprint: string;
  /**
   * When the kept answer expires (ms since the epoch), where it is not a full TTL after the
   * commit: a batch's groups are kept under sub-keys until the key's home record expires, so no
   * group outlives the key and refuses a later request the home group has already run.
   */
  until?: number;
}

interface Base {
  tenant: string;
  partition: number;
  idem?: IdemTag;
  /**
   * Milliseconds the sender will still wait for the answer, set by the NATS bus as it sends (the
   * in-process bus settles this exactly instead: Admission). A write still queued when its budget
   * runs out is dropped unrun: the client was already told 503, and running it later would make a
   * retry do the work twice.
   */
  budgetMs?: number;
  /**
   * The same deadline on the sender's wall clock (ms since the epoch), set with `budgetMs`. The
   * budget counts from when the node reads the message; this also counts the time before, which
   * a stalled nats-server or a paused node can make longer than the budget itself. A node whose
   * clock reads within CLOCK_SKEW_MS of it, or past it (actors/host.ts), drops the write unrun.
   */
  deadlineAt?: number;
}

export type Command =
  | (Base & { kind: 'order.create'; id: string; input: OrderInput; items: ItemInput[] })
  | (Base & { kind: 'order.get'; id: string })
  | (Base & Guarded & { kind: 'order.replace'; id: string; input: OrderInput })
  | (Base & Guarded & { kind: 'order.patch'; id: string; patch: OrderPatch })
  | (Base & Guarded & { kind: 'order.delete'; id: string })
  | (Base & Guarded & { kind: 'order.pay'; id: string })
  | (Base & Guarded & { kind: 'order.cancel'; id: string })
  | (Base & Guarded & { kind: 'order.addItem'; id: string; item: ItemInput; currency: string })
  | (Base & { kind: 'product.create'; id: string; input: ProductInput })
  | (Base & { kind: 'product.get'; id: string })
  | (Base & Guarded & { kind: 'product.patch'; id: string; patch: ProductPatch })
  | (Base & Guarded & { kind: 'product.delete'; id: string })
  // Every user of a tenant lives in the tenant's partition, so the email check is one turn.
  | (Base & { kind: 'user.create'; id: string; input: UserInput })
  | (Base & { kind: 'user.get'; id: string })
  | (Base & Guarded & { kind: 'user.replace'; id: string; input: UserInput })
  | (Base & Guarded & { kind: 'user.patch'; id: string; patch: UserPatch })
  | (Base & Guarded & { kind: 'user.delete'; id: string })
  | (Base & { kind: 'user.batchGet'; ids: string[] })
  // Teams and memberships live with the tenant's users, under the same lock: a membership
  // checks its user, and deleting a user removes its memberships, in one turn.
  | (Base & { kind: 'team.create'; id: string; name: string })
  | (Base & { kind: 'team.get'; id: string })
  | (Base & Guarded & { kind: 'team.delete'; id: string })
  | (Base & { kind: 'member.add'; id: string; teamId: string; userId: string; role: TeamRole })
  | (Base & { kind: 'member.get'; id: string })
  | (Base & Guarded & { kind: 'member.patch'; id: string; role: TeamRole })
  | (Base & Guarded & { kind: 'member.remove'; id: string })
  | (Base & { kind: 'article.create'; id: string; input: ArticleInput })
  | (Base & { kind: 'article.get'; id: string })
  | (Base & Guarded & { kind: 'article.patch'; id: string; patch: ArticlePatch })
  | (Base & Guarded & { kind: 'article.delete'; id: string })
  /**
   * Starts a refund: `id` names the new refund, minted in the order's partition with its
   * operation. `amount` null refunds everything that is left.
   */
  | (Base & {
      kind: 'refund.create';
      id: string;
      orderId: string;
      operationId: string;
      amount: number | null;
      /** The currency a v2 amount was written in; it must be the order's. */
      currency?: string;
      /** The client writes money objects (v2): refusals name amounts in major units. */
      majorUnits?: true;
      reason: string | null;
    })
  | (Base & { kind: 'refund.get'; id: string })
  | (Base & { kind: 'operation.get'; id: string })
  | (Base & {
      kind: 'order.batch';
      atomic: boolean;
      ops: BatchOp[];
      /** Operations the gateway refused before sending; kept with the key, so a retry answers them alike. */
      refused?: BatchOutcome[];
    })
  /**
   * What the owner would answer each of `ops` as an atomic batch, from its committed state, writing
   * nothing (a read): asked for an atomic batch the gateway refused some operations of already, so
   * its one problem names every operation that fails. A node of an earlier release answers it
   * with an error, and writes nothing either.
   */
  | (Base & { kind: 'order.batchCheck'; ops: BatchOp[] })
  /**
   * Asks the owner of `partition` for the stored answer to `idem` (a read): the answer itself,
   * marked replayed; or 409 while a request with the key runs; or `null` when there is none.
   */
  | (Base & { kind: 'idem.peek'; idem: IdemTag })
  /**
   * Takes `idem` at the owner of `partition` (the key's home) for a request whose write is kept
   * by another owner: a write of the key alone, kept like any answer, so the same key sent with
   * another request is refused (422) there before that request runs anywhere.
   */
  | (Base & { kind: 'idem.take'; idem: IdemTag })
  // Webhook endpoints (in the tenant's partition) and events (where they were emitted).
  | (Omit<Base, 'tenant' | 'partition'> & WebhookCommand)
  /** Calls to non-active routes counted by a gateway since its last flush (actors/usage.ts). */
  | (Base & { kind: 'usage.add'; counts: UsageCount[] });

/** `n` calls by `principal` to `route` (`METHOD template`) on `day` (UTC, YYYY-MM-DD). */
export interface UsageCount {
  route: string;
  day: string;
  principal: string;
  n: number;
}

/** One stored residual-traffic sum. */
export interface UsageRow {
  route: string;
  day: string;
  principal: string;
  count: number;
}

/**
 * One operation of POST /orders/batch, already validated and priced by the gateway. Every order
 * an `order.batch` command touches lives in its partition, so the batch is one turn and (when it
 * writes) one transaction.
 */
export type BatchOp =
  | { index: number; op: 'create'; id: string; input: OrderInput; items: ItemInput[] }
  | { index: number; op: 'patch'; id: string; ifMatch: IfMatch; patch: OrderPatch }
  | { index: number; op: 'delete'; id: string; ifMatch: IfMatch };

/** The outcome of one batch operation: the order's id and new version, or why it failed. */
export type BatchOutcome = { index: number; ok: true; id: string; version: number | null } | { index: number; ok: false; error: WireError };

/** List queries go to every owner node (scatter), each answering for the partitions it owns. */
export type Query =
  | { kind: 'order.list'; query: ListQuery }
  | { kind: 'product.list'; query: ListQuery }
  | { kind: 'user.list'; query: ListQuery }
  | { kind: 'team.list'; query: ListQuery }
  /** `filter` is the team id. */
  | { kind: 'member.list'; query: ListQuery }
  | { kind: 'article.list'; query: ListQuery }
  /** `filter` is the order id. */
  | { kind: 'refund.list'; query: ListQuery }
  | WebhookQuery
  /** Residual-traffic sums of the partitions a node owns: one route, or all; from a day on. */
  | { kind: 'usage.read'; route?: string; since?: string };

export interface ReplyMap extends WebhookReplies {
  'order.create': OrderRecord;
  'order.get': OrderRecord;
  'order.replace': OrderRecord;
  'order.patch': OrderRecord;
  'order.delete': null;
  'order.pay': OrderRecord;
  'order.cancel': OrderRecord;
  'order.addItem': OrderRecord;
  'product.create': ProductRecord;
  'product.get': ProductRecord;
  'product.patch': ProductRecord;
  'product.delete': null;
  'user.create': UserRecord;
  'user.get': UserRecord;
  'user.replace': UserRecord;
  'user.patch': UserRecord;
  'user.delete': null;
  /** One slot per id asked, in order: the user, or null where the id names none. */
  'user.batchGet': (UserRecord | null)[];
  'user.list': ListPage<UserRecord>;
  'team.create': TeamRecord;
  'team.get': TeamRecord;
  'team.delete': null;
  'member.add': MembershipRecord;
  'member.get': MembershipRecord;
  'member.patch': MembershipRecord;
  'member.remove': null;
  'team.list': ListPage<TeamRecord>;
  'member.list': ListPage<MembershipRecord>;
  'article.create': ArticleRecord;
  'article.get': ArticleRecord;
  'article.patch': ArticleRecord;
  'article.delete': null;
  'refund.create': OperationRecord;
  'refund.get': RefundRecord;
  'refund.list': ListPage<RefundRecord>;
  'operation.get': OperationRecord;
  'order.batch': BatchOutcome[];
  'order.batchCheck': BatchOutcome[];
  'idem.peek': unknown;
  'idem.take': null;
  'order.list': ListPage<OrderRecord>;
  'product.list': ListPage<ProductRecord>;
  'article.list': ListPage<ArticleRecord>;
  'usage.add': null;
  'usage.read': UsageRow[];
}

/**
 * One node's slice of a list: up to limit+1 records in index order, each with its sort value.
 * `cut`: the node left out the rows after these to fit its reply into NATS max_payload, though
 * it has more; a merged page may not go past the last row here (gateway/collection.ts).
 */
export interface ListPage<T> {
  rows: { v: number | string; record: T }[];
  cut?: true;
}

/**
 * `replayed`: the answer is the stored result of an earlier request with the same
 * Idempotency-Key, kept until `keptUntil` (ms since the epoch, by its owner's clock) and, on a
 * replay, for `keptForMs` more from when its owner answered: what a gateway caching the answer
 * goes by, since its own clock may differ from the owner's.
 */
export type Result<T> = ({ ok: true; value: T } | { ok: false; error: WireError }) & { replayed?: true; keptUntil?: number; keptForMs?: number };

export type Kind = Command['kind'] | Query['kind'];
/** Commands addressed to one record (not the batches, which name many, nor the peek). */
export type KeyedCommand = Exclude<Command, { kind: 'order.batch' | 'order.batchCheck' | 'idem.peek' | 'idem.take' | 'user.batchGet' | 'usage.add' }>;
export type CommandOf<K extends Command['kind']> = Extract<Command, { kind: K }>;

/**
 * Reads of one record whose answer is decided by kind, tenant, id and the owner's committed state
 * alone: each owner answers them at once, from committed state, without a turn (`isRead` of its
 * actor). Two of them with the same kind, tenant and id that leave for the owner together get
 * the same answer, so the cluster bus sends one and shares its result (common/nats-bus.ts).
 */
const SHARED_READ_KINDS = [
  'order.get',
  'product.get',
  'refund.get',
  'operation.get',
  'user.get',
  'team.get',
  'member.get',
  'article.get',
  'webhook.get',
  'event.get',
] as const satisfies readonly Extract<Command, { id: string }>['kind'][];
export type SharedReadKind = (typeof SHARED_READ_KINDS)[number];
export const SHARED_READS: ReadonlySet<SharedReadKind> = new Set(SHARED_READ_KINDS);
export type QueryOf<K extends Query['kind']> = Extract<Query, { kind: K }>;

export function assertNever(x: never): never {
  throw new Error(`unhandled message kind: ${JSON.stringify(x)}`);
}
