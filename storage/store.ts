// Everything that touches LMDB lives here (STYLE 7). A record table keeps records by id; the
// index table keeps secondary-index keys (tenant, filter, sort key, id) that lists scan in key
// order. A write puts the record, swaps its index keys and (later) appends to the outbox inside
// ONE transaction, and its promise settles only once that transaction is flushed to disk
// (ARCHITECTURE properties 2 and 3).

import { Buffer } from 'node:buffer';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { inspect } from 'node:util';
import { BoundedMap } from '../common/bounded-map.js';
import { exitNow } from '../common/shutdown.js';
import { deepFreeze } from '../common/freeze.js';
import { MappedPages, NO_METER, type ReadMeter } from './mapped-pages.js';
import { PAGE_BYTES, Room, type RoomTier } from './room.js';
import { ApiError } from '../common/errors.js';
import { asBinary, open, type Binary, type Database, type Key, type RootDatabase, type RootDatabaseOptionsWithPath } from 'lmdb';

export type IndexKey = (string | number)[];

export interface TableSpec<T> {
  name: string;
  /** Every index key the record should have; recomputed and diffed on each write. */
  indexKeys(record: T): IndexKey[];
  /**
   * Keep recently read records decoded in memory (the resources clients read: orders, users,
   * ...). Tables mostly written and seldom read again (events, deliveries, keys) leave it off.
   */
  cached?: boolean;
  /**
   * Remember ids read and found missing, until a write to them begins. For a table that is not
   * cached and is mostly asked for ids it does not hold: the idempotency keys, each looked up
   * twice or more by the write that first uses it (as it arrives or by the gateway's peek, then
   * in its turn).
   */
  missesKept?: boolean;
  /** A byte layout of the table's own, in place of msgpackr's (RecordCodec). */
  codec?: RecordCodec<T>;
}

/**
 * The first byte of every record a RecordCodec writes: 0xc1, which msgpack never uses, so no
 * value msgpackr encodes starts with it, and a table given a codec still reads the records
 * msgpackr wrote into it before.
 */
export const RECORD_MARK = 0xc1;

/**
 * A fixed byte layout for a table's records, for a record written on many requests (the
 * Idempotency-Key's, on every keyed POST), where msgpackr's general encoder costs several times
 * what copying a few fields does. The layout starts with RECORD_MARK; `msgpack` encodes and
 * decodes any member the layout holds as msgpackr bytes, with the table's own record shapes.
 */
export interface RecordCodec<T> {
  encode(record: T, msgpack: (value: unknown) => Uint8Array): Uint8Array;
  /** The record stored under `id`, from bytes `encode` wrote (they start with RECORD_MARK). */
  decode(bytes: Buffer, id: string, msgpack: (bytes: Uint8Array) => unknown): T;
}

export interface Write<T> {
  table: Table<T>;
  id: string;
  /** The record as it was before this write (undefined: it did not exist). */
  before: T | undefined;
  /** The record after this write (undefined: delete it). */
  after: T | undefined;
  /** `after` as this table stores it (Table.encode), when the writer encoded it already. */
  encoded?: Uint8Array;
}

export interface RangeQuery {
  prefix: IndexKey;
  /** Exclusive keyset position inside the prefix: [sortValue, id]. */
  after: [number | string, string] | undefined;
  reverse: boolean;
  limit: number;
}

const MAP_SIZE = 256 * 1024 ** 3;

// Above every key element we store. ordered-binary writes strings as UTF-8, so no string is a
// safe ceiling: '\uffff' sorts below every character past U+FFFF, emoji included, and a product
// named '🍕 ...' would fall out of name-sorted lists. A single 0xff byte is ordered-binary's
// MAXIMUM_KEY, above every value it encodes (ordered-binary README).
const HIGH = Buffer.from([0xff]);

// lmdb-js refuses keys over 1978 bytes (its limit for 4 KiB pages). A key whose bound is at most
// this is surely accepted: ordered-binary spends at most 3 bytes per UTF-16 unit and 1 to escape
// a string's first character, 9 per number, and 1 to separate elements.
const KEY_BYTES_SURE = 1978;

interface Op {
  db: Database<unknown, Key>;
  key: Key;
  /** The value's stored bytes; undefined: remove the key. */
  value: Binary | undefined;
  /** A record's bytes (in `value`), to tell whether a failed commit was applied (Store.appliedAnyway). */
  bytes?: Uint8Array;
  /** A record's put or remove that changes what is stored (a remove of a record that is there). */
  changes?: boolean;
}

interface Encoding {
  encoder: { encode(value: unknown): Uint8Array };
  decoder: { decode(bytes: Uint8Array): unknown };
}

/** An upper bound of the bytes ordered-binary writes for `key`. */
function keyBound(key: (string | number)[]): number {
  let n = 0;
  for (const part of key) n += typeof part === 'string' ? 3 * part.length + 2 : 10;
  return n;
}

