// An actor node's reply too large for NATS max_payload, made to fit. Without it nats.js refuses
// to send the reply, and every request the message carried is answered 500: the GETs of other
// tenants coalesced with one tenant's large orders, or a page of large orders. The schemas bound
// a record in characters (50 metadata values of 500), and at four bytes a character an order
// alone is over 100 KB, beyond MAX_REPLY_BYTES, by which the gateway sizes its messages.
//
//   a page (a list query)  ─▶ the rows that fit, marked `cut`: the gateway's merged page ends at
//                             the last of them, and its next page carries on from there
//   results of commands    ─▶ those that fit in the reply; the others as late results, as for
//                             writes still running, as many to a message as fit
//   one result too large for any message ─▶ answered `internal` (raise max_payload)

import { packr, type LateResults, type WireReply, type WireRequest } from './nats-wire.js';
import type { ListPage, Result } from '../proto/messages.js';

/** Room each message keeps for its envelope around the results and rows it carries. */
const ENVELOPE_BYTES = 1024;

export const TOO_LARGE_TO_SEND: Result<never> = {
  ok: false,
  error: { code: 'internal', detail: 'The answer is larger than the cluster bus carries (NATS max_payload).' },
};
const TOO_LARGE_BYTES = packr.pack(TOO_LARGE_TO_SEND).length;

export interface Fitted {
  reply: WireReply;
  /** Results that follow the reply, each message within max_payload. */
  late: LateResults[];
  /** Results that could not be sent at all, answered TOO_LARGE_TO_SEND. */
  dropped: number;
}

/** `reply` to `req` (undefined when the request could not be read), within `maxPayload` bytes a message. */
export function fitReply(reply: WireReply, req: WireRequest | undefined, maxPayload: number): Fitted {
  const budget = maxPayload - ENVELOPE_BYTES;
  if ('error' in reply || req === undefined) return { reply, late: [], dropped: 0 };
  if ('query' in req) {
    const r = reply.results[0];
    if (req.cuts && r?.ok && isPage(r.value)) {
      const rows = r.value.rows;
      let used = 0;
      let kept = 0;
      while (kept < rows.length && (used += bytes(rows[kept])) <= budget) kept++;
      if (kept > 0) return { reply: { results: [{ ok: true, value: { rows: rows.slice(0, kept), cut: true } satisfies ListPage<unknown> }] }, late: [], dropped: 0 };
    }
    return { reply: { results: [TOO_LARGE_TO_SEND] }, late: [], dropped: 1 };
  }
  const xid = req.late?.xid;
  const results = reply.results.slice();
  const pending = new Set(reply.pending);
  const late: LateResults[] = [];
  let chunk: [number, Result<unknown>][] = [];
  let chunkBytes = 0;
  let used = 0;
  let dropped = 0;
  const drop = (i: number): void => {
    results[i] = TOO_LARGE_TO_SEND;
    used += TOO_LARGE_BYTES;
    dropped++;
  };
  results.forEach((r, i) => {
    if (r === null) return;
    const n = bytes(r);
    if (n > budget) return drop(i);
    if (used + n <= budget) {
      used += n;
      return;
    }
    // A gateway of the earlier release takes no late results.
    if (xid === undefined) return drop(i);
    results[i] = null;
    pending.add(i);
    if (chunkBytes + n > budget) {
      late.push({ xid, results: chunk });
      chunk = [];
      chunkBytes = 0;
    }
    chunk.push([i, r]);
    chunkBytes += n;
  });
  if (chunk.length && xid !== undefined) late.push({ xid, results: chunk });
  return { reply: { results, ...(pending.size ? { pending: [...pending].sort((a, b) => a - b) } : {}) }, late, dropped };
}

function bytes(value: unknown): number {
  return packr.pack(value).length;
}

function isPage(value: unknown): value is ListPage<unknown> {
  return typeof value === 'object' && value !== null && Array.isArray((value as { rows?: unknown }).rows);
}
