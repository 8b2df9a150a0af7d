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
  return SHARED_READS.has(cmd.kind as SharedReadKind) || cmd.kind === 'user.batchGet' || cmd.kind === 'idem.peek' || cmd.kind === 'order.batchCheck';
}

/**
 * Where a request keeps the answer it would replay (RouteDef.replay): the owner of `partition`,
 * in `tenant`'s key scope.
 */
export interface KeptAt {
  tenant: string;
  partition: number;
}

/** A kept answer found before the request's first command: the request is answered with it. */
export class KeptAnswer {
  constructor(readonly kept: Result<unknown>) {}
}

/** A request's Idempotency-Key, what its writes found, and its taking at home (BusClient.taken). */
interface RequestKey {
  tag: IdemTag;
  seen: Replay;
  take?: Promise<Result<unknown>>;
  /** Where to look for a kept answer before the first command, until a command goes for that. */
  keptAt?: KeptAt;
  /**
   * The look under way (`idem.peek`), or a promise of the answer of the write that answers for
   * it, made only once a command has to wait for that write. Resolves once there is no kept
   * answer; rejects with a KeptAnswer when there is one, and stays rejected then.
   */
  look?: Promise<void>;
  /** The write that answers for the look is under way. */
  answering?: boolean;
  /** Settles `look` with the reply of that write, when a command waits for it. */
  answered?: (kept: Result<unknown> | undefined) => void;
  /** The kept answer that write came back with. */
  kept?: Result<unknown>;
  /** A write carrying the key has been sent: its owner has checked the key. */
  used?: boolean;
}

/**
 * The write that answers for the look has its reply: a kept answer, or none. A command waiting
 * for it learns which; one sent later meets the kept answer as a rejected look, as a waiter would.
 */
