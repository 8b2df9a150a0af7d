// The actor host: owns a set of partitions and runs every command for a key as one turn at a
// time (ARCHITECTURE property 1). Each turn loads the committed record, asks the resource actor
// for a decision, and commits it durably before replying. Reads skip the mailbox: they see
// committed state, and a write is acknowledged only once committed, so a client always reads
// its own acknowledged writes.

import type { ActorEndpoint } from '../common/bus.js';
import { ApiError, toWire } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import { Store, type Table } from '../storage/store.js';
import {
  assertNever,
  type Command,
  type ListPage,
  type Query,
  type Result,
} from '../proto/messages.js';
import type { ActorDef, Versioned } from './actor.js';
import { orderActor } from './orders.js';
import { productActor } from './products.js';

export interface HostOptions {
  dataDir: string;
  /** Partitions this host serves; commands for others are refused as unavailable. */
  partitions: ReadonlySet<number>;
  /** Most queued commands per key. */
  mailboxLimit: number;
  /** Most commands in flight across the host. */
  inflightLimit?: number;
  log: Logger;
}

interface Mailbox {
  tail: Promise<unknown>;
  depth: number;
}

interface Stat {
  count: number;
  errors: number;
  totalMs: number;
}

// A registry entry pairs an actor with its opened table; the generic parameters are erased here
// because the host dispatches on the command's kind prefix at run time.
interface Bound {
  def: ActorDef<Versioned, Command>;
  table: Table<Versioned>;
}

const UNAVAILABLE = (detail: string): Result<never> => ({ ok: false, error: { code: 'unavailable', detail } });

export class ActorHost implements ActorEndpoint {
  private readonly store: Store;
  private readonly actors: Record<'order' | 'product', Bound>;
  private readonly boxes = new Map<string, Mailbox>();
  private inflight = 0;
  private readonly inflightLimit: number;
  readonly stats = new Map<string, Stat>();

  constructor(private readonly opts: HostOptions) {
    this.store = Store.open(opts.dataDir);
    this.inflightLimit = opts.inflightLimit ?? 20_000;
    const bind = <T extends Versioned, C extends Command>(def: ActorDef<T, C>): Bound => ({
      def: def as unknown as ActorDef<Versioned, Command>,
      table: this.store.table(def.table) as unknown as Table<Versioned>,
    });
    this.actors = { order: bind(orderActor), product: bind(productActor) };
  }

  owns(partition: number): boolean {
    return this.opts.partitions.has(partition);
  }

  async handle(cmd: Command): Promise<Result<unknown>> {
    if (!this.owns(cmd.partition)) return UNAVAILABLE('The owner of this resource is moving; retry shortly.');
    const bound = this.actorFor(cmd);
    if (bound.def.isRead(cmd)) return this.readNow(cmd, bound);
    // Queued and running writes both count: the bound is on everything accepted (ARCHITECTURE 7).
    if (this.inflight >= this.inflightLimit) return UNAVAILABLE('The service is overloaded; retry shortly.');
    const expiresAt = cmd.budgetMs === undefined ? Infinity : performance.now() + cmd.budgetMs;
    this.inflight++;
    try {
      return await this.enqueue(cmd.id, () => {
        // The sender gave up on it (and answered 503): running it now would surprise a retry.
        if (performance.now() > expiresAt) return Promise.resolve(UNAVAILABLE('The request could not be served in time.'));
        return this.turn(cmd, bound);
      });
    } finally {
      this.inflight--;
    }
  }

  read(cmd: Command): Result<unknown> | undefined {
    if (!this.owns(cmd.partition)) return undefined;
    const bound = this.actorFor(cmd);
    return bound.def.isRead(cmd) ? this.readNow(cmd, bound) : undefined;
  }

  async query(q: Query): Promise<Result<unknown>> {
    return this.wrapped(q.kind, async () => {
      switch (q.kind) {
        case 'order.list':
          return this.list(this.actors.order, q);
        case 'product.list':
          return this.list(this.actors.product, q);
        default:
          return assertNever(q);
      }
    });
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.boxes.values()].map((b) => b.tail));
    await this.store.close();
  }

  private actorFor(cmd: Command): Bound {
    const kind = cmd.kind;
    if (kind.startsWith('order.')) return this.actors.order;
    if (kind.startsWith('product.')) return this.actors.product;
    throw new Error(`no actor for ${kind}`);
  }

  private list(bound: Bound, q: Query): ListPage<Versioned> {
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
      if (record && record.tenant === query.tenant && record.id === id) rows.push({ v, record: !query.withChildren && bound.def.slim ? bound.def.slim(record) : record });
    }
    return { rows };
  }

  /** The record as this caller may see it: another tenant's record does not exist for them (CONTRACT §3). */
  private load(cmd: Command, bound: Bound): { stored: Versioned | undefined; current: Versioned | undefined } {
    const stored = bound.table.get(cmd.id);
    const current = stored && stored.tenant === cmd.tenant ? stored : undefined;
    if (stored && !current && cmd.kind.endsWith('.create')) throw new ApiError('conflict', 'That id is taken.');
    return { stored, current };
  }

  /** A read decides over committed state and writes nothing: no turn, no await. */
  private readNow(cmd: Command, bound: Bound): Result<unknown> {
    const stat = this.stat(cmd.kind);
    const started = performance.now();
    try {
      return { ok: true, value: bound.def.decide(cmd, this.load(cmd, bound).current, Date.now()).reply };
    } catch (err) {
      return this.failed(stat, cmd.kind, err);
    } finally {
      stat.totalMs += performance.now() - started;
    }
  }

  /** One turn for one key: load, decide, commit durably, reply. */
  private turn(cmd: Command, bound: Bound): Promise<Result<unknown>> {
    return this.wrapped(cmd.kind, async () => {
      const { stored, current } = this.load(cmd, bound);
      const decision = bound.def.decide(cmd, current, Date.now());
      if (decision.next !== current) {
        await this.store.commit([{ table: bound.table as Table<unknown>, id: cmd.id, before: stored, after: decision.next }]);
      }
      return decision.reply;
    });
  }

  private stat(kind: string): Stat {
    let stat = this.stats.get(kind);
    if (!stat) this.stats.set(kind, (stat = { count: 0, errors: 0, totalMs: 0 }));
    stat.count++;
    return stat;
  }

  private failed(stat: Stat, kind: string, err: unknown): Result<never> {
    stat.errors++;
    if (err instanceof ApiError) return { ok: false, error: toWire(err) };
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

  private enqueue(key: string, run: () => Promise<Result<unknown>>): Promise<Result<unknown>> {
    let box = this.boxes.get(key);
    if (!box) {
      box = { tail: Promise.resolve(), depth: 0 };
      this.boxes.set(key, box);
    }
    if (box.depth >= this.opts.mailboxLimit) return Promise.resolve(UNAVAILABLE('Too many pending changes to this resource; retry shortly.'));
    box.depth++;
    const mine = box;
    const result = mine.tail.then(run);
    mine.tail = result;
    return result.finally(() => {
      if (--mine.depth === 0 && this.boxes.get(key) === mine) this.boxes.delete(key);
    });
  }
}
