import type { ActorEndpoint, Bus } from './bus.js';
import type { Command, Query, Result } from '../proto/messages.js';

/** Embedded mode: the gateway calls the actor host in the same process, under the same deadline. */
export class LocalBus implements Bus {
  private readonly deadlines: Deadlines;

  constructor(
    private readonly host: ActorEndpoint,
    private readonly timeoutMs: number,
  ) {
    this.deadlines = new Deadlines(timeoutMs);
  }

  /** Sets the command's `budgetMs`: a command is built for one send, so it is not copied first. */
  send(cmd: Command): Promise<Result<unknown>> {
    const answered = this.host.read?.(cmd);
    if (answered) return Promise.resolve(answered);
    cmd.budgetMs = this.timeoutMs;
    return this.deadlines.race(this.host.handle(cmd));
  }

  async scatter(q: Query): Promise<Result<unknown>[]> {
    return [await this.deadlines.race(this.host.query(q))];
  }

  async close(): Promise<void> {
    this.deadlines.close();
  }
}

const TIMED_OUT: Result<never> = {
  ok: false,
  error: { code: 'unavailable', detail: 'The request could not be served in time.' },
};

/**
 * Answers 503-shaped results for work that outlives the deadline (the work itself goes on).
 * One coarse sweep timer serves every pending request: a timer per request costs more than
 * the read it guards. A request may overrun its deadline by up to one tick.
 */
export class Deadlines {
  private readonly pending = new Set<{ due: number; resolve: (r: Result<never>) => void }>();
  private timer: NodeJS.Timeout | undefined;
  private readonly tickMs: number;

  constructor(private readonly timeoutMs: number) {
    this.tickMs = Math.max(5, Math.min(100, Math.floor(timeoutMs / 10)));
  }

  race<T>(work: Promise<Result<T>>): Promise<Result<T>> {
    return new Promise((resolve) => {
      const entry = { due: Date.now() + this.timeoutMs, resolve };
      this.pending.add(entry);
      this.timer ??= setInterval(() => this.sweep(), this.tickMs).unref();
      work.then(
        (r) => {
          this.pending.delete(entry);
          resolve(r);
        },
        () => {
          this.pending.delete(entry);
          resolve({ ok: false, error: { code: 'internal', detail: 'The request could not be completed.' } });
        },
      );
    });
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private sweep(): void {
    const now = Date.now();
    for (const e of this.pending) {
      if (e.due <= now) {
        this.pending.delete(e);
        e.resolve(TIMED_OUT);
      }
    }
    if (this.pending.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}
