// Shared pieces for the edge-facing tests (pipeline, http-edge, durability, token CLI): temp
// data directories, a silent logger, tokens, calling the pure pipeline, and one assertion for
// RFC 9457 problem bodies.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import type { ExecutionContext } from 'ava';
import { pino } from 'pino';
import type { Logger } from '../../common/log.js';
import { mintToken } from '../../gateway/auth.js';
import type { GatewayRequest, GatewayResponse } from '../../gateway/http-types.js';

/** The project root (this file runs from dist/test/helpers). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export async function tempDir(label: string): Promise<string> {
  return mkdtemp(join(tmpdir(), `orders-${label}-`));
}

export async function removeDir(dir: string | undefined): Promise<void> {
  if (dir) await rm(dir, { recursive: true, force: true });
}

export function silentLog(): Logger {
  return pino({ level: 'silent' });
}

/**
 * Makes the next `n` commits of an actor host fail, as a full disk would; each failure comes
 * after `delayMs`, so what is sent meanwhile queues behind the failing turn.
 */
export function failCommits(host: object, n: number, delayMs = 0): void {
  const store = (host as { store: { commit(writes: unknown[]): Promise<void> } }).store;
  const commit = store.commit.bind(store);
  let left = n;
  store.commit = async (writes) => {
    if (left-- <= 0) return commit(writes);
    if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
    throw new Error('MDB_MAP_FULL: the disk is full');
  };
}

/**
 * Holds the next commit of `host`'s store until the function returned is called, so the turn
 * making it keeps its keys' mailboxes meanwhile; later commits go through as usual.
 */
export function holdNextCommit(host: object): () => void {
  const store = (host as { store: { commit(writes: unknown[]): Promise<void> } }).store;
  const commit = store.commit.bind(store);
  let release: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (release = resolve));
  store.commit = async (writes) => {
    store.commit = commit;
    await held;
    return commit(writes);
  };
  return release;
}

/** A logger whose JSON lines land in `lines`, to check what was (and was not) logged. */
export function capturingLog(lines: string[]): Logger {
  return pino({ level: 'info' }, { write: (s: string) => void lines.push(s) });
}

export function token(secret: string, scope: string, opts: { sub?: string; tenant?: string; expiresIn?: string | number } = {}): Promise<string> {
  const claims: { sub: string; scope: string; tenant?: string } = { sub: opts.sub ?? 'u1', scope };
  if (opts.tenant !== undefined) claims.tenant = opts.tenant;
  return mintToken(secret, claims, opts.expiresIn ?? '1h');
}

let tenantSeq = 0;
/** A tenant no other test uses, so list assertions see only their own records. */
export function freshTenant(label: string): string {
  return `t-${label}-${process.pid}-${++tenantSeq}`;
}

export const ALL_SCOPES = 'orders:read orders:write products:read products:write';

// ---- the pure pipeline ----

export interface Answer {
  status: number;
  headers: Record<string, string>;
  /** The body bytes as sent (possibly compressed). */
  raw: Buffer;
  /** The body decoded per Content-Encoding, as text. */
  text: string;
  json<T = Record<string, unknown>>(): T;
}

export interface Call {
  method: string;
  path: string;
  query?: string;
  headers?: Record<string, string>;
  body?: Buffer | string | object;
  /** The caller's address; 127.0.0.1 unless a test needs callers apart. */
  remoteAddress?: string;
}

export function toRequest(c: Call): GatewayRequest {
  let body: Buffer | undefined;
  if (c.body === undefined) body = undefined;
  else if (Buffer.isBuffer(c.body)) body = c.body;
  else body = Buffer.from(typeof c.body === 'string' ? c.body : JSON.stringify(c.body));
  return { method: c.method, path: c.path, query: c.query ?? '', headers: c.headers ?? {}, body, remoteAddress: c.remoteAddress ?? '127.0.0.1' };
}

export function decode(raw: Buffer, coding: string | undefined): Buffer {
  if (coding === 'br') return brotliDecompressSync(raw);
  if (coding === 'gzip') return gunzipSync(raw);
  if (coding === undefined || coding === 'identity') return raw;
  throw new Error(`unexpected content-encoding ${coding}`);
}

export function answerOf(r: GatewayResponse): Answer {
  const raw = r.body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body);
  const text = decode(raw, r.headers['content-encoding']).toString('utf8');
  return {
    status: r.status,
    headers: r.headers,
    raw,
    text,
    json<T>() {
      return JSON.parse(text) as T;
    },
  };
}

// ---- problem bodies (CONTRACT §4) ----

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  traceId: string;
  errors?: { pointer?: string; parameter?: string; detail: string }[];
  [k: string]: unknown;
}

/** Asserts an RFC 9457 problem of this status and slug whose traceId equals the Trace-Id header. */
export function assertProblem(t: ExecutionContext, a: { status: number; headers: Record<string, string>; text: string }, status: number, slug: string): Problem {
  t.is(a.status, status, `expected ${status} ${slug}, got ${a.status}: ${a.text}`);
  t.regex(a.headers['content-type'] ?? '', /^application\/problem\+json\b/);
  const p = JSON.parse(a.text) as Problem;
  t.is(p.type, `/problems/${slug}`);
  t.is(typeof p.title, 'string');
  t.true(p.title.length > 0);
  t.is(p.status, status);
  t.is(typeof p.detail, 'string');
  t.true(p.detail.length > 0);
  t.is(typeof p.traceId, 'string');
  t.is(p.traceId as string | undefined, a.headers['trace-id'], 'traceId equals the Trace-Id header');
  return p;
}