/**
 * The index key of a table's record key `k`, with -0 written as 0: ordered-binary puts -0 above
 * every positive number and reads it back as garbage, and a client may send -0 (JSON allows it,
 * and it passes `minimum: 0`).
 */
function indexKey(table: string, k: IndexKey): IndexKey {
  const key: IndexKey = [table];
  for (const part of k) key.push(part === 0 ? 0 : part);
  return key;
}

/**
 * Encoded bytes of records a cached table keeps decoded. About 3,000 orders or 7,000 users; the
 * decoded objects take a few times their encoded size, so a table holds a few MB at most.
 */
export const RECORD_CACHE_BYTES = 1024 * 1024;

/** Ids a `missesKept` table remembers as missing, newest kept. */
const MISSES_KEPT = 10_000;

export class Table<T> {
  // Recently read records, decoded and frozen, in insertion order (oldest evicted first). Only
  // this process writes its LMDB file (one node per DATA_DIR, static partitions), and every write
  // goes through Store.commit, which marks the id as changing until the commit is visible and
  // drops the entry then, so an entry is never older than what LMDB lets readers see.
  private readonly cache = new BoundedMap<string, T>(RECORD_CACHE_BYTES);
  // Ids with a commit under way, with how many. Between a commit becoming visible and its
  // promise's continuation, a cached entry could be older than the index beside it (a list
  // filtered by status would show a row with the old status), so these are read from LMDB.
  private readonly changing = new Map<string, number>();
  // Ids read and found missing since the last write to them began (missesKept tables only).
  private readonly missing = new BoundedMap<string, true>(MISSES_KEPT);
  // Writes begun or settled, and writes under way, in every table (cached or not).
  private stamp = 0;
  private pending = 0;

  constructor(
    readonly spec: TableSpec<T>,
    readonly db: Database<T, string>,
    private readonly meter: ReadMeter = NO_METER,
  ) {}

  /**
   * The committed record, or undefined. A record from a cached table is frozen (deeply) and may
   * be shared by every reader: derive a new object, never change it.
   */
  get(id: string): T | undefined {
    if (!this.spec.cached) {
      if (!this.spec.missesKept) return this.read(id);
      if (this.missing.get(id)) return undefined;
      const found = this.read(id);
      // Not while a write to it is under way: it may land, and nothing would forget this then.
      if (found === undefined && !this.changing.has(id)) this.missing.set(id, true);
      return found;
    }
    // Size first: with no write under way (most reads) the id is looked up once, not twice.
    if (this.changing.size !== 0 && this.changing.has(id)) return deepFreeze(this.db.get(id));
    const hit = this.cache.get(id);
    if (hit !== undefined) return hit;
    this.meter.read();
    const record = this.db.get(id);
    if (record === undefined) return undefined;
    // lmdb-js leaves the size of the value it just read in `lastSize`.
    const bytes = (this.db as unknown as { lastSize: number }).lastSize;
    deepFreeze(record);
    if (bytes <= RECORD_CACHE_BYTES / 16) this.cache.set(id, record, bytes);
    return record;
  }

  /** The stored record, decoded by the table's codec when it has one (not cached tables only). */
  private read(id: string): T | undefined {
    this.meter.read();
    const codec = this.spec.codec;
    if (!codec) return this.db.get(id);
    const bytes = this.db.getBinary(id);
    return bytes === undefined ? undefined : this.decode(bytes, id);
  }

  /**
   * The bytes a write of `record` stores. Encoded once, they can also travel inside another
   * record (Write.encoded): an Idempotency-Key keeps the record its request wrote this way.
   */
  encode(record: T): Uint8Array {
    const codec = this.spec.codec;
    return codec ? codec.encode(record, this.pack) : this.pack(record);
  }

  /**
   * The record these bytes hold (a new, unfrozen object): bytes `encode` wrote, or msgpackr's. `id`
   * is the record's key, which a codec need not store.
   */
  decode(bytes: Uint8Array, id = ''): T {
    const codec = this.spec.codec;
    if (codec && bytes[0] === RECORD_MARK) return codec.decode(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length), id, this.unpack);
    return this.unpack(bytes) as T;
  }

  private readonly pack = (value: unknown): Uint8Array => (this.db as unknown as Encoding).encoder.encode(value);
  private readonly unpack = (bytes: Uint8Array): unknown => (this.db as unknown as Encoding).decoder.decode(bytes);

  /** Encoded bytes of the records this table keeps decoded (at most RECORD_CACHE_BYTES). */
  get cacheBytes(): number {
    return this.cache.weight;
  }

  /**
   * A number that changes whenever a write to this table begins or settles, or undefined while
   * one is under way. Two equal stamps mean the table, as readers see it, did not change in
   * between: a fact derived from it at the first (say, that a scan found nothing) still holds.
   */
  get quietStamp(): number | undefined {
    return this.pending === 0 ? this.stamp : undefined;
  }

  /** Marks a record as changing: forgotten, and until `settled` read from LMDB and not kept. */
  changeStarted(id: string): void {
    this.stamp++;
    this.pending++;
    if (!this.spec.cached && !this.spec.missesKept) return;
    this.cache.delete(id);
    this.missing.delete(id);
    this.changing.set(id, (this.changing.get(id) ?? 0) + 1);
  }

  /** The change begun by `changeStarted` is visible to reads, or will never be. */
  changeSettled(id: string): void {
    this.stamp++;
    this.pending--;
    if (!this.spec.cached && !this.spec.missesKept) return;
    const n = this.changing.get(id);
    if (n === undefined) return;
    if (n > 1) this.changing.set(id, n - 1);
    else this.changing.delete(id);
  }
}


