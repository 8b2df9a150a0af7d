// The tail of the pipeline: entity tags, conditional GET, serialization and compression.
// A strong ETag is the resource version plus a short hash of the variant (fields, expand,
// media type, content coding, API version), so a 304 costs no rendering (ARCHITECTURE "Hot
// paths"); a collection page's tag hashes its bytes.

import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { brotliCompress, brotliCompressSync, constants, gzip, gzipSync } from 'node:zlib';
import { promisify } from 'node:util';
import { ApiError } from '../common/errors.js';
import type { IfMatch } from '../proto/messages.js';
import type { Coding, MediaType } from './negotiate.js';
import { BoundedMap } from '../common/bounded-map.js';

const COMPRESS_MIN_BYTES = 1024;
const SYNC_COMPRESS_MAX_BYTES = 64 * 1024;
const BROTLI_OPTS = { params: { [constants.BROTLI_PARAM_QUALITY]: 4 } };
const brotliAsync = promisify(brotliCompress);
const gzipAsync = promisify(gzip);
/**
 * Large bodies compressed at once on the libuv pool, at most: one a core, up to the pool's four
 * threads. A brotli encoder holds megabytes of native memory while it runs, and the pool's
 * threads keep what they freed: unbounded, clients asking for large compressed pages and hanging
 * up at once kept thousands under way, and the process at 2.9 GB for good. Past the bound a body
 * goes as it is (identity), which every client reads.
 */
export const MAX_COMPRESSING = Math.max(1, Math.min(4, availableParallelism()));
let compressing = 0;

// Variant hashes by media type, then content coding, then variant: found without building the
// combined key (a GET asks for one on every request, and the three strings are already hashed).
const tagHashes = new Map<string, Map<string, Map<string, string>>>();
let tagHashCount = 0;

/** `"<version>-<variant hash>"`: strong, and different for every distinct byte sequence. */
export function versionTag(version: number, variant: string, media: MediaType, coding: Coding): string {
  let byCoding = tagHashes.get(media);
  if (byCoding === undefined) tagHashes.set(media, (byCoding = new Map()));
  let byVariant = byCoding.get(coding);
  if (byVariant === undefined) byCoding.set(coding, (byVariant = new Map()));
  let h = byVariant.get(variant);
  if (h === undefined) {
    h = createHash('sha1').update(`${variant}|${media}|${coding}`).digest('base64url').slice(0, 10);
    if (++tagHashCount > 10_000) {
      tagHashes.clear();
      tagHashCount = 0;
    }
    byVariant.set(variant, h);
  }
  return `"${version}-${h}"`;
}

/** A tag over a fingerprint that determines the bytes (ids and versions of a page, its links). */
export function fingerprintTag(fingerprint: string, media: MediaType, coding: Coding): string {
  return `"f-${createHash('sha1').update(fingerprint).update(`|${media}|${coding}`).digest('base64url').slice(0, 16)}"`;
}

// Renderings of versioned resources as JSON text, keyed by (resource, version, variant): a
// version never changes its bytes, so entries never go stale; they only age out. A single GET
// and a list page share them. Safe to lose (ARCHITECTURE property 4).
// Bounded by bytes, not entries (ARCHITECTURE property 7): a client cycling through fields and
// expand variants can only churn it. Large renderings are not kept at all.
// 8M characters hold the renderings of several thousand hot orders. At 32M the cache was still
// filling, and the process still growing, a minute into the soak (bench/soak.ts).
const RENDERINGS_BUDGET_CHARS = 8 * 1024 * 1024;
const RENDERING_MAX_CHARS = 16 * 1024;
const renderings = new BoundedMap<string, string>(RENDERINGS_BUDGET_CHARS);

// The last rendering of a record the store shares, on the record itself: a frozen record is one
// version of one resource, and lives only as long as the store's record cache keeps it. Found
// by identity, it costs no key to build or hash (a batch-get of 100 users looks up 100). Its
// UTF-8 bytes are kept too once asked for, so a batch answer is a copy of bytes, not an encoding.
const owned = new WeakMap<object, { variant: string; json: string; bytes?: Buffer }>();

/**
 * The JSON text of one version of a resource in one variant. `record`, when given, is the
 * record rendered; a frozen one (shared by the store, so never changed) also keeps its rendering.
 */
export function cachedRendering(key: string, version: number, variant: string, render: () => unknown, record?: object): string {
  const mine = record !== undefined && Object.isFrozen(record) ? record : undefined;
  if (mine !== undefined) {
    const own = owned.get(mine);
    if (own !== undefined && own.variant === variant) return own.json;
  }
  const k = `${key}|${version}|${variant}`;
  const hit = renderings.get(k);
  if (hit !== undefined) {
    if (mine !== undefined) owned.set(mine, { variant, json: hit });
    return hit;
  }
  const json = JSON.stringify(render());
  if (json.length <= RENDERING_MAX_CHARS) {
    if (mine !== undefined) owned.set(mine, { variant, json });
    renderings.set(k, json, json.length + k.length);
  }
  return json;
}

/** The UTF-8 bytes kept on `record` for this variant, if any (only a frozen record keeps them). */
function keptBytes(record: object, variant: string): Buffer | undefined {
  const own = owned.get(record);
  return own?.bytes !== undefined && own.variant === variant ? own.bytes : undefined;
}

/**
 * cachedRendering as an answer sends it. A record the store shares keeps its rendering's UTF-8
 * bytes, sent as they are, where text would be measured and encoded again on every answer (once
 * here, once more by uWS); those are looked for first, which needs no Object.isFrozen (a call
 * into the runtime, about 1% of a GET). Any other record's rendering is text.
 */
