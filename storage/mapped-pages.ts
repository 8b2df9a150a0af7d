// LMDB reads its file through one shared, read-only mapping (Store.open maps MAP_SIZE once). A
// page a read touches stays mapped until the mapping goes, and the kernel maps the pages around
// it too (fault-around, whole page-cache folios, which MDB_NORDAHEAD's MADV_RANDOM does not stop):
// after random reads of a large file, most of the file is mapped and counted in the process's
// RSS, though it is page cache, shared, which the kernel may take back at any time. An operator
// who watches RSS (ps, top, a process exporter) sees the data file's size rather than the
// process's memory. (A memory cgroup charges the page cache whether it is mapped or not: what a
// container's limit counts does not change.)
//
// MappedPages keeps that part within a budget: when the file-backed pages resident in the process
// have grown past it, it takes the data file's pages out of the mapping (madvise MADV_DONTNEED).
// They stay in the page cache; the next read of one maps it again with a minor fault. Nothing a
// reader sees changes: the mapping is shared and read-only (no MDB_WRITEMAP), so it shows the
// file, and a touched page faults back in from it. lmdb-js copies most values out of the map; a
// value of 16 MB or more it hands back as a view into the map, which stays valid the same way.
// Where madvise cannot be called (common/libc.ts), the budget is not kept, and that is said once.
// The price is a minor fault for each page read again after a trim, with the pages the kernel
// maps around it: when reads spread evenly over a file far larger than the budget, a quarter to
// a third of the random-read rate (README, Limits and overload). STORAGE_MAPPED_MB=0 turns it off.
//
// The budget is on the process's resident file pages, which holds for the one store an actor
// process opens.

import { Buffer } from 'node:buffer';
import { closeSync, openSync, readFileSync, readSync, realpathSync, statSync } from 'node:fs';
import { isTransient, libc, libcFailure, MADV_DONTNEED } from '../common/libc.js';

/** What a table tells of each read that reaches LMDB. */
export interface ReadMeter {
  read(): void;
}

/** A meter that does nothing: a store without a budget. */
export const NO_METER: ReadMeter = { read: () => undefined };

/**
 * Reads between two looks at the resident size. A read can map a whole page-cache folio; over 1M
 * orders, 20k random GETs mapped about 17 kB each, so 64 reads map about a megabyte. A look is
 * one pread of /proc/self/statm (about 1.5 µs; under load more): looked at every 16 reads, the
 * looks took 0.8% of the CPU of 64 concurrent creates, which read several times each.
 */
const CHECK_EVERY_READS = 64;
/** Looks at the resident size this often besides (writes also map the pages they read). */
const CHECK_INTERVAL_MS = 1000;

export interface MappedPagesOptions {
  /** The LMDB data file. */
  file: string;
  /** Most bytes of file-backed pages the process may have grown since the last trim. */
  budgetBytes: number;
  /**
   * Told once when the budget cannot be kept here (no FFI, the mapping not found), and once when
   * a look is first skipped for want of descriptors or memory.
   */
  report: (problem: string, err?: unknown) => void;
}

export class MappedPages implements ReadMeter {
  /** File-backed kB resident after the last trim: the program's own files, the data file's few pages. */
  private baseKb = 0;
  private readonly budgetKb: number;
  private readonly timer: NodeJS.Timeout;
  private readonly statm: Statm | undefined;
  private reads = 0;
  private off = false;
  /** Trims made, and kB of resident file pages they took out; looks skipped (see check). */
  trims = 0;
  trimmedKb = 0;
  skipped = 0;

  constructor(private readonly opts: MappedPagesOptions) {
    this.budgetKb = Math.ceil(opts.budgetBytes / 1024);
    this.timer = setInterval(() => this.check(), CHECK_INTERVAL_MS).unref();
    try {
      this.statm = new Statm();
      this.baseKb = this.statm.fileKb();
    } catch (err) {
      this.disable('/proc/self/statm cannot be read here', err);
    }
  }

  /** Counts a read that reached LMDB; every few, looks at the resident size. */
  read(): void {
    if (++this.reads >= CHECK_EVERY_READS) {
      this.reads = 0;
      this.check();
    }
  }

  /**
   * Trims when the file pages resident have grown past the budget; whether it did. Never throws:
   * it runs inside reads, and a throw would fail the read. A look that finds no descriptor or no
   * memory left (a connection flood) is skipped, and the next one tries again; any other failure
   * turns the budget off.
   */
  check(): boolean {
    return this.guarded(() => {
      const resident = this.statm!.fileKb();
      return resident - this.baseKb > this.budgetKb && this.trimNow(resident);
    });
  }