export interface StoreOptions {
  /**
   * Called once, when the storage can no longer be trusted (Store.appliedAnyway, LMDB's panic): the node must
   * stop taking requests and exit, for its supervisor to start it again on the data. By default
   * the failure is written to stderr and the process exits 1.
   */
  onFatal?: (err: unknown) => void;
  /** How long commits may be in flight with none settling before LMDB is probed (STALL_PROBE_MS). */
  stallProbeMs?: number;
  /** Most bytes of the file's pages kept mapped in the process (storage/mapped-pages.ts); 0 or unset: no limit. */
  mappedBudgetBytes?: number;
  /** Where a problem that changes nothing served is told (the mapped budget cannot be kept); by default stderr. */
  report?: (problem: string, err?: unknown) => void;
  /**
   * Bytes of room kept for the service's own commits (STORAGE_RESERVE_MB, storage/room.ts):
   * clients' commits that could take the file's room under it are refused with a 503. Unset: no
   * guard (tests of the store itself).
   */
  reserveBytes?: number;
  /** How the room is measured (storage/room.ts measureRoom); tests inject it. */
  measureRoom?: () => number;
}

/** What a commit refused for want of room answers (Store.commit). */
const NO_ROOM_RETRY_AFTER_S = 30;

/**
 * Commits in flight with none settling for this long: LMDB is probed with a read of a fresh
 * snapshot (Store.tick). A failed write of the meta page that marks a commit synced
 * leaves LMDB refusing every transaction while lmdb-js settles no commit at all; only a read
 * tells. A disk that is merely slow answers the read, and nothing happens.
 */
const STALL_PROBE_MS = 2000;

export class Store {
  private readonly tables = new Map<string, Table<unknown>>();
  private readonly index: Database<number, Key>;
  /** The value every index key holds, encoded once. */
  private readonly present: Binary;
  private closed = false;
  private failedFatally = false;
  /**
   * Commits committed and waiting for their flush, in the order they were committed, each with
   * that place (`queuedSeq`) and when it began to wait (releaseFlushed, nudge).
   */
  private readonly flushWaiters = new Map<() => void, { seq: number; since: number }>();
  /** Commits queued, counted: with `asyncTransactionOrder: 'strict'` they commit, and flush, in this order. */
  private queuedSeq = 0;
  /** A commit of the store's own is under way to release commits whose flush is lost (Store.nudge). */
  private nudging = false;
  /** The highest commit known on disk, and whether the waiters before it are to be gone over (releaseFlushed). */
  private releaseUpTo = 0;
  private releaseQueued = false;
  /**
   * LMDB was probed after a flush in this turn of the event loop (afterFlush): the commits of one
   * flush are answered in one turn (lmdb-js's `flushed` is one object for every batch).
   */
  private probedThisTurn = false;
  /** When the store's own commit last failed (nudge): the next waits a while after one. */
  private nudgeFailedAt = -Infinity;
  /** When the store's own commit under way began: its own flush can be lost too (tick). */
  private nudgeStartedAt = 0;
  /** Where the store notes its opening (syncOpened) and its own commits (nudge). */
  private readonly opened: Table<{ id: string; at: number }>;
  /** Commits not yet settled, and when one last began from none or settled (STALL_PROBE_MS). */
  private inFlight = 0;
  private progressAt = 0;
  private readonly stallProbe: NodeJS.Timeout;
  /**
   * Settles once the file is on disk as this process found it (syncOpened). A node serves only
   * after it.
   */
  readonly ready: Promise<void>;

