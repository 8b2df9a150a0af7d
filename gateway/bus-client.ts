// The gateway's typed view of the bus: a reply of the kind the command asked for, or a typed
// ApiError rebuilt from the wire error in one place (common/errors.ts fromWire).

import type { Bus } from '../common/bus.js';
import { fromWire } from '../common/errors.js';
import type { Command, IdemTag, Query, ReplyMap, Result } from '../proto/messages.js';

/** One write's reply, with whether it was kept from an earlier attempt and until when. */
export interface Sent<T> {
  value: T;
  replayed: boolean;
  keptUntil: number | undefined;
}

/** What a request with an Idempotency-Key learns from its writes. */
export interface Replay {
  replayed: boolean;
}

function unwrap<T>(r: Result<unknown>): T {
  if (!r.ok) throw fromWire(r.error);
  return r.value as T;
}

export class BusClient {
  constructor(
    readonly bus: Bus,
    private readonly idem?: { tag: IdemTag; seen: Replay },
  ) {}

  /**
   * The client for one request with an Idempotency-Key: its commands carry the key (the owner
   * ignores it on reads), and a stored result coming back marks the answer as a replay.
   */
  withIdempotency(tag: IdemTag, seen: Replay): BusClient {
    return new BusClient(this.bus, { tag, seen });
  }

  /** The request's Idempotency-Key and fingerprint, when it has one. */
  get idempotency(): IdemTag | undefined {
    return this.idem?.tag;
  }

  /** Whether `readNow` can answer: the owners are in this process. */
  get readsNow(): boolean {
    return this.bus.read !== undefined;
  }

  /**
   * A read's reply at once, when its owner is in this process; undefined when it must be sent
   * (`call` then). An error reply throws, as `call` rejects.
   */
  readNow<C extends Command>(cmd: C): ReplyMap[C['kind']] | undefined {
    const result = this.bus.read?.(cmd);
    return result === undefined ? undefined : unwrap(result);
  }

  /** Tags the command with the request's key, if it has none: a command is built for one call. */
  async call<C extends Command>(cmd: C): Promise<ReplyMap[C['kind']]> {
    if (!this.idem) return unwrap(await this.bus.send(cmd));
    cmd.idem ??= this.idem.tag;
    const result = await this.bus.send(cmd);
    if (result.replayed) this.idem.seen.replayed = true;
    return unwrap(result);
  }

  /**
   * One write of a request whose answer joins several writes' results (a batch): the reply, and
   * whether it was kept from an earlier attempt and until when. Whether the request's answer is a
   * replay is left to the caller (markReplayed): it is one only if every part of it is.
   */
  async send<C extends Command>(cmd: C): Promise<Sent<ReplyMap[C['kind']]>> {
    if (this.idem) cmd.idem ??= this.idem.tag;
    const result = await this.bus.send(cmd);
    return { value: unwrap(result), replayed: result.replayed === true, keptUntil: result.keptUntil };
  }

  /** Marks the request's answer as a replay (Idempotent-Replayed), for answers built by `send`. */
  markReplayed(): void {
    if (this.idem) this.idem.seen.replayed = true;
  }

  /** Every owner's answer to a query; any node failing fails the whole query. */
  async gather<Q extends Query>(q: Q): Promise<ReplyMap[Q['kind']][]> {
    const results = await this.bus.scatter(q);
    return results.map((r) => unwrap<ReplyMap[Q['kind']]>(r));
  }
}
