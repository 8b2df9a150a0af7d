// Deadlines for many pending requests, kept by one coarse sweep timer for all of them: a timer
// per request costs more than the read it guards. Both buses use it, the local one for work
// handed to the actor host and the NATS one for replies on the wire.

import type { Result } from '../proto/messages.js';
import type { Admission } from './bus.js';

/** The sweep's tick for requests allowed `timeoutMs`: a tenth of it, from 5 to 100 ms. */
export function tickFor(timeoutMs: number): number {
  return Math.max(5, Math.min(100, Math.floor(timeoutMs / 10)));
}

/**
 * Entries by key, each ended by `expire` once its deadline has passed, unless taken first. An
 * entry outlives its deadline by at most one tick. The timer runs only while an entry waits.
 * `expire` runs inside the sweep's walk of the entries: it must not add one.
 */
export class DeadlineSweep<K, E extends { deadline: number }> {
  private readonly entries = new Map<K, E>();
  private timer: NodeJS.Timeout | undefined;
  private readonly tickMs: number;

  constructor(
    timeoutMs: number,
    private readonly expire: (entry: E, key: K) => void,
  ) {
    this.tickMs = tickFor(timeoutMs);
  }

  add(key: K, entry: E): void {
    this.entries.set(key, entry);
    this.timer ??= setInterval(() => this.sweep(), this.tickMs).unref();
  }

  /** The entry under `key`, removed; undefined once it was taken or has expired. */
  take(key: K): E | undefined {
    const entry = this.entries.get(key);
    if (entry !== undefined) this.entries.delete(key);
    return entry;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Whether the sweep timer is running (it stops when nothing waits). */
  get ticking(): boolean {
    return this.timer !== undefined;
  }

  /** Stops the timer; entries left are never expired. */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private sweep(): void {
    const now = Date.now();
    for (const [key, entry] of this.entries) {
      if (entry.deadline > now) continue;
      this.entries.delete(key);
      this.expire(entry, key);
    }
    if (this.entries.size === 0) this.close();
  }
}

const TIMED_OUT: Result<never> = {
  ok: false,
  error: { code: 'unavailable', detail: 'The request could not be served in time.' },
};

const FAILED: Result<never> = { ok: false, error: { code: 'internal', detail: 'The request could not be completed.' } };

interface Racing {
  deadline: number;
  resolve: (r: Result<never>) => void;
  admission: Admission | undefined;
}

/**
 * Answers 503-shaped results for work that outlives the deadline (the work itself goes on, or,
 * for a write not yet started, never starts: Admission), and a 500-shaped one for work that
 * throws.
 */
export class Deadlines {
  private readonly pending: DeadlineSweep<Racing, Racing>;

  constructor(private readonly timeoutMs: number) {
    this.pending = new DeadlineSweep(timeoutMs, (entry) => {
      // A write already running is answered when it is done (its work's `then` below).
      if (entry.admission?.giveUp() !== false) entry.resolve(TIMED_OUT);
    });
  }

  /** `admission`: the work is a write that, once started, is awaited past the deadline. */
  race<T>(work: Promise<Result<T>>, admission?: Admission): Promise<Result<T>> {
    return new Promise((resolve) => {
      const entry: Racing = { deadline: Date.now() + this.timeoutMs, resolve, admission };
      this.pending.add(entry, entry);
      work.then(
        (r) => {
          this.pending.take(entry);
          resolve(r);
        },
        () => {
          this.pending.take(entry);
          resolve(FAILED);
        },
      );
    });
  }

  close(): void {
    this.pending.close();
  }
}