  private constructor(
    private readonly root: RootDatabase,
    private readonly onFatal: (err: unknown) => void,
    private readonly stallProbeMs: number,
    /** Keeps the file's pages mapped within STORAGE_MAPPED_MB, when there is a budget. */
    readonly mapped: MappedPages | undefined,
    /** Keeps clients' commits from taking the file's last room (STORAGE_RESERVE_MB), when there is a reserve. */
    private readonly room: Room | undefined,
    /** Where a problem that changes nothing served is told (StoreOptions.report). */
    private readonly report: (problem: string, err?: unknown) => void,
  ) {
    this.index = root.openDB<number, Key>({ name: 'index' });
    this.present = asBinary(Buffer.from((this.index as unknown as Encoding).encoder.encode(1)));
    this.opened = this.table<{ id: string; at: number }>({ name: 'opened', indexKeys: () => [] });
    this.ready = this.syncOpened();
    // Awaited by whoever serves from the store; a rejection no one awaits is reported by onFatal.
    this.ready.catch(ignore);
    this.stallProbe = setInterval(() => this.tick(), Math.min(1000, stallProbeMs / 2)).unref();
  }

  private tick(): void {
    const now = performance.now();
    const stalled = now - this.progressAt >= this.stallProbeMs;
    if (this.inFlight > 0 && stalled) this.probe();
    // Only once nothing else has settled for as long (a later commit's flush releases them too),
    // and not again soon after one failed: the store's own commit shares a transaction with
    // whatever else is written in its turn, and while the disk has no room it fails them with it.
    if (this.nudging && now - this.nudgeStartedAt >= 5 * this.stallProbeMs) this.nudging = false;
    const oldest = this.flushWaiters.values().next().value;
    const due = stalled && now - this.nudgeFailedAt >= 5 * this.stallProbeMs;
    if (oldest !== undefined && now - oldest.since >= this.stallProbeMs && due && !this.nudging && !this.closed) this.nudge();
  }

  /**
   * A commit waits for its flush, or for a later one (Store.commit). lmdb-js calls the resolvers
   * of the flushes pending when a batch is written only if it succeeds (write.js, startWriting),
   * so after a failed commit a later one that succeeded could wait for its flush for good, holding
   * its keys (seen under a full disk: a create that never answered, and its order's writes 503
   * from then on). A later flush puts it on disk as well (fdatasync writes the whole file, and
   * LMDB marks the newer commit synced): every commit's flush releases the commits before it
   * (releaseFlushed), and one that waited past STALL_PROBE_MS with nothing else settling is
   * released by the store's own (nudge). Here: the commit counted `seq` is on disk, so every one
   * before it is too.
   */
  private releaseFlushed(seq: number): void {
    if (seq > this.releaseUpTo) this.releaseUpTo = seq;
    if (this.releaseQueued) return;
    // Once per turn, not once per commit: a flush settles every commit of its batch, each of which
    // would go over every waiter (64 concurrent creates: 6.6% of the process's CPU, `--cpu-prof`).
    // Each commit's own flush resolves it directly; this is for the ones a failure left behind.
    this.releaseQueued = true;
    setImmediate(() => {
      this.releaseQueued = false;
      // A failure found since this flush was checked (afterFlush) acknowledges nothing more.
      if (this.failedFatally) return;
      const upTo = this.releaseUpTo;
      for (const [done, waiting] of this.flushWaiters) if (waiting.seq <= upTo) done();
    });
  }

  /** One small commit, flushed: every commit waiting before it is then on disk too. Retried by the next tick while it fails (no room). */
  private nudge(): void {
    this.nudging = true;
    this.nudgeStartedAt = performance.now();
    const waiting = [...this.flushWaiters.keys()];
    const record = { id: 'flushed', at: Date.now() };
    const bytes = this.opened.encode(record);
    const list: Op[] = [{ db: this.opened.db as unknown as Database<unknown, Key>, key: record.id, value: asBinary(bytes), bytes, changes: true }];
    const committed = this.queue(list);
    const flushed = this.root.flushed.then(() => this.afterFlush());
    committed.then(
      () =>
        flushed.then(
          () => {
            this.nudging = false;
            for (const done of waiting) done();
          },
          () => (this.nudging = false),
        ),
      (err: unknown) => {
        flushed.catch(ignore);
        this.nudging = false;
        this.nudgeFailedAt = performance.now();
        this.commitFailed(err, list);
      },
    );
  }

  /**
   * After a flush, before any write of it is acknowledged: LMDB answers a commit whose write of
   * the meta page that marks it synced failed as a success, and refuses every transaction from
   * then on. One read of a fresh snapshot per turn tells.
   */
  private afterFlush(): void {
    if (!this.probedThisTurn) {
      this.probedThisTurn = true;
      setImmediate(() => (this.probedThisTurn = false));
      this.probe();
    }
    if (this.failedFatally) throw new Error('The storage failed and cannot be trusted: this write is not known to be on disk.');
  }

  /** A read of a fresh snapshot: LMDB refuses it once it has had a fatal error (failedWith). */
  private probe(): void {
    try {
      this.freshSnapshot();
      this.root.getBinary('opened');
    } catch (err) {
      this.failedWith(err);
    }
  }

