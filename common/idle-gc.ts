// Giving memory back after a burst. V8 collects when allocation needs room, and an idle process
// allocates nothing, so it keeps the heap a burst grew for as long as it stays idle: a process
// that seeded 1M orders held 450 MB of it through 90 s of quiet, 50-60 MB of it live (README,
// Benchmarks). Once the event loop has been idle for a whole interval and the heap is larger than
// a floor, one full collection returns the rest; it runs again only after the loop has been busy
// since. It needs the `gc` function that `--expose-gc` (npm start, the Procfile) provides, and
// does nothing without it. After the collection, malloc_trim gives back what the C allocator
// holds free: after seeding 1M orders, 20 of the 103 MB anonymous at rest.

import { performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import { libc } from './libc.js';

export interface IdleCollectorOptions {
  /** How often the loop's utilization is looked at; idle means idle for a whole interval. */
  intervalMs?: number;
  /** Event-loop utilization over an interval at or below which the process counts as idle. */
  idleUtilization?: number;
  /** No collection while V8's heap is smaller than this. */
  minHeapBytes?: number;
  /** The collector; `globalThis.gc` (from `--expose-gc`) when not given. */
  gc?: () => void;
  /** The heap's size now; V8's total heap size when not given. */
  heapBytes?: () => number;
  /** Run after each collection; malloc_trim(0) when not given (nothing where it cannot be called). */
  trim?: () => void;
}

export const IDLE_GC_INTERVAL_MS = 10_000;
export const IDLE_UTILIZATION = 0.01;
export const IDLE_GC_MIN_HEAP_BYTES = 64 * 1024 * 1024;

export interface IdleCollector {
  /** Collections made so far. */
  readonly collections: number;
  stop(): void;
}

export function collectWhenIdle(opts: IdleCollectorOptions = {}): IdleCollector {
  const gc = opts.gc ?? (globalThis as { gc?: () => void }).gc;
  const heapBytes = opts.heapBytes ?? (() => v8.getHeapStatistics().total_heap_size);
  const idle = opts.idleUtilization ?? IDLE_UTILIZATION;
  const floor = opts.minHeapBytes ?? IDLE_GC_MIN_HEAP_BYTES;
  const trim = opts.trim ?? (() => libc()?.mallocTrim(0));
  let collections = 0;
  if (!gc) return { collections, stop: () => undefined };
  let since = performance.eventLoopUtilization();
  // A process starts having done nothing to give back.
  let collected = true;
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(now, since).utilization > idle;
    since = now;
    if (busy) {
      collected = false;
      return;
    }
    if (collected || heapBytes() < floor) return;
    collected = true;
    collections++;
    gc();
    trim();
    // The collection's own time is not the process being busy: measured from after it, or a
    // collection longer than the idle share of an interval would set off the next one.
    since = performance.eventLoopUtilization();
  }, opts.intervalMs ?? IDLE_GC_INTERVAL_MS);
  timer.unref();
  return {
    get collections() {
      return collections;
    },
    stop: () => clearInterval(timer),
  };
}
