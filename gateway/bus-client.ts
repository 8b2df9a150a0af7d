// The gateway's typed view of the bus: a reply of the kind the command asked for, or a typed
// ApiError rebuilt from the wire error in one place (common/errors.ts fromWire).

import type { Bus } from '../common/bus.js';
import { fromWire } from '../common/errors.js';
import type { Command, Query, ReplyMap, Result } from '../proto/messages.js';

function unwrap<T>(r: Result<unknown>): T {
  if (!r.ok) throw fromWire(r.error);
  return r.value as T;
}

export class BusClient {
  constructor(readonly bus: Bus) {}

  async call<C extends Command>(cmd: C): Promise<ReplyMap[C['kind']]> {
    return unwrap(await this.bus.send(cmd));
  }

  /** Every owner's answer to a query; any node failing fails the whole query. */
  async gather<Q extends Query>(q: Q): Promise<ReplyMap[Q['kind']][]> {
    const results = await this.bus.scatter(q);
    return results.map((r) => unwrap<ReplyMap[Q['kind']]>(r));
  }
}