  /** lmdb-js renews its read snapshot after a commit it resolves, not after one it rejects or never settles. */
  private freshSnapshot(): void {
    (this.root as unknown as { resetReadTxn(): void }).resetReadTxn();
  }

  /**
   * One small commit as the file is opened: its fdatasync also writes out whatever an earlier
   * process made visible without syncing (one that stopped on a failed sync, Store.appliedAnyway),
   * so nothing this node answers from the file can be lost to a power cut afterwards. A disk
   * without room leaves the file as it is, and the node serves what it holds.
   */
  private async syncOpened(): Promise<void> {
    const opened = this.opened;
    try {
      await this.commit([{ table: opened, id: 'last', before: opened.get('last'), after: { id: 'last', at: Date.now() } }], { tier: 'store' });
    } catch (err) {
      // A fatal failure has been reported (and ends the node); want of room is served through.
      if (this.failedFatally) throw err;
      this.report('the data file could not be synced as it was opened; what an earlier process left unsynced is synced by the next commit', err);
    }
  }

  /** Opens (or creates) the node's state file inside `dir`. */
  static open(dir: string, opts: StoreOptions = {}): Store {
    mkdirSync(dir, { recursive: true });
    // asyncTransactionOrder and noReadAhead are lmdb-js options its typings leave out (open.js
    // reads both).
    const file = join(dir, 'state.mdb');
    const options: RootDatabaseOptionsWithPath & { asyncTransactionOrder: 'strict'; noReadAhead: boolean } = {
      path: file,
      // Records share msgpack structures so repeated member names cost nothing on disk.
      sharedStructuresKey: Symbol.for('structures'),
      maxDbs: 32,
      // One fixed map the size of the largest database we allow. Without it lmdb-js grows the
      // map by mapping the file again, and every mapping counts the same pages in RSS once more.
      // Address space is cheap on 64-bit; the file itself grows only as data is written.
      mapSize: MAP_SIZE,
      // A child transaction (Store.nested) runs where it was queued among the puts queued as
      // blocks, so two commits land in the order they were made. Without it lmdb-js runs the
      // callback after the instructions queued behind it.
      asyncTransactionOrder: 'strict',
      // MDB_NORDAHEAD: a read that faults a page in from disk brings that page, not the kernel's
      // readahead window around it. Reads here are by key, so the neighbours are other records'
      // and other tables' pages; under a memory limit they push out the pages still wanted.
      // Restarted cold in a 300 MB memory cgroup holding 1M orders, 20k random GETs took 3.9 s
      // with it and had not finished after 120 s without it (bench/memory-startup.ts). With
      // memory to spare (a hot page cache) it changes nothing.
      noReadAhead: true,
      // Durability is required: never noSync. overlappingSync (the default on Linux) lets the
      // next transaction start while the previous one flushes; we await `flushed` before acking.
    };
    const root = open(options);
    letOrphanedCommitFailuresGo();
    const report = opts.report ?? ((problem: string, err?: unknown) => console.error(problem, err ?? ''));
    // Linux only: /proc and madvise (README, Limits and overload).
    const mapped = opts.mappedBudgetBytes && process.platform === 'linux' ? new MappedPages({ file, budgetBytes: opts.mappedBudgetBytes, report }) : undefined;
    const room = opts.reserveBytes === undefined ? undefined : new Room({ file, reserveBytes: opts.reserveBytes, measure: opts.measureRoom, report });
    return new Store(root, opts.onFatal ?? exitOnFatal, opts.stallProbeMs ?? STALL_PROBE_MS, mapped, room, report);
  }

  /**
   * An error an LMDB call threw, seen by whoever answers for it: one that says the environment is
   * unusable (MDB_PANIC) ends the node.
   */
  failedWith(err: unknown): void {
    if (isPanic(err)) this.fatal(err);
  }

  /**
   * Whether a commit lmdb-js failed left storage that cannot be trusted, as the error to stop on.
   * A commit whose pages did not reach the file (no room: the short or refused write a full disk
   * or a file-size limit makes, which LMDB reports as EIO; or a page that could not be written)
   * changed nothing, and a later commit that fits succeeds. But a failed fdatasync comes after the
   * transaction was made visible: it is then read, and answered from (a keyed retry would replay
   * it), without being on disk, and Linux may drop the pages it could not write, so a later fsync
   * that succeeds proves nothing about them. And a failed write of the meta page leaves LMDB
   * refusing every transaction (MDB_PANIC), reads too, with commits that never settle. So the
   * commit's last record is read back from a fresh snapshot (the newest state; a read transaction
   * takes no lock a commit holds): found as the commit would have left it, or refused, the storage
   * cannot be trusted.
   */
  private appliedAnyway(list: Op[]): Error | undefined {
    // The last record written: found as it would be, the commit was applied. A remove of what
    // was not there would be found so either way.
    const last = list.findLast((op) => op.changes === true);
    if (last === undefined) return undefined;
    try {
      this.freshSnapshot();
      const stored = last.db.getBinary(last.key);
      const applied = last.bytes === undefined ? stored === undefined : stored !== undefined && Buffer.compare(stored, last.bytes) === 0;
      return applied ? new Error('A commit failed after it was applied: its transaction is visible but not known to be on disk.') : undefined;
    } catch (err) {
      // LMDB's panic; anything else (a key it refuses to look up) tells nothing about the commit.
      return isPanic(err) ? Object.assign(new Error('LMDB refuses transactions after a failed commit.'), { cause: err }) : undefined;
    }
  }

