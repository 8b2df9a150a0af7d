// How much the LMDB file may still grow, and whether a commit fits in it with STORAGE_RESERVE_MB
// to spare. Writes are refused (503) before the file can meet a full disk or the process's
// file-size limit, for two reasons:
//  - LMDB meets no room as a failed page write, and lmdb-js 3.5 formats that failure's message
//    into a 100-byte heap buffer with sprintf (mdb.c, mdb_page_flush). Past about 1 GB of file, or
//    with the stale sizes of an earlier write in its message, the text is longer than that, and
//    the overrun corrupts the process's heap (seen: glibc aborting with "corrupted size vs.
//    prev_size" on the next failed write).
//  - The reserve left over is the service's own, in tiers (ROOM_TIERS): webhook deliveries may
//    take half of it, and the service's own work (a refund it accepted, the sweeps that free
//    pages) three quarters, so each still commits when clients' writes no longer may. The last
//    quarter is a margin for what the estimate misses (msgpackr's record shapes, the store's own
//    small commits).
// The figure is measured (free blocks of the file system, and RLIMIT_FSIZE less the file's size)
// at most once a second, and again whenever the writes admitted since would take it under the
// line; between two measures each admitted commit counts as its estimated growth (commitCost).
// LMDB reuses the pages deletes free without growing, so the estimate errs high.

