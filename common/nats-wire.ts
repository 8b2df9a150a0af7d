// What gateway and actor nodes say to each other over NATS: subjects, envelopes, and the one
// codec. Shared by common/nats-bus.ts (gateway side) and common/nats-actor-server.ts (actor side)
// so the format lives in one place; it does not import `nats` itself.

import { Packr } from 'msgpackr';
import { isProblemSlug, type WireError } from './errors.js';
import { isPartition } from './partitions.js';
import type { Command, Query, Result } from '../proto/messages.js';

export const ANNOUNCE_SUBJECT = 'actors.announce';
export const DISCOVER_SUBJECT = 'actors.discover';
export const nodeSubject = (nodeId: string): string => `actors.node.${nodeId}`;

/** A node re-announces this often; a gateway forgets it after MISSED_HEARTBEATS silent periods. */
export const HEARTBEAT_MS = 2000;
export const MISSED_HEARTBEATS = 3;
export const RECONNECT_WAIT_MS = 1000;

/** A node id becomes a subject token, so no dots, wildcards or spaces. */
export const isNodeId = (s: unknown): s is string => typeof s === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(s);

// Records (msgpackr's default): each message carries the definition of every object shape it
// holds, once, and its objects as values alone, so every message decodes on its own (gateway and
// nodes share no state) and a reply of sixteen orders names their members once, not sixteen
// times. Read as maps, each member name was a fresh string V8 looked up in its string table and
// stored through a megamorphic keyed store: 110k instructions per cluster GET at the gateway,
// against 99k with records. Either side reads both encodings, so nodes and gateways of the
// release before (which wrote maps) still understand each other: maps still decode as objects,
// which msgpackr does by default only without records.
export const packr = new Packr({ mapsAsObjects: true });

/**
 * Request envelope, version 1: one message carries a batch of commands (coalesced per owner
 * node) or exactly one query. `v` lets a later version add fields (a lease epoch for fencing)
 * that old nodes can refuse instead of misreading.
 */
/**
 * `cuts` on a query: the gateway reads ListPage.cut, so a page too large for one reply may be cut
 * short rather than failed (a gateway of the earlier release would take it for the whole page).
 */
export type WireRequest = { v: 1; commands: Command[]; late?: LateTo } | { v: 1; query: Query; cuts?: true };

/**
 * Where a node may send the results of commands still running when it answers: the gateway's
 * subject for them, and this message's number there. Without it a node answers once, when every
 * command is done (how nodes of the earlier release always answer).
 */
export interface LateTo {
  to: string;
  xid: number;
}

/**
 * Reply: one Result per command, in request order (one for a query), or one error for the whole
 * message. `pending` lists the commands still running (their entries are null): their results
 * follow on the request's `late` subject, as LateResults.
 */
export type WireReply = { results: (Result<unknown> | null)[]; pending?: number[] } | { error: WireError };

/** Results of a message's pending commands, by index, as they finish. */
export interface LateResults {
  xid: number;
  results: [number, Result<unknown>][];
}