  private fatal(err: unknown): void {
    if (this.failedFatally) return;
    this.failedFatally = true;
    this.onFatal(err);
  }

  /** The table opened under `name`, if one was. */
  tableNamed(name: string): Table<unknown> | undefined {
    return this.tables.get(name);
  }

  table<T>(spec: TableSpec<T>): Table<T> {
    const existing = this.tables.get(spec.name);
    if (existing) return existing as Table<T>;
    const db = this.root.openDB<T, string>({ name: spec.name, sharedStructuresKey: Symbol.for('structures') });
    const table = new Table(spec, db, this.mapped ?? NO_METER);
    this.tables.set(spec.name, table as Table<unknown>);
    return table;
  }

  /**
   * Whether a commit of about `cost` bytes in `tier` would be admitted now (storage/room.ts):
   * for work that would be wasted if its commit were refused (a webhook sent before its outcome
   * is stored). Always true without a reserve.
   */
  hasRoom(tier: RoomTier, cost: number): boolean {
    return this.room?.has(cost, tier) ?? true;
  }

  /**
   * Holds about `cost` bytes in `tier` for commits still to come (webhook sends whose outcomes
   * must be stored), if there is room: the function returned gives it back. Undefined if there is
   * not; without a reserve, always held.
   */
  holdRoom(tier: RoomTier, cost: number): (() => void) | undefined {
    return this.room ? this.room.hold(cost, tier) : ignore;
  }

  /**
   * Commits the writes in one transaction and resolves once it is on disk. lmdb-js joins the
   * writes queued in one event-loop turn into one LMDB commit and one fsync (group commit), on
   * its write thread, so reads keep being served while the disk syncs. With a reserve, a commit
   * that could take the file's room under its `tier`'s share of it (a client's by default) is
   * refused before anything is queued, with a 503 (storage/room.ts).
   */
  async commit(writes: Write<unknown>[], how: { tier?: RoomTier } = {}): Promise<void> {
    if (this.closed) throw new Error('store is closed');
    // Every key and value is worked out before the first is queued, so nothing this process
    // computes can fail between two of a commit's puts.
    const { list, keysFit } = this.plan(writes);
    const cost = this.room ? commitCost(list) : 0;
    if (this.room && !this.room.admit(cost, how.tier ?? 'client')) {
      throw new ApiError('unavailable', 'The service is short of storage: this write was not made. Retry later.', { headers: { 'retry-after': String(NO_ROOM_RETRY_AFTER_S) } });
    }
    try {
      await this.commitPlanned(writes, list, keysFit);
    } finally {
      this.room?.settled(cost);
    }
  }

  private async commitPlanned(writes: Write<unknown>[], list: Op[], keysFit: boolean): Promise<void> {
    if (this.inFlight++ === 0) this.progressAt = performance.now();
    for (const w of writes) w.table.changeStarted(w.id);
    let release: (() => void) | undefined;
    try {
      let committed: Promise<unknown>;
      let flushed: Promise<void>;
      let seq = 0;
      try {
        committed = keysFit ? this.queue(list) : this.nested(list);
        // Counted as queued, not as resolved: a nested commit resolves a step later than a block
        // queued after it, in a later transaction.
        seq = ++this.queuedSeq;
        // lmdb-js resolves a commit before its fsync (overlappingSync). `flushed` names the batch
        // pending when `then` is called: call it now, while that is ours. Awaited after the commit
        // it would name whatever batch came next, and every write would wait one more fsync.
        // Resolved by that flush, or by a later one (releaseFlushed).
        flushed = new Promise<void>((resolve, reject) => {
          release = resolve;
          this.root.flushed.then(() => {
            try {
              this.afterFlush();
            } catch (err) {
              reject(err);
              return;
            }
            this.releaseFlushed(seq);
            resolve();
          }, reject);
        });
        await committed.catch((err: unknown) => {
          // A failed commit rejects `flushed` too (when it settles at all). Nothing else waits on it.
          flushed.catch(ignore);
          this.commitFailed(err, list);
          throw err;
        });
      } finally {
        // Visible to every read from here on (lmdb-js renews its read snapshot before it resolves
        // a commit), or rolled back.
        for (const w of writes) w.table.changeSettled(w.id);
      }
      this.flushWaiters.set(release!, { seq, since: performance.now() });
      await flushed;
    } finally {
      if (release) this.flushWaiters.delete(release);
      this.inFlight--;
      this.progressAt = performance.now();
    }
  }

