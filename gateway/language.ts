// Accept-Language (RFC 9110 §12.5.4) with the matching schemes of RFC 4647: basic filtering
// (§3.3.1: the range `de` matches `de-CH`) and lookup (§3.4: the range `de-DE` falls back to
// `de`). Ranges are tried by q-value, highest first, ties in header order; q=0 excludes what
// the range matches. When nothing fits, the caller's default language is served (CONTRACT §6),
// not 406: a client always gets the article, and Content-Language says which text it got.

/** BCP 47 language tag (RFC 5646 §2.1), well-formed enough to index: language, script, region, variants. */
export const LANGUAGE_TAG = '^[A-Za-z]{2,3}(-[A-Za-z]{4})?(-(?:[A-Za-z]{2}|[0-9]{3}))?(-(?:[A-Za-z0-9]{5,8}|[0-9][A-Za-z0-9]{3})){0,2}$';
export const LANGUAGE_TAG_MAX = 35;

// A header with more ranges than this is read up to here: no client lists more languages.
const MAX_RANGES = 32;
const RANGE = /^(?:\*|[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*)$/;
const QVALUE = /^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$/;

/** RFC 5646 §2.1.1 case conventions: `de-CH`, `zh-Hant-TW`, `sr-Latn-RS`. */
export function canonicalLanguage(tag: string): string {
  return tag
    .split('-')
    .map((part, i) => {
      if (i === 0) return part.toLowerCase();
      if (part.length === 4 && /^[A-Za-z]+$/.test(part)) return part[0]!.toUpperCase() + part.slice(1).toLowerCase();
      if (part.length === 2 || (part.length === 3 && /^\d+$/.test(part))) return part.toUpperCase();
      return part.toLowerCase();
    })
    .join('-');
}

interface Range {
  range: string;
  q: number;
}

/** A range asked for, with lookup's truncations of it. */
interface Wanted extends Range {
  lookup: readonly string[];
}

function parse(header: string): Range[] {
  const out: Range[] = [];
  for (const entry of header.split(',').slice(0, MAX_RANGES)) {
    const [rangePart, ...params] = entry.split(';');
    const range = rangePart!.trim().toLowerCase();
    if (!RANGE.test(range)) continue;
    let q = 1;
    let valid = true;
    for (const p of params) {
      const [name, value] = p.split('=').map((s) => s.trim());
      if (name?.toLowerCase() !== 'q') continue;
      if (value === undefined || !QVALUE.test(value)) valid = false;
      else q = Number(value);
    }
    // A malformed entry is skipped rather than failing the request (RFC 9110 §12.5.4 lets a server ignore the header).
    if (valid) out.push({ range, q });
  }
  return out;
}

/** Basic filtering: the range is the tag, or a prefix of it ending at a subtag boundary. */
function matches(range: string, tag: string): boolean {
  const t = tag.toLowerCase();
  return t === range || t.startsWith(`${range}-`);
}

/** The best of `available` for one range: an exact match, else a more specific tag, else lookup's truncation. */
function pick(range: Wanted, available: readonly string[]): string | undefined {
  const exact = available.find((a) => a.toLowerCase() === range.range);
  if (exact) return exact;
  const narrower = available.filter((a) => matches(range.range, a)).sort();
  if (narrower[0]) return narrower[0];
  for (const shorter of range.lookup) {
    const hit = available.find((a) => a.toLowerCase() === shorter);
    if (hit) return hit;
  }
  return undefined;
}

/**
 * Lookup's truncations of a range (RFC 4647 §3.4), longest first, from the first one short enough
 * to be a tag: lengths are kept as subtags are dropped and only those prefixes are joined, so a
 * range of many subtags costs its length, once per request, not its length squared per article.
 */
function truncations(range: string): string[] {
  const out: string[] = [];
  const parts = range.split('-');
  let length = range.length;
  while (parts.length > 1) {
    length -= parts.pop()!.length + 1;
    // A single-letter subtag (an extension or private-use prefix) goes with what follows it.
    if (parts.length > 1 && parts[parts.length - 1]!.length === 1) length -= parts.pop()!.length + 1;
    if (length <= LANGUAGE_TAG_MAX) out.push(parts.join('-'));
  }
  return out;
}

/** An Accept-Language header as read once per request: the ranges it excludes, and those it asks for, best first. */
export interface AcceptedLanguages {
  excluded: readonly Range[];
  wanted: readonly Wanted[];
}

/** Reads the header; undefined when there is none (every article is served in its default language). */
export function acceptedLanguages(header: string | undefined): AcceptedLanguages | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  const ranges = parse(header);
  return {
    excluded: ranges.filter((r) => r.q === 0 && r.range !== '*'),
    wanted: ranges
      .filter((r) => r.q > 0)
      .sort((a, b) => b.q - a.q)
      .map((r) => ({ ...r, lookup: r.range === '*' ? [] : truncations(r.range) })),
  };
}

/** The language of `available` to serve for what the request accepts, or `fallback`. */
export function negotiateLanguage(accepted: AcceptedLanguages | undefined, available: readonly string[], fallback: string): string {
  if (accepted === undefined) return fallback;
  const allowed = accepted.excluded.length ? available.filter((a) => !accepted.excluded.some((r) => matches(r.range, a))) : available;
  for (const wanted of accepted.wanted) {
    if (wanted.range === '*') {
      if (allowed.includes(fallback)) return fallback;
      if (allowed[0]) return allowed[0];
      continue;
    }
    const hit = pick(wanted, allowed);
    if (hit) return hit;
  }
  return fallback;
}