import { readFileSync, statfsSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { performance } from 'node:perf_hooks';

/** A measure at least this often while writes come. */
const MEASURE_EVERY_MS = 1000;
/**
 * While a shortfall is found, measured again once a commit admitted has settled since (the file's
 * size then tells what it took, usually far less than its estimate), or else at most this often:
 * a write refused while nothing changes costs no syscall.
 */
const REMEASURE_AFTER_MS = 100;

/** LMDB's page size on Linux x86-64 and arm64 (lmdb-js opens with the OS page size). */
export const PAGE_BYTES = 4096;

/**
 * Whose commit it is, and so how much of the reserve it may take: the share of the reserve that
 * must be left after it. Webhook deliveries grow with the endpoints clients register (a tenant
 * may hold 1000), so they stop before the service's own work does. `store` is the store's own
 * commit of a few pages as it opens, which makes what an earlier process left durable.
 */
export const ROOM_TIERS = { client: 1, webhooks: 1 / 2, service: 1 / 4, store: 0 } as const;
export type RoomTier = keyof typeof ROOM_TIERS;

/** A shortage is told at most this often, with the writes refused since. */
const SHORT_REPORT_EVERY_MS = 60_000;

export interface RoomOptions {
  /** The LMDB file. */
  file: string;
  /** Bytes kept free for the service's own commits: clients' writes are refused below it. */
  reserveBytes: number;
  /** Bytes the file may still grow by now; by default measured (measureRoom). Tests inject it. */
  measure?: () => number;
  /** Told when clients' writes begin to be refused (again at most once a minute while they are), and when the room is back. */
  report?: (problem: string, err?: unknown) => void;
}

export class Room {
  private readonly reserve: number;
  private readonly measure: () => number;
  private readonly report: (problem: string, err?: unknown) => void;
  /** What the last measure found. */
  private room = Infinity;
  /** Estimated growth admitted since that measure. */
  private spent = 0;
  /** Estimated growth admitted and not yet settled: not in the file's size when measured. */
  private pending = 0;
  /** A commit settled since the last measure. */
  private settledSince = false;
  /**
   * Room held for commits still to come (hold): webhook sends under way, whose outcomes must be
   * stored. Commits of other tiers and other holds leave it free; webhook commits, the ones it is
   * held for, may use it.
   */
  private held = 0;
  private measuredAt = -Infinity;
  /** Clients' writes are being refused: told once, and again once the room is back past the reserve and a quarter. */
  private short = false;
  private shortReportedAt = -Infinity;
  private refusedSinceReport = 0;

  constructor(opts: RoomOptions) {
    this.reserve = opts.reserveBytes;
    const limit = fileSizeLimit();
    this.measure = opts.measure ?? (() => measureRoom(opts.file, limit));
    this.report = opts.report ?? ((problem, err) => console.error(problem, err ?? ''));
  }

  /**
   * Whether a commit that may grow the file by `cost` bytes goes ahead: while the share of the
   * reserve its tier must leave stays whole. Admitted, its cost counts until `settled`.
   */
  admit(cost: number, tier: RoomTier): boolean {
    const now = performance.now();
    const left = this.left(cost, tier, now, tier !== 'webhooks');
    if (left < 0) {
      if (tier === 'client') this.refused(now);
      return false;
    }
    if (tier === 'client' && this.short && left >= this.reserve / 4) {
      this.short = false;
      this.report(`storage has room again: ${mb(this.room - this.spent)} MB left for the data file; writes are taken`);
    }
    this.spent += cost;
    this.pending += cost;
    return true;
  }

  /** Whether a commit of `cost` in `tier` would be admitted now, past the room held; nothing is counted. */
  has(cost: number, tier: RoomTier): boolean {
    return this.left(cost, tier, performance.now(), true) >= 0;
  }

  /**
   * Holds `cost` bytes in `tier` for commits still to come, if there is room past what is held
   * already: undefined if not. The function returned gives it back (once).
   */
  hold(cost: number, tier: RoomTier): (() => void) | undefined {
    if (!this.has(cost, tier)) return undefined;
    this.held += cost;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.held -= cost;
    };
  }

  /** What would be left over the tier's floor after `cost` (and what is held, if `countHeld`), measured again first if due. */
  private left(cost: number, tier: RoomTier, now: number, countHeld: boolean): number {
    const floor = this.reserve * ROOM_TIERS[tier];
    const taken = (countHeld ? this.held : 0) + cost + floor;
    const stale = now - this.measuredAt >= MEASURE_EVERY_MS;
    if (stale || (this.room - this.spent < taken && (this.settledSince || now - this.measuredAt >= REMEASURE_AFTER_MS))) this.measureNow(now);
    // A measure resets `spent`: read after it.
    return this.room - this.spent - taken;
  }

  private refused(now: number): void {
    this.refusedSinceReport++;
    if (this.short && now - this.shortReportedAt < SHORT_REPORT_EVERY_MS) return;
    this.short = true;
    this.shortReportedAt = now;
    this.report(
      `storage is short of room: ${mb(Math.max(0, this.room - this.spent))} MB left for the data file, under the reserve of ${mb(this.reserve)} MB (STORAGE_RESERVE_MB); clients' writes are answered 503 until there is room (${this.refusedSinceReport} refused)`,
    );
    this.refusedSinceReport = 0;
  }

  /** A commit admitted with `cost` is done, applied or not: from the next measure on, the file's size tells. */
  settled(cost: number): void {
    this.pending -= cost;
    this.settledSince = true;
  }

  private measureNow(now: number): void {
    this.measuredAt = now;
    this.settledSince = false;
    try {
      this.room = this.measure();
    } catch (err) {
      // Nothing to go by (the file system does not say): the writes go ahead, as without a guard.
      this.room = Infinity;
      this.report('storage room could not be measured; writes are not held back', err);
    }
    this.spent = this.pending;
  }
}

/** Bytes `file` may still grow by: the file system's free blocks, and the file-size limit less its size. */
export function measureRoom(file: string, sizeLimit: number): number {
  const fs = statfsSync(dirname(file));
  const free = fs.bavail * fs.bsize;
  return sizeLimit === Infinity ? free : Math.min(free, sizeLimit - statSync(file).size);
}

/**
 * The process's file-size limit (RLIMIT_FSIZE, the soft one) in bytes, from /proc/self/limits;
 * Infinity when unlimited or where there is no /proc. A write past it fails as a full disk would.
 */
export function fileSizeLimit(limits = readLimits()): number {
  const m = /^Max file size\s+(\S+)/m.exec(limits);
  if (!m || m[1] === 'unlimited') return Infinity;
  const n = Number(m[1]);
  return Number.isFinite(n) && n >= 0 ? n : Infinity;
}

function readLimits(): string {
  try {
    return readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return '';
  }
}

function mb(bytes: number): string {
  return (bytes / 1048576).toFixed(1);
}