  /**
   * What a failed commit leaves to do before it is answered. lmdb-js rejects one more promise of
   * its own with the cause (`commitError`); left unhandled, Node would end the process for it.
   */
  private commitFailed(err: unknown, list: Op[]): void {
    const cause = (err as { commitError?: Promise<unknown> } | undefined)?.commitError;
    if (cause) {
      failedCauses.add(cause);
      cause.catch(ignore);
      // Checked before this failure is answered, and before any later commit is.
      const untrusted = this.appliedAnyway(list);
      if (untrusted) this.fatal(Object.assign(untrusted, { cause: err }));
    }
    if (typeof err === 'object' && err !== null) answeredFailures.add(err);
    this.forgetUnsavedShapes();
  }

  /**
   * msgpackr stores a new record shape (the member names it then writes as a number) through
   * lmdb-js, inside the write transaction open at that moment or one of its own, and from then
   * on believes it stored. Should that transaction fail, the shape is gone from LMDB. Marked
   * uninitialized, each encoder reloads the stored shapes before its next record, as msgpackr
   * does when a save of its own fails.
   */
  private forgetUnsavedShapes(): void {
    for (const table of this.tables.values()) {
      const structures = (table.db as unknown as { encoder?: { structures?: { uninitialized?: boolean } } }).encoder?.structures;
      if (structures) structures.uninitialized = true;
    }
  }

  /**
   * The common case: the puts go to lmdb-js's write thread as one block of instructions, which
   * it applies inside one transaction (it commits only between blocks, or when a synchronous
   * transaction interrupts it, and none is started while a block is being queued), with no call
   * back into this thread. A put LMDB refuses there fails the whole transaction, every commit in
   * it included, and lmdb-js rejects each of their promises: all or nothing still holds.
   */
  private queue(list: Op[]): Promise<unknown> {
    return this.root.batch(() => {
      for (const op of list) {
        if (op.value === undefined) void op.db.remove(op.key);
        else void op.db.put(op.key, op.value);
      }
    });
  }

  /**
   * A key that may be over LMDB's limit: lmdb-js refuses it while queueing, after the puts before
   * it were queued. A child transaction of lmdb-js's batch rolls those back. It runs where it was
   * queued among the blocks (`asyncTransactionOrder: 'strict'`, Store.open).
   */
  private nested(list: Op[]): Promise<unknown> {
    return this.root.childTransaction(() => {
      for (const op of list) {
        if (op.value === undefined) op.db.removeSync(op.key);
        else op.db.putSync(op.key, op.value);
      }
    });
  }

  /**
   * The puts and removes of `writes`, in order, with their values encoded, and whether every key
   * is surely short enough. Whatever can throw (an index function, an encoder) throws here,
   * before the first put is queued: a block cut short by a throw would still be committed.
   */
  private plan(writes: Write<unknown>[]): { list: Op[]; keysFit: boolean } {
    const list: Op[] = [];
    let keysFit = true;
    for (const { table, id, before, after, encoded } of writes) {
      const oldKeys = before === undefined ? [] : table.spec.indexKeys(before);
      const newKeys = after === undefined ? [] : table.spec.indexKeys(after);
      const name = table.spec.name;
      for (const k of oldKeys) {
        if (includesKey(newKeys, k)) continue;
        const key = indexKey(name, k);
        keysFit &&= keyBound(key) <= KEY_BYTES_SURE;
        list.push({ db: this.index, key, value: undefined });
      }
      for (const k of newKeys) {
        if (includesKey(oldKeys, k)) continue;
        const key = indexKey(name, k);
        keysFit &&= keyBound(key) <= KEY_BYTES_SURE;
        list.push({ db: this.index, key, value: this.present });
      }
      keysFit &&= keyBound([id]) <= KEY_BYTES_SURE;
      const db = table.db as unknown as Database<unknown, Key>;
      const bytes = after === undefined ? undefined : (encoded ?? table.encode(after));
      list.push({ db, key: id, value: bytes === undefined ? undefined : asBinary(bytes), bytes, changes: before !== undefined || after !== undefined });
    }
    return { list, keysFit };
  }

