// Query-parameter conventions shared by every collection (CONTRACT §2): limit, keyset cursor,
// sort over an allow-list, sparse fields and expansion over allow-lists. Bad values are 400
// `invalid-parameter` naming the parameter.

import { Buffer } from 'node:buffer';
import { ApiError, type FieldError } from '../common/errors.js';
import type { ListPage, ListQuery, Query, SortDir } from '../proto/messages.js';
import type { QueryParam } from './route.js';

export const DEFAULT_LIMIT = 20;
export const MAX_LIMIT = 100;

export function invalidParameter(parameter: string, detail: string): ApiError {
  return new ApiError('invalid-parameter', `The '${parameter}' parameter is invalid: ${detail}.`, { errors: [{ parameter, detail }] });
}

/**
 * Longest cursor accepted. The longest this service issues holds a product name of 200 code
 * points at 4 UTF-8 bytes each, about 1,150 characters once base64url-encoded.
 */
export const MAX_CURSOR_LENGTH = 2048;
const CURSOR = /^[A-Za-z0-9_-]+$/;

export const LIST_PARAMS: Record<string, QueryParam> = {
  limit: { description: `Page size, 1 to ${MAX_LIMIT} (default ${DEFAULT_LIMIT}).`, schema: { type: 'integer', minimum: 1, maximum: MAX_LIMIT } },
  cursor: {
    description: 'Opaque position from a previous page\'s `next` link.',
    schema: { type: 'string', maxLength: MAX_CURSOR_LENGTH, pattern: CURSOR.source },
  },
};

/**
 * Longest comma-separated list of `names` accepted: each named once, a space after each comma,
 * and `kept` too when given (a name always kept that may be named, as `_links` in `fields`).
 */
function listMaxLength(names: readonly string[], kept?: string): number {
  return names.join(', ').length + (kept === undefined ? 0 : kept.length + ', '.length);
}

/** What `fields` may name besides a resource's members: it always stays. */
const KEPT_FIELD = '_links';

export function fieldsParam(names: readonly string[]): QueryParam {
  return {
    description: `Comma-separated members to keep (id and _links always stay): ${names.join(', ')}.`,
    schema: { type: 'string', maxLength: listMaxLength(names, KEPT_FIELD) },
  };
}

export function expandParam(paths: readonly string[]): QueryParam {
  return { description: `Comma-separated relations to embed: ${paths.join(', ')}.`, schema: { type: 'string', maxLength: listMaxLength(paths) } };
}

export function sortParam(sorts: readonly string[], dflt: string): QueryParam {
  return {
    description: `One of ${sorts.map((s) => `${s}, -${s}`).join(', ')} (default ${dflt}); a leading minus sorts descending.`,
    schema: { type: 'string', enum: sorts.flatMap((s) => [s, `-${s}`]) },
  };
}

export function parseLimit(query: URLSearchParams): number {
  const raw = query.get('limit');
  if (raw === null) return DEFAULT_LIMIT;
  if (!/^\d{1,3}$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_LIMIT) throw invalidParameter('limit', `must be an integer from 1 to ${MAX_LIMIT}`);
  return Number(raw);
}

export function parseSort<S extends string>(query: URLSearchParams, allowed: readonly S[], dflt: string): { sort: S; dir: SortDir } {
  const raw = query.get('sort') ?? dflt;
  const desc = raw.startsWith('-');
  const name = desc ? raw.slice(1) : raw;
  if (!(allowed as readonly string[]).includes(name)) throw invalidParameter('sort', `must be one of ${allowed.join(', ')}, optionally with a leading minus`);
  return { sort: name as S, dir: desc ? 'desc' : 'asc' };
}

/** `kept`: names always kept, which may be named and change nothing (`_links` in `fields`). */
function parseList(query: URLSearchParams, parameter: string, allowed: readonly string[], noun: string, kept?: string): Set<string> {
  const raw = query.get(parameter);
  const out = new Set<string>();
  if (raw === null) return out;
  if (raw.length > listMaxLength(allowed, kept)) throw invalidParameter(parameter, `is longer than naming every ${noun} once`);
  const unknown: string[] = [];
  for (const name of raw.split(',')) {
    const n = name.trim();
    if (n === kept) continue;
    if (allowed.includes(n)) out.add(n);
    else if (!unknown.includes(n)) unknown.push(n);
  }
  // Every unknown name at once (the list's length is bounded above, so this one is too).
  if (unknown.length) throw invalidParameter(parameter, `unknown ${noun}${unknown.length > 1 ? 's' : ''} ${unknown.map((n) => `'${n.slice(0, 64)}'`).join(', ')}`);
  return out;
}

