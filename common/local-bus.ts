import type { ActorEndpoint, Bus } from './bus.js';
import type { Command, Query, Result } from '../proto/messages.js';

/** Embedded mode: the gateway calls the actor host in the same process, under the same deadline. */
export class LocalBus implements Bus {
  constructor(
    private readonly host: ActorEndpoint,
    private readonly timeoutMs: number,
  ) {}

  send(cmd: Command): Promise<Result<unknown>> {
    return withDeadline(this.host.handle(cmd), this.timeoutMs);
  }

  async scatter(q: Query): Promise<Result<unknown>[]> {
    return [await withDeadline(this.host.query(q), this.timeoutMs)];
  }

  async close(): Promise<void> {}
}

const TIMED_OUT: Result<never> = {
  ok: false,
  error: { code: 'unavailable', detail: 'The request could not be served in time.' },
};

/** Resolves with a 503-shaped result when the work outlives the deadline (the work itself goes on). */
export function withDeadline<T>(work: Promise<Result<T>>, ms: number): Promise<Result<T>> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<Result<T>>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