  /** Takes the data file's pages out of the mapping now; whether it did. Never throws (see check). */
  trim(): boolean {
    return this.guarded(() => this.trimNow());
  }

  /** Stops looking; reads after it (a store closing) are not looked at. */
  stop(): void {
    this.off = true;
    clearInterval(this.timer);
    this.statm?.close();
  }

  private guarded(look: () => boolean): boolean {
    if (this.off || !this.statm) return false;
    try {
      return look();
    } catch (err) {
      if (!isTransient(err)) return this.disable('it failed', err);
      if (this.skipped++ === 0) this.opts.report('RSS of the mapped data file was not looked at: no descriptor or memory left (tried again at the next look)', err);
      return false;
    }
  }

  /** `before`: the file-backed kB resident now, when the caller has just read it. */
  private trimNow(before = this.statm!.fileKb()): boolean {
    const statm = this.statm!;
    const calls = libc();
    if (!calls) return libcFailure() === undefined ? false : this.disable('madvise cannot be called here', libcFailure());
    const ranges = mappedRanges(this.opts.file);
    if (ranges.length === 0) return this.disable('the data file is not mapped into this process');
    for (const { start, length } of ranges) {
      if (calls.madvise(start, length, MADV_DONTNEED) !== 0) return this.disable(`madvise failed (errno ${calls.errno()})`);
    }
    const after = statm.fileKb();
    this.trims++;
    this.trimmedKb += Math.max(0, before - after);
    this.baseKb = after;
    return true;
  }

  private disable(why: string, err?: unknown): false {
    if (this.off) return false;
    this.stop();
    this.opts.report(`RSS of the mapped data file is no longer kept within STORAGE_MAPPED_MB: ${why}`, err);
    return false;
  }
}

/**
 * /proc/self/statm, held open: read again from its start, it tells the counts of that moment, in
 * a pread where opening the file anew costs ten times as much.
 */
class Statm {
  private readonly fd = openSync('/proc/self/statm', 'r');
  private readonly buf = Buffer.alloc(256);
  /** kB per page: statm counts pages; VmRSS is in kB. */
  private readonly pageKb: number;
  private closed = false;

  constructor() {
    try {
      const vmRss = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'latin1'))?.[1]);
      const resident = this.field(1);
      // A power of two, whatever moved between the two reads.
      this.pageKb = 2 ** Math.round(Math.log2(vmRss / resident));
      if (!Number.isFinite(this.pageKb) || this.pageKb < 1) throw new Error(`cannot tell the page size (VmRSS ${vmRss} kB, ${resident} pages)`);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** Resident file-backed (and shared memory) kB: statm's third field. */
  fileKb(): number {
    return this.field(2) * this.pageKb;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }

  private field(i: number): number {
    const n = readSync(this.fd, this.buf, 0, this.buf.length, 0);
    const value = Number(this.buf.toString('latin1', 0, n).split(' ')[i]);
    if (!Number.isFinite(value)) throw new Error(`/proc/self/statm gave '${this.buf.toString('latin1', 0, n)}'`);
    return value;
  }
}

/**
 * Where `file` is mapped into this process, each range cut at the file's end (the mapping is the
 * size of the largest file allowed; only the file's pages can be resident, and walking the rest of
 * the range costs the kernel time for nothing).
 */
export function mappedRanges(file: string): { start: bigint; length: bigint }[] {
  let path: string;
  let size: number;
  let inode: number;
  try {
    path = realpathSync(file);
    const st = statSync(path);
    size = st.size;
    inode = st.ino;
  } catch {
    return [];
  }
  const ranges: { start: bigint; length: bigint }[] = [];
  for (const line of readFileSync('/proc/self/maps', 'latin1').split('\n')) {
    // start-end perms offset dev inode path
    if (!line.endsWith(path)) continue;
    const [span, , offset, , ino] = line.split(/\s+/, 5);
    if (Number(ino) !== inode || !span || !offset) continue;
    const [from, to] = span.split('-');
    if (!from || !to) continue;
    const start = BigInt(`0x${from}`);
    const left = BigInt(size) - BigInt(`0x${offset}`);
    if (left <= 0n) continue;
    const span64 = BigInt(`0x${to}`) - start;
    ranges.push({ start, length: span64 < left ? span64 : left });
  }
  return ranges;
}