/**
 * Runs every parser of query values, and answers all their failures together (SPEC §7.1 rule 4):
 * `?limit=0&sort=nope` names both parameters, not only the first one met.
 */
export function parseAll<T extends readonly unknown[]>(...parsers: { [K in keyof T]: () => T[K] }): T {
  const out: unknown[] = [];
  const failed: ApiError[] = [];
  for (const parse of parsers as readonly (() => unknown)[]) {
    try {
      out.push(parse());
    } catch (err) {
      if (!(err instanceof ApiError) || err.slug !== 'invalid-parameter') throw err;
      failed.push(err);
      out.push(undefined);
    }
  }
  if (failed.length === 1) throw failed[0]!;
  if (failed.length > 1) {
    const errors: FieldError[] = failed.flatMap((e) => e.extra.errors ?? []);
    throw new ApiError('invalid-parameter', `The query has ${errors.length} invalid parameters.`, { errors });
  }
  return out as unknown as T;
}

/** undefined: no `fields` parameter, keep everything. */
export function parseFields(query: URLSearchParams, allowed: readonly string[]): Set<string> | undefined {
  return query.has('fields') ? parseList(query, 'fields', allowed, 'field', KEPT_FIELD) : undefined;
}

export function parseExpand(query: URLSearchParams, allowed: readonly string[]): Set<string> {
  const set = parseList(query, 'expand', allowed, 'expansion');
  if (set.size === 0) return set;
  // Expanding a nested path implies its parent (items.product needs items).
  for (const p of [...set]) {
    const parent = p.split('.').slice(0, -1).join('.');
    if (parent) set.add(parent);
  }
  return set;
}

/** The variant string that, with the version, makes a strong per-representation ETag. */
export function variantOf(fields: Set<string> | undefined, expand: Set<string>, extra = ''): string {
  // The usual read asks for neither: no copies, sorts or joins of empty sets.
  if (fields === undefined && expand.size === 0) return `f=*;e=;${extra}`;
  return `f=${fields ? [...fields].sort().join(',') : '*'};e=${[...expand].sort().join(',')};${extra}`;
}

/** Keeps only the named members; id and _links always stay, and so do expanded members. */
export function project<T extends Record<string, unknown>>(rep: T, fields: Set<string> | undefined, expand: Set<string>): Partial<T> {
  if (!fields) return rep;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rep)) {
    if (k === 'id' || k === '_links' || fields.has(k) || expand.has(k)) out[k] = v;
  }
  return out as Partial<T>;
}

// ---- keyset cursors: the collection, filter and sort they belong to, and the last (value, id) served ----

interface CursorBody {
  /** The collection (e.g. `orders`, `product`); absent in cursors issued before it was bound. */
  c?: string;
  f: string;
  s: string;
  v: number | string;
  i: string;
}

export function encodeCursor(collection: string, filterKey: string, sortKey: string, v: number | string, id: string): string {
  return Buffer.from(JSON.stringify({ c: collection, f: filterKey, s: sortKey, v, i: id } satisfies CursorBody)).toString('base64url');
}

/**
 * The keyset position in `cursor`, checked against the collection, filter and sort it must
 * belong to and the type of the sort's values: cursors are not signed, and a forged one must be
 * a 400, not a page from somewhere else in the index. A cursor without a collection (issued
 * before cursors named theirs) is taken where its filter and sort fit, so a client paging
 * across an upgrade goes on.
 */
export function decodeCursor(query: URLSearchParams, collection: string, filterKey: string, sortKey: string, valueType: 'number' | 'string'): ListQuery['after'] {
  const raw = query.get('cursor');
  if (raw === null) return undefined;
  let c: unknown;
  try {
    if (raw.length > MAX_CURSOR_LENGTH || !CURSOR.test(raw)) throw new Error('shape');
    c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    throw invalidParameter('cursor', 'is not a cursor this service issued');
  }
  const body = c as Partial<CursorBody> | null;
  if (!body || typeof body.i !== 'string' || (typeof body.v !== 'number' && typeof body.v !== 'string') || typeof body.f !== 'string' || typeof body.s !== 'string') {
    throw invalidParameter('cursor', 'is not a cursor this service issued');
  }
  if (body.c !== undefined && body.c !== collection) throw invalidParameter('cursor', 'was issued for another collection');
  if (body.f !== filterKey || body.s !== sortKey) throw invalidParameter('cursor', 'was issued for other filters or another sort');
  if (typeof body.v !== valueType || (typeof body.v === 'number' && !Number.isSafeInteger(body.v))) {
    throw invalidParameter('cursor', 'is not a cursor this service issued');
  }
  return { v: body.v, id: body.i };
}

