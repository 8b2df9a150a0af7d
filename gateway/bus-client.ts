// The gateway's typed view of the bus: a reply of the kind the command asked for, or a typed
// ApiError rebuilt from the wire error in one place (common/errors.ts fromWire).

import type { Bus } from '../common/bus.js';
import { fromWire } from '../common/errors.js';
import { partitionForPair } from '../common/ids.js';
import { SHARED_READS, type Command, type IdemTag, type Query, type ReplyMap, type Result, type SharedReadKind } from '../proto/messages.js';

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

/** Reads a keyed request may send (a create pricing its products, say): their owner ignores the key. */
function isRead(cmd: Command): boolean {
  return SHARED_READS.has(cmd.kind as SharedReadKind) || cmd.kind === 'user.batchGet' || cmd.kind === 'idem.peek';
}

/** A request's Idempotency-Key, what its writes found, and its taking at home (BusClient.taken). */
interface RequestKey {
  tag: IdemTag;
  seen: Replay;
  take?: Promise<Result<unknown>>;
}

function unwrap<T>(r: Result<unknown>): T {
  if (!r.ok) throw fromWire(r.error);
  return r.value as T;
}

export class BusClient {
  constructor(
    readonly bus: Bus,
    private readonly idem?: RequestKey,
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

  /**
   * Tags the command with the request's key, if it has none: a command is built for one call. A
   * write kept by another store than the key's home first takes the key at home (`taken`).
   */
  async call<C extends Command>(cmd: C): Promise<ReplyMap[C['kind']]> {
    if (!this.idem) return unwrap(await this.bus.send(cmd));
    cmd.idem ??= isRead(cmd) ? this.idem.tag : await this.taken(cmd);
    const result = await this.bus.send(cmd);
    if (result.replayed) this.idem.seen.replayed = true;
    return unwrap(result);
  }

  /**
   * The key for a write of this request. Its owner keeps the answer under the key, but the key's
   * scope is tenant + key (CONTRACT §7), wherever the write goes: when the owner keeps keys apart
   * from the key's home partition (another actor node), the key is taken at home first, once per
   * request, so another request under it is refused (422) before it runs anywhere. The write's
   * own record then expires with the home record, never after it.
   */
  private async taken(cmd: Command & { tenant: string }): Promise<IdemTag> {
    const idem = this.idem!;
    const home = partitionForPair(cmd.tenant, idem.tag.key);
    if (cmd.partition === home || this.bus.keptApart?.(home, cmd.partition) === false) return idem.tag;
    idem.take ??= this.bus.send({ kind: 'idem.take', tenant: cmd.tenant, partition: home, idem: idem.tag });
    const took = await idem.take;
    if (!took.ok) throw fromWire(took.error); // reused, in flight, or its owner unavailable
    return took.keptUntil === undefined ? idem.tag : { ...idem.tag, until: took.keptUntil };
  }

  /**
   * The answer an earlier request left under `idem` at the owner of `partition` (a read,
   * `idem.peek`), marked replayed; undefined when there is none. The key in flight, reused for
   * another request, or its owner unreachable throws, as a write under it would.
   */
  async kept(tenant: string, partition: number, idem: IdemTag): Promise<Result<unknown> | undefined> {
    const peeked = await this.bus.send({ kind: 'idem.peek', tenant, partition, idem });
    if (peeked.replayed) return peeked; // a kept refusal too: the caller answers it again
    if (!peeked.ok) throw fromWire(peeked.error);
    return undefined;
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