function settleLook(idem: RequestKey, kept: Result<unknown> | undefined): void {
  idem.kept = kept;
  idem.answering = false;
  if (idem.answered) {
    idem.answered(kept);
    idem.answered = undefined;
  } else if (kept) {
    const look = Promise.reject(new KeptAnswer(kept));
    look.catch(() => undefined);
    idem.look = look;
  }
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
   * ignores it on reads), and a stored result coming back marks the answer as a replay. With
   * `keptAt`, a kept answer there is looked for before the request's first command (which then
   * rejects with a KeptAnswer), unless that command is the write the owner there keeps the
   * answer of: the owner replays it from the write as the look would, one bus call fewer.
   */
  withIdempotency(tag: IdemTag, seen: Replay, keptAt?: KeptAt): BusClient {
    return new BusClient(this.bus, { tag, seen, keptAt });
  }

  /** Whether a kept answer is still to be looked for: no command has settled that yet. */
  get unlooked(): boolean {
    return this.idem?.keptAt !== undefined;
  }

  /** The kept answer this request's write came back with, when the owner replayed it from there. */
  get keptAnswer(): Result<unknown> | undefined {
    return this.idem?.kept;
  }

  /** Whether a write carrying the request's key has been sent, so an owner has checked the key. */
  get keyUsed(): boolean {
    return this.idem?.used === true;
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
    // Not before the kept answer is looked for: that takes a call.
    if (this.idem && this.lookPending(this.idem)) return undefined;
    const result = this.bus.read?.(cmd);
    return result === undefined ? undefined : unwrap(result);
  }

  /**
   * Tags the command with the request's key, if it has none: a command is built for one call. A
   * write kept by another store than the key's home first takes the key at home (`taken`).
   */
  async call<C extends Command>(cmd: C): Promise<ReplyMap[C['kind']]> {
    const idem = this.idem;
    if (!idem) return unwrap(await this.bus.send(cmd));
    // The write that answers for the look is sent at once; any other command waits for the look.
    let answers = false;
    if (this.lookPending(idem)) {
      answers = this.answersLook(idem, cmd);
      if (!answers) await this.lookSettled(idem);
    }
    let result: Result<unknown> | undefined;
    try {
      // The write that answers for the look is kept under the key's own scope: nothing to take.
      const read = isRead(cmd);
      // Used from here: a write, or the key's taking at home before it, carries the key.
      if (!read) idem.used = true;
      cmd.idem ??= read || answers ? idem.tag : await this.taken(cmd);
      result = await this.bus.send(cmd);
    } finally {
      if (answers) settleLook(idem, result?.replayed ? result : undefined);
    }
    if (result.replayed) idem.seen.replayed = true;
    return unwrap(result);
  }

  /**
   * Settles whether the request has a kept answer, before `cmd` is sent; true when `cmd` is the
   * command that settles it. A write to the owner that keeps the answer, under the key's own
   * scope there (no taking elsewhere first), is sent as it is: its owner answers a kept result
   * before running anything (actors/host.ts write), and commands sent beside it wait for its
   * reply. Anything else waits for a look (`idem.peek`) first, so a retry never depends on what
   * its first attempt read, or on those owners being up.
   */
  async looked(cmd?: Command & { tenant: string }): Promise<boolean> {
    const idem = this.idem;
    if (!idem) return false;
    if (this.answersLook(idem, cmd)) return true;
    await this.lookSettled(idem);
    return false;
  }

  /** Waits until the request's kept answer is known not to exist; rejects with a KeptAnswer when it does. */
  private async lookSettled(idem: RequestKey): Promise<void> {
    const at = idem.keptAt;
    if (idem.answering && idem.look === undefined) {
      const look = new Promise<void>((resolve, reject) => {
        idem.answered = (kept) => (kept ? reject(new KeptAnswer(kept)) : resolve());
      });
      idem.look = look;
      look.then(
        () => {
          if (idem.look === look) idem.look = undefined;
        },
        () => undefined,
      );
    }
    if (at !== undefined) {
      idem.look ??= this.kept(at.tenant, at.partition, idem.tag).then((kept) => {
        if (kept) throw new KeptAnswer(kept);
        idem.keptAt = undefined;
        idem.look = undefined;
      });
    }
    if (idem.look !== undefined) await idem.look;
  }

  /**
   * Whether `cmd` is the write that answers for the look (see `looked`), which it then is. Most
   * often no other command waits for it: no promise is made for them until one does.
   */
  private answersLook(idem: RequestKey, cmd?: Command & { tenant: string }): boolean {
    const at = idem.keptAt;
    if (at === undefined || idem.look !== undefined || !cmd || isRead(cmd) || cmd.partition !== at.partition || this.homeApart(cmd) !== undefined) return false;
    idem.keptAt = undefined;
    idem.answering = true;
    return true;
  }

  private lookPending(idem: RequestKey): boolean {
    return idem.keptAt !== undefined || idem.look !== undefined || idem.answering === true;
  }

  /**
   * The key's home partition when a write of this request to `cmd.partition` takes its key there
   * first (another store keeps it); undefined when the write's own owner keeps the key.
   */
  private homeApart(cmd: Command & { tenant: string }): number | undefined {
    const home = partitionForPair(cmd.tenant, this.idem!.tag.key);
    return cmd.partition !== home && this.bus.keptApart?.(home, cmd.partition) !== false ? home : undefined;
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
    const home = this.homeApart(cmd);
    if (home === undefined) return idem.tag;
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
    if (this.idem && this.lookPending(this.idem)) await this.looked();
    if (this.idem) {
      cmd.idem ??= this.idem.tag;
      if (!isRead(cmd)) this.idem.used = true;
    }
    const result = await this.bus.send(cmd);
    return { value: unwrap(result), replayed: result.replayed === true, keptUntil: result.keptUntil };
  }

  /** Marks the request's answer as a replay (Idempotent-Replayed), for answers built by `send`. */
  markReplayed(): void {
    if (this.idem) this.idem.seen.replayed = true;
  }

  /** Every owner's answer to a query; any node failing fails the whole query. */
  async gather<Q extends Query>(q: Q): Promise<ReplyMap[Q['kind']][]> {
    if (this.idem && this.lookPending(this.idem)) await this.looked();
    const results = await this.bus.scatter(q);
    return results.map((r) => unwrap<ReplyMap[Q['kind']]>(r));
  }
}