type Row<T> = { v: number | string; record: T };

/**
 * Merges the owners' slices (each already in index order, each up to limit+1 long) into one
 * page; there is more when any slice had more than the page takes. A slice its owner cut short
 * to fit its reply (ListPage.cut) ends the page at its last row (`cut`): that owner may hold rows
 * between it and the other slices' later rows, which a query starting there gets.
 */
export function mergePages<T extends { id: string }>(pages: ListPage<T>[], dir: SortDir, limit: number): { rows: Row<T>[]; hasMore: boolean; cut: boolean } {
  const all = pages.flatMap((p) => p.rows);
  if (pages.length > 1) {
    const sign = dir === 'asc' ? 1 : -1;
    all.sort((a, b) => sign * (compare(a.v, b.v) || compare(a.record.id, b.record.id)));
  }
  let end = Math.min(limit, all.length);
  let cut = false;
  for (const p of pages) {
    const last = p.cut ? p.rows[p.rows.length - 1] : undefined;
    if (!last) continue;
    const at = all.indexOf(last) + 1;
    if (at <= end) {
      end = at;
      cut = true;
    }
  }
  return { rows: all.slice(0, end), hasMore: cut || all.length > limit, cut };
}

/** The kinds of query answered with list pages. */
type ListKind = Extract<Query, { query: ListQuery }>['kind'];

/**
 * One page of a list from every owner (mergePages). Where an owner cut its slice to fit its reply,
 * the owners are asked again from the cut on, until the page holds `limit` rows or there are no
 * more: a page is short only when it is the last, in cluster mode as in embedded mode.
 */
export async function gatherPage<T extends { id: string }>(bus: { gather(q: Query): Promise<unknown[]> }, kind: ListKind, query: ListQuery): Promise<{ rows: Row<T>[]; hasMore: boolean }> {
  const rows: Row<T>[] = [];
  let q = query;
  for (;;) {
    // The kind decides the record type; the caller names both, so this cast is where they meet.
    const pages = (await bus.gather({ kind, query: q } as Query)) as ListPage<T>[];
    const merged = mergePages(pages, q.dir, q.limit);
    rows.push(...merged.rows);
    const last = rows[rows.length - 1];
    if (!merged.cut || !last || rows.length >= query.limit) return { rows, hasMore: merged.hasMore };
    q = { ...q, after: { v: last.v, id: last.record.id }, limit: query.limit - rows.length };
  }
}

// The same order LMDB's ordered-binary keys use: numbers before strings, strings by UTF-8 bytes.
function compare(a: number | string, b: number | string): number {
  if (typeof a === 'string' && typeof b === 'string') return compareCodePoints(a, b);
  if (typeof a === typeof b) return a < b ? -1 : a > b ? 1 : 0;
  return typeof a === 'number' ? -1 : 1;
}

/**
 * Code point order, which is UTF-8 byte order. JS `<` compares UTF-16 code units, which puts
 * U+E000-U+FFFF (fullwidth forms, say) after astral characters (emoji): merging node pages in
 * that order would disagree with each node's index and make keyset pages skip or repeat rows.
 */
function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // Surrogates (D800-DFFF) stand for code points above FFFF: move them above E000-FFFF.
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    }
    return x < y ? -1 : 1;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

/**
 * A page as JSON text from its members' cached renderings, and the fingerprint that determines
 * those bytes: each member's id and version under the variant, hasMore, and the links.
 */
export function pageText(members: string[], hasMore: boolean, links: Record<string, { href: string }>): string {
  return `{"data":[${members.join(',')}],"hasMore":${hasMore},"_links":${JSON.stringify(links)}}`;
}

export function pageFingerprint(records: { id: string; version: number }[], variant: string, hasMore: boolean, links: Record<string, { href: string }>): string {
  let fp = `${variant}|${hasMore}|${JSON.stringify(links)}|`;
  for (const r of records) fp += `${r.id}@${r.version},`;
  return fp;
}

/** A page's `self` link, and `next` when there is a cursor to continue from. */
export function pageLinks(path: string, query: URLSearchParams, nextCursor: string | undefined): Record<string, { href: string }> {
  const links: Record<string, { href: string }> = { self: { href: pageHref(path, query, query.get('cursor') ?? undefined) } };
  if (nextCursor !== undefined) links.next = { href: pageHref(path, query, nextCursor) };
  return links;
}

/** Rebuilds the request's query string with a new cursor, keeping every other parameter. */
export function pageHref(path: string, query: URLSearchParams, cursor: string | undefined): string {
  const q = new URLSearchParams(query);
  if (cursor === undefined) q.delete('cursor');
  else q.set('cursor', cursor);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}