/** An actor node's ownership claim. JSON, not msgpack, so `nats sub actors.announce` is readable. */
export interface Announcement {
  nodeId: string;
  subject: string;
  /** Inclusive [first, last] runs. Empty means the node is leaving. */
  ranges: [number, number][];
  /** Sender's clock, for operators only: expiry runs on the receiver's clock. */
  at: number;
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null;

const isWireError = (x: unknown): x is WireError =>
  isObject(x) && typeof x.code === 'string' && isProblemSlug(x.code) && typeof x.detail === 'string';

const isResult = (x: unknown): x is Result<unknown> =>
  isObject(x) && (x.ok === true ? 'value' in x : x.ok === false && isWireError(x.error));

const UNREADABLE: Result<never> = { ok: false, error: { code: 'internal', detail: 'The reply could not be read.' } };

/**
 * Never throws: whatever does not fit the envelope becomes an `internal` error, per command where
 * it can. A pending command's entry is undefined, and its index is in `pending`.
 */
export function decodeReply(data: Uint8Array, count: number): { results: (Result<unknown> | undefined)[]; pending: number[] } {
  let reply: unknown;
  try {
    reply = packr.unpack(data);
  } catch {
    return { results: Array<Result<unknown>>(count).fill(UNREADABLE), pending: [] };
  }
  if (isObject(reply) && Array.isArray(reply.results) && reply.results.length === count) {
    const pending = Array.isArray(reply.pending) ? (reply.pending as unknown[]).filter((i): i is number => Number.isInteger(i) && (i as number) >= 0 && (i as number) < count) : [];
    const waiting = new Set(pending);
    return { results: (reply.results as unknown[]).map((r, i) => (waiting.has(i) ? undefined : isResult(r) ? r : UNREADABLE)), pending };
  }
  const whole: Result<unknown> = isObject(reply) && isWireError(reply.error) ? { ok: false, error: reply.error } : UNREADABLE;
  return { results: Array<Result<unknown>>(count).fill(whole), pending: [] };
}

/** Undefined for anything that is not a well-formed LateResults; bad entries become `internal` errors. */
export function decodeLate(data: Uint8Array): LateResults | undefined {
  let late: unknown;
  try {
    late = packr.unpack(data);
  } catch {
    return undefined;
  }
  if (!isObject(late) || !Number.isInteger(late.xid) || !Array.isArray(late.results)) return undefined;
  const results: [number, Result<unknown>][] = [];
  for (const entry of late.results as unknown[]) {
    if (!Array.isArray(entry) || !Number.isInteger(entry[0])) continue;
    results.push([entry[0] as number, isResult(entry[1]) ? entry[1] : UNREADABLE]);
  }
  return { xid: late.xid as number, results };
}

/** The envelope only; the endpoint checks each command's own shape. Throws on anything else. */
export function decodeRequest(data: Uint8Array): WireRequest {
  const req: unknown = packr.unpack(data);
  if (!isObject(req) || req.v !== 1) throw new Error('unknown request envelope');
  if (Array.isArray(req.commands) && req.commands.every((c) => isObject(c) && isPartition(c.partition))) {
    const late = req.late;
    const valid = isObject(late) && typeof late.to === 'string' && late.to.length > 0 && Number.isInteger(late.xid);
    return { v: 1, commands: req.commands as Command[], ...(valid ? { late: { to: late.to as string, xid: late.xid as number } } : {}) };
  }
  if (isObject(req.query) && typeof req.query.kind === 'string') return { v: 1, query: req.query as Query, ...(req.cuts === true ? { cuts: true as const } : {}) };
  throw new Error('request carries neither commands nor a query');
}

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

export function encodeAnnouncement(a: Announcement): Uint8Array {
  return utf8.encode(JSON.stringify(a));
}

/** Undefined for anything that is not a well-formed claim, so one bad sender cannot corrupt the directory. */
export function decodeAnnouncement(data: Uint8Array): Announcement | undefined {
  let a: unknown;
  try {
    a = JSON.parse(fromUtf8.decode(data));
  } catch {
    return undefined;
  }
  if (!isObject(a) || !isNodeId(a.nodeId) || a.subject !== nodeSubject(a.nodeId) || typeof a.at !== 'number') return undefined;
  if (!Array.isArray(a.ranges)) return undefined;
  const ranges: [number, number][] = [];
  for (const r of a.ranges as unknown[]) {
    if (!Array.isArray(r) || r.length !== 2) return undefined;
    const [lo, hi] = r as unknown[];
    if (!isPartition(lo) || !isPartition(hi) || (lo as number) > (hi as number)) return undefined;
    ranges.push([lo as number, hi as number]);
  }
  return { nodeId: a.nodeId, subject: a.subject, ranges, at: a.at };
}

/** Waits for work (a drain, say) but no longer than ms: while disconnected a drain can wait forever. */
export function settleWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const done = work.then(
    () => {},
    () => {},
  );
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  return Promise.race([done, late]).finally(() => clearTimeout(timer));
}