export function cachedRenderingToSend(key: string, version: number, variant: string, render: () => unknown, record: object | undefined): string | Buffer {
  if (record === undefined) return cachedRendering(key, version, variant, render);
  const kept = keptBytes(record, variant);
  if (kept !== undefined) return kept;
  return Object.isFrozen(record) ? renderedBytes(key, version, variant, render, record) : cachedRendering(key, version, variant, render, record);
}

/** cachedRendering as UTF-8 bytes: kept beside the text for a record the store shares. */
export function cachedRenderingBytes(key: string, version: number, variant: string, render: () => unknown, record: object): Buffer {
  return keptBytes(record, variant) ?? renderedBytes(key, version, variant, render, record);
}

/** The bytes of a rendering none are kept for yet, kept on `record` when its text is. */
function renderedBytes(key: string, version: number, variant: string, render: () => unknown, record: object): Buffer {
  const json = cachedRendering(key, version, variant, render, record);
  const kept = owned.get(record);
  if (kept === undefined || kept.variant !== variant) return Buffer.from(json);
  // Kept bytes get memory of their own: a small Buffer.from is a slice of an 8 KiB pool block,
  // and one kept slice would keep its whole block alive.
  const bytes = Buffer.allocUnsafeSlow(Buffer.byteLength(json));
  bytes.write(json);
  kept.bytes = bytes;
  return bytes;
}

/**
 * A tag from the rendered (uncompressed) bytes and the coding they are sent in: compression here
 * is deterministic, so the pair names one byte sequence, and the tag is known without compressing.
 */
export function contentTag(bytes: Buffer | string, media: MediaType, coding: Coding): string {
  return `"c-${createHash('sha1').update(bytes).update(`|${media}|${coding}`).digest('base64url').slice(0, 16)}"`;
}

function splitTags(header: string): string[] {
  return header.split(',').map((t) => t.trim()).filter(Boolean);
}

/** A tag as weak comparison (RFC 9110 §8.8.3.2) sees it: W/"x" is "x". */
function weakened(tag: string): string {
  return tag.startsWith('W/') ? tag.slice(2) : tag;
}

/** RFC 9110 §13.1.2: weak comparison, so W/"x" matches "x". */
export function noneMatch(header: string | undefined, tag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return splitTags(header).some((t) => weakened(t) === tag);
}

/** The versions named by the header's tags that are ours, each compared as `asTag` makes it; `*` alone matches any version. */
function versionsNamed(header: string | undefined, asTag: (t: string) => string): IfMatch {
  if (header === undefined) return undefined;
  if (header.trim() === '*') return '*';
  const versions: number[] = [];
  for (const t of splitTags(header)) {
    // Versions as this service writes them: no leading zero, so "01-…" names nothing of ours.
    const m = /^"(0|[1-9]\d{0,14})-[A-Za-z0-9_-]+"$/.exec(asTag(t));
    if (m) versions.push(Number(m[1]));
  }
  // No tag of ours: nothing can match (a write under If-Match is then refused with 412).
  return versions;
}

/**
 * If-Match on a read (RFC 9110 §13.1.1, §13.2.2 step 1), evaluated before If-None-Match: it
 * passes with `*` (the representation exists), or when a listed tag names the representation's
 * version, as for a write (`version`), or is its tag exactly (a page's tag, strong comparison).
 * A failure is 412 and no body.
 */
export function checkReadIfMatch(header: string | undefined, ifMatch: IfMatch, tag: string | undefined, version: number | undefined): void {
  if (ifMatch === undefined || ifMatch === '*') return;
  if (version !== undefined ? ifMatch.includes(version) : tag !== undefined && splitTags(header!).includes(tag)) return;
  throw new ApiError('precondition-failed', 'The resource does not match the entity tag in If-Match.');
}

/** If-Match (RFC 9110 §13.1.1) uses strong comparison: the versions named by our tags. */
export function parseIfMatch(header: string | undefined): IfMatch {
  return versionsNamed(header, (t) => t);
}

/**
 * If-None-Match on a write (RFC 9110 §13.1.2) uses weak comparison: W/"3-x" names version 3 as
 * "3-x" does. A tag that is not ours names no version, so it never matches.
 */
export function parseIfNoneMatch(header: string | undefined): IfMatch {
  return versionsNamed(header, weakened);
}

export interface Encoded {
  bytes: Buffer | string;
  coding: Coding;
  /** Sent as it is, though worth compressing: the compressions under way were at their bound. */
  uncompressed?: true;
}

/** The coding a body goes in when `coding` is asked for: none for a body too small to be worth it. */
export function codingOf(body: string | Buffer, coding: Coding): Coding {
  return coding === 'identity' || Buffer.byteLength(body) < COMPRESS_MIN_BYTES ? 'identity' : coding;
}

/** The body as sent: compressed when it is worth it. Only a large body waits (on the libuv pool). */
export function encodeBody(body: string | Buffer, coding: Coding): Encoded | Promise<Encoded> {
  if (codingOf(body, coding) === 'identity') return { bytes: body, coding: 'identity' };
  if (body.length <= SYNC_COMPRESS_MAX_BYTES) {
    return { bytes: coding === 'br' ? brotliCompressSync(body, BROTLI_OPTS) : gzipSync(body), coding };
  }
  // Large bodies compress on the libuv pool so one big page does not stall every other request.
  if (compressing >= MAX_COMPRESSING) return { bytes: body, coding: 'identity', uncompressed: true };
  compressing++;
  return (coding === 'br' ? brotliAsync(body, BROTLI_OPTS) : gzipAsync(body)).then(
    (bytes) => {
      compressing--;
      return { bytes, coding };
    },
    (err: unknown) => {
      compressing--;
      throw err;
    },
  );
}
