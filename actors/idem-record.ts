// The record an Idempotency-Key leaves with its owner (CONTRACT §7), and its byte layout. One is
// written on every keyed POST, in the transaction of the POST's effect, so it is laid out by hand
// (storage RecordCodec): msgpackr spent about 6,000 instructions encoding each one, most of them
// on checks of what each member is, where this copies a few fields.

import { Buffer } from 'node:buffer';
import type { Result } from '../proto/messages.js';
import { RECORD_MARK, type RecordCodec, type TableSpec, type Write } from '../storage/store.js';

/**
 * What an Idempotency-Key's first request did, kept beside its effect. A success whose value is a
 * record the same turn wrote (a new order, a paid one) keeps that record's stored bytes, encoded
 * once for both; any other answer keeps `result`.
 */
export interface IdemRecord {
  id: string;
  fingerprint: string;
  expiresAt: number;
  result?: Result<unknown>;
  /** The table of the record kept as bytes. */
  table?: string;
  /** The record, as `table` stores it (lmdb-js hands back a copy on read). */
  bytes?: Uint8Array;
  /**
   * The key only, taken at its home by `idem.take` for a request whose write another store keeps:
   * no answer. That request's write runs (and, in this store, puts its answer here); any other
   * request under the key is refused.
   */
  taken?: true;
}

/**
 * What an Idempotency-Key keeps of a turn's answer. A success whose value is a record the turn
 * writes (the usual reply of a write) is kept as that record's bytes, which the turn's own write
 * then reuses: encoded once, not twice. Anything else is kept as it is.
 */
export function idemRecord(id: string, fingerprint: string, expiresAt: number, result: Result<unknown>, writes: Write<unknown>[]): IdemRecord {
  if (result.ok && result.value !== undefined && result.value !== null) {
    for (const w of writes) {
      if (w.after !== result.value) continue;
      w.encoded ??= w.table.encode(w.after);
      return { id, fingerprint, expiresAt, table: w.table.spec.name, bytes: w.encoded };
    }
  }
  return { id, fingerprint, expiresAt, result };
}

// What follows the expiry and the fingerprint.
const TAKEN = 0;
const RECORD_BYTES = 1;
const RESULT = 2;

// Mark, kind, expiry (float64), fingerprint length (uint16).
const HEAD = 1 + 1 + 8 + 2;

/**
 * RECORD_MARK; the kind (TAKEN, RECORD_BYTES or RESULT); `expiresAt` as a big-endian float64;
 * the fingerprint's UTF-8 length as a big-endian uint16, then its bytes. Then, for RECORD_BYTES,
 * the table name's length (one byte) and name, and the record's bytes to the end; for RESULT,
 * the result as msgpackr bytes to the end. The id is the record's key, not stored again.
 */
export const idemCodec: RecordCodec<IdemRecord> = {
  encode(r, msgpack) {
    const kind = r.taken ? TAKEN : r.bytes ? RECORD_BYTES : RESULT;
    const fingerprint = Buffer.byteLength(r.fingerprint);
    const table = kind === RECORD_BYTES ? Buffer.byteLength(r.table ?? '') : 0;
    if (fingerprint > 0xffff || table > 0xff) throw new Error('idempotency record: fingerprint or table name too long');
    const rest = kind === RECORD_BYTES ? r.bytes! : kind === RESULT ? msgpack(r.result) : undefined;
    const out = Buffer.allocUnsafe(HEAD + fingerprint + (kind === RECORD_BYTES ? 1 + table : 0) + (rest?.length ?? 0));
    out[0] = RECORD_MARK;
    out[1] = kind;
    out.writeDoubleBE(r.expiresAt, 2);
    out.writeUInt16BE(fingerprint, 10);
    let at = HEAD + out.write(r.fingerprint, HEAD, 'utf8');
    if (kind === RECORD_BYTES) {
      out[at++] = table;
      at += out.write(r.table ?? '', at, 'utf8');
    }
    if (rest) out.set(rest, at);
    return out;
  },

  decode(bytes, id, msgpack) {
    const kind = bytes[1];
    const expiresAt = bytes.readDoubleBE(2);
    const at = HEAD + bytes.readUInt16BE(10);
    const fingerprint = bytes.toString('utf8', HEAD, at);
    if (kind === TAKEN) return { id, fingerprint, expiresAt, taken: true };
    if (kind === RECORD_BYTES) {
      const end = at + 1 + bytes[at]!;
      const table = bytes.toString('utf8', at + 1, end);
      return { id, fingerprint, expiresAt, table, bytes: bytes.subarray(end) };
    }
    if (kind === RESULT) return { id, fingerprint, expiresAt, result: msgpack(bytes.subarray(at)) as Result<unknown> };
    throw new Error(`idempotency record: unknown kind ${String(kind)}`);
  },
};

// Keyed by tenant + key (the key's scope); indexed by expiry so the sweep reads only what is due.
export const IDEMPOTENCY: TableSpec<IdemRecord> = { name: 'idempotency', missesKept: true, codec: idemCodec, indexKeys: (r) => [[r.expiresAt, r.id]] };