  /** Ids in index order after the keyset position, at most `limit`, with their sort values. */
  scan(table: Table<unknown>, q: RangeQuery): { v: number | string; id: string }[] {
    // Built as the keys were written (indexKey: -0 as 0), so a position on -0 is found.
    const prefix = indexKey(table.spec.name, q.prefix);
    const width = prefix.length;
    const edge = q.after ? indexKey(table.spec.name, [...q.prefix, ...q.after]) : undefined;
    const range = q.reverse
      ? { start: edge ?? [...prefix, HIGH], end: prefix, reverse: true }
      : { start: edge ?? prefix, end: [...prefix, HIGH] };
    const out: { v: number | string; id: string }[] = [];
    this.mapped?.read();
    for (const key of this.index.getKeys(range)) {
      const k = key as (string | number)[];
      const v = k[width];
      const id = k[k.length - 1];
      if (v === undefined || typeof id !== 'string') continue;
      // getRange's start is inclusive; the keyset position itself was already served.
      if (q.after && v === q.after[0] && id === q.after[1]) continue;
      out.push({ v, id });
      if (out.length >= q.limit) break;
    }
    return out;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.stallProbe);
    this.mapped?.stop();
    await this.root.flushed;
    await this.root.close();
  }
}

function ignore(): void {}

const MDB_PANIC = -30795;

/** LMDB's "the environment had a fatal error": every transaction from then on is refused. */
function isPanic(err: unknown): boolean {
  return err instanceof Error && ((err as { code?: unknown }).code === MDB_PANIC || err.message.includes('MDB_PANIC'));
}

function exitOnFatal(err: unknown): void {
  exitNow(1, `storage failed and cannot be trusted: exiting, to be started again on the data: ${inspect(err)}`);
}

/** The causes (`commitError`) of the commits Store.commit saw fail, and the errors it answered them with. */
const failedCauses = new WeakSet<object>();
const answeredFailures = new WeakSet<object>();
let orphansLetGo = false;

/**
 * lmdb-js 3.5 opens each event turn's batch with a write of its own whose promise it keeps
 * nowhere (write.js, `writeBatchStart` of the event-turn batch). When that transaction's commit
 * fails (a full disk, an I/O error), lmdb-js rejects that promise with the rest, and Node ends the
 * process for a rejection no one handled. Every write of this module is answered through its
 * own promise (Store.commit), so that orphan tells nothing new: a rejection carrying the cause of
 * a failure Store.commit answered, and not the error it answered with, is let go. Any other
 * unhandled rejection still ends the process, as Node's default does, unless another listener
 * (a test runner's) takes it.
 */
function letOrphanedCommitFailuresGo(): void {
  if (orphansLetGo) return;
  orphansLetGo = true;
  const listener = (reason: unknown): void => {
    if (isOrphanedCommitFailure(reason)) return;
    if (process.listenerCount('unhandledRejection') > 1) return;
    throw reason instanceof Error ? reason : Object.assign(new Error(`A promise was rejected with no handler, with ${inspect(reason)}.`), { code: 'ERR_UNHANDLED_REJECTION' });
  };
  process.on('unhandledRejection', listener);
}

function isOrphanedCommitFailure(reason: unknown): boolean {
  if (typeof reason !== 'object' || reason === null || answeredFailures.has(reason)) return false;
  const cause = (reason as { commitError?: unknown }).commitError;
  return typeof cause === 'object' && cause !== null && failedCauses.has(cause);
}

/**
 * How much a commit may grow LMDB's file, erring high. Each put or remove copies the leaf page it
 * lands on (copy-on-write; a page freed is used again only once no reader's snapshot holds it,
 * and lmdb-js keeps one open), and may split it, so each costs two pages, plus its record's bytes (a whole page run
 * for one over half a page, which LMDB stores on overflow pages of its own) and key. Each table
 * it touches adds the copy of a path of branch pages, and the commit the free list and the meta
 * page. A thousand scattered updates of small records grew a 40k-record file by about a page
 * each, deletes by one and a half; inserts by less.
 */
export function commitCost(list: readonly { db: unknown; key: Key; bytes?: Uint8Array }[]): number {
  let bytes = 0;
  // A commit touches two or three tables.
  const dbs: unknown[] = [];
  for (const op of list) {
    if (!dbs.includes(op.db)) dbs.push(op.db);
    const n = op.bytes?.length ?? 0;
    const key = op.key;
    const keyBytes = typeof key === 'string' ? 3 * key.length + 2 : Array.isArray(key) ? keyBound(key as (string | number)[]) : 10;
    bytes += 2 * PAGE_BYTES + (n > PAGE_BYTES / 2 ? Math.ceil((n + 16) / PAGE_BYTES) * PAGE_BYTES : n) + keyBytes;
  }
  return bytes + PAGE_BYTES * (4 * dbs.length + 2);
}

/** Whether `keys` holds a key equal to `k`, element by element (a record has a handful). */
function includesKey(keys: IndexKey[], k: IndexKey): boolean {
  outer: for (const other of keys) {
    if (other.length !== k.length) continue;
    for (let i = 0; i < k.length; i++) if (other[i] !== k[i]) continue outer;
    return true;
  }
  return false;
}
