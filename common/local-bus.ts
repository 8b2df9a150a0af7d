import { Admission, CLOSING, type ActorEndpoint, type Bus } from './bus.js';
import type { Command, Query, Result } from '../proto/messages.js';
import { Deadlines } from './deadlines.js';

/** Embedded mode: the gateway calls the actor host in the same process, under the same deadline. */
export class LocalBus implements Bus {
  private readonly deadlines: Deadlines;
  /** Closed while the host behind it still finishes its turns: what comes now is refused, not run. */
  private closed = false;

  constructor(
    private readonly host: ActorEndpoint,
    timeoutMs: number,
  ) {
    this.deadlines = new Deadlines(timeoutMs);
  }

  /** A read the host answers at once from committed state; undefined for anything else. */
  read(cmd: Command): Result<unknown> | undefined {
    if (this.closed) return CLOSING;
    return this.host.read?.(cmd);
  }

  /**
   * A write is answered 503 at its deadline only if its turn has not begun by then, and then
   * never runs (Admission); one that has begun is answered when it is done.
   */
  send(cmd: Command): Promise<Result<unknown>> {
    if (this.closed) return Promise.resolve(CLOSING);
    const answered = this.host.read?.(cmd);
    if (answered) return Promise.resolve(answered);
    const admission = new Admission();
    return this.deadlines.race(this.host.handle(cmd, admission), admission);
  }

  /** One host owns every partition this bus reaches, with one store of keys. */
  keptApart(): boolean {
    return false;
  }

  async scatter(q: Query): Promise<Result<unknown>[]> {
    if (this.closed) return [CLOSING];
    return [await this.deadlines.race(this.host.query(q))];
  }

  async close(): Promise<void> {
    this.closed = true;
    this.deadlines.close();
  }
}
