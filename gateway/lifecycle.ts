// The endpoint deprecation lifecycle (SPEC §3.4, §9.3; CONTRACT §9). Entries name a route
// template and method; each is compiled once into its header values, so the per-request check
// is one Map lookup by the matched route (no string building unless the successor names path
// parameters) and a comparison of the clock against the brownout windows.
//
//   deprecated  → Deprecation: @<unix> (RFC 9745) + Link rel="deprecation" (+ rel="successor-version"),
//                 and Sunset once the entry has a date (SPEC §9.3)
//   sunsetting  → also Sunset: <HTTP-date> (RFC 8594), always: its date is required
//   brownout    → a sunsetting or deprecated entry inside one of its windows: 410 `gone`
//   retired     → 410 `gone`, naming the successor, with the same headers

import { ApiError } from '../common/errors.js';
import type { Principal } from './auth.js';
import type { RouteDef } from './route.js';
import type { Method } from './router.js';

export type LifecycleState = 'deprecated' | 'sunsetting' | 'retired';
/** What a caller meets now: the entry's state, or a brownout in progress. */
export type EffectiveState = LifecycleState | 'brownout';

export interface Brownout {
  start: string;
  end: string;
}

/** One entry of DEPRECATIONS_FILE, as written (CONTRACT §9). */
export interface LifecycleEntry {
  method: Method;
  path: string;
  state: LifecycleState;
  deprecatedAt: string;
  sunsetAt?: string;
  successor?: string;
  guide?: string;
  brownouts?: Brownout[];
}

/** A refused entry: the message names the entry (index, method and path) and the field. */
export class LifecycleError extends Error {}

const METHODS: readonly string[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];
const STATES: readonly string[] = ['deprecated', 'sunsetting', 'retired'];
const FIELDS = new Set(['method', 'path', 'state', 'deprecatedAt', 'sunsetAt', 'successor', 'guide', 'brownouts']);
// RFC 3339 date-time with a zone; Date.parse alone accepts too much ("2026", "May 1").
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))$/i;
// A link target: an absolute http(s) URI or an absolute path, in printable ASCII (a URI
// reference is ASCII, RFC 3986; the Link header carries it as is) without quotes or angle brackets.
const LINK_TARGET = /^(https?:\/\/[!#-;=?-~]+|\/[!#-;=?-~]*)$/;
const MAX_BROWNOUTS = 100;
/** Route tags of the documents that lead callers to the schedule and the guide. */
const SIGNPOSTS = new Set(['discovery', 'lifecycle']);
const MAX_ENTRIES = 1000;

/**
 * Whether the fields name a real instant (RFC 3339 §5.7): Date.parse rolls 2026-02-30 over to
 * March and takes hour 24. A leap second (:60) is not taken either.
 */
function realDateTime(m: RegExpExecArray): boolean {
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const zoneOk = m[9] === undefined || (Number(m[9]) <= 23 && Number(m[10]) <= 59);
  return realDay(year, month, day) && hour <= 23 && minute <= 59 && second <= 59 && zoneOk;
}

/** Whether the numbers name a day of the (proleptic Gregorian) calendar: no 2026-02-31, no month 13. */
export function realDay(year: number, month: number, day: number): boolean {
  if (month < 1 || month > 12 || day < 1) return false;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 ? (leap ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
  return day <= days;
}

function timeOf(where: string, field: string, v: unknown): number {
  const m = typeof v === 'string' ? RFC3339.exec(v) : null;
  if (typeof v !== 'string' || !m || !realDateTime(m) || Number.isNaN(Date.parse(v))) {
    throw new LifecycleError(`${where}: ${field} must be an RFC 3339 date-time such as 2026-05-01T00:00:00Z, got ${JSON.stringify(v)}`);
  }
  return Date.parse(v);
}

function linkOf(where: string, field: string, v: unknown): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || v.length > 2000 || !LINK_TARGET.test(v)) {
    throw new LifecycleError(`${where}: ${field} must be an absolute path or an http(s) URL in ASCII (percent-encode the rest), got ${JSON.stringify(v)}`);
  }
  return v;
}

/**
 * Checks a whole file's worth of entries against the routes the service has; the first problem
 * is thrown as a LifecycleError naming the entry and the field.
 */
export function parseEntries(raw: unknown, routes: readonly RouteDef[]): LifecycleEntry[] {
  const list = Array.isArray(raw) ? raw : raw !== null && typeof raw === 'object' && Array.isArray((raw as { entries?: unknown }).entries) ? (raw as { entries: unknown[] }).entries : undefined;
  if (!list) throw new LifecycleError('the lifecycle file must hold a JSON array of entries (or { "entries": [...] })');
  if (list.length > MAX_ENTRIES) throw new LifecycleError(`at most ${MAX_ENTRIES} entries, got ${list.length}`);
  const known = new Map(routes.map((r) => [`${r.method} ${r.path}`, r]));
  const seen = new Set<string>();
  return list.map((e: unknown, i) => {
    let where = `entry ${i}`;
    if (e === null || typeof e !== 'object' || Array.isArray(e)) throw new LifecycleError(`${where}: must be an object`);
    const o = e as Record<string, unknown>;
    if (typeof o.method !== 'string' || !METHODS.includes(o.method)) throw new LifecycleError(`${where}: method must be one of ${METHODS.join(', ')}, got ${JSON.stringify(o.method)}`);
    if (typeof o.path !== 'string') throw new LifecycleError(`${where}: path must be a route template such as "/v1/orders/{orderId}"`);
    where = `entry ${i} (${o.method} ${o.path})`;
    for (const k of Object.keys(o)) if (!FIELDS.has(k)) throw new LifecycleError(`${where}: unknown field '${k}'`);
    if (!known.has(`${o.method} ${o.path}`)) throw new LifecycleError(`${where}: path names no ${o.method} route of this service`);
    if (seen.has(`${o.method} ${o.path}`)) throw new LifecycleError(`${where}: a second entry for the same route`);
    seen.add(`${o.method} ${o.path}`);
    if (typeof o.state !== 'string' || !STATES.includes(o.state)) throw new LifecycleError(`${where}: state must be one of ${STATES.join(', ')}, got ${JSON.stringify(o.state)}`);
    const deprecatedAt = timeOf(where, 'deprecatedAt', o.deprecatedAt);
    if (o.sunsetAt !== undefined) {
      const sunsetAt = timeOf(where, 'sunsetAt', o.sunsetAt);
      if (sunsetAt < deprecatedAt) throw new LifecycleError(`${where}: sunsetAt must not be before deprecatedAt`);
    } else if (o.state === 'sunsetting') {
      throw new LifecycleError(`${where}: sunsetAt is required for state sunsetting`);
    }
    linkOf(where, 'successor', o.successor);
    linkOf(where, 'guide', o.guide);
    // The documents a client finds the API, the schedule and the migration guide through must
    // keep answering, or the 410s would point at pages that answer 410 too. (A missing successor
    // is not refused here: files written before it was required hold such entries; see
    // unnamedSuccessor and LifecycleRegistry.replace.)
    const answersGone = o.state === 'retired' || (Array.isArray(o.brownouts) && o.brownouts.length > 0);
    if (answersGone && SIGNPOSTS.has(known.get(`${o.method} ${o.path}`)?.tag ?? '')) {
      throw new LifecycleError(`${where}: the discovery documents and the schedule may be deprecated, never retired or browned out`);
    }
    if (o.brownouts !== undefined) {
      if (!Array.isArray(o.brownouts) || o.brownouts.length > MAX_BROWNOUTS) throw new LifecycleError(`${where}: brownouts must be an array of at most ${MAX_BROWNOUTS} { start, end } windows`);
      o.brownouts.forEach((b: unknown, j) => {
        const at = `${where}: brownouts[${j}]`;
        if (b === null || typeof b !== 'object') throw new LifecycleError(`${at} must be an object { start, end }`);
        const w = b as Record<string, unknown>;
        for (const k of Object.keys(w)) if (k !== 'start' && k !== 'end') throw new LifecycleError(`${at}: unknown field '${k}'`);
        if (timeOf(at, 'end', w.end) <= timeOf(at, 'start', w.start)) throw new LifecycleError(`${at}: end must be after start`);
      });
    }
    const entry: LifecycleEntry = { method: o.method as Method, path: o.path, state: o.state as LifecycleState, deprecatedAt: o.deprecatedAt as string };
    if (o.sunsetAt !== undefined) entry.sunsetAt = o.sunsetAt as string;
    if (o.successor !== undefined) entry.successor = o.successor as string;
    if (o.guide !== undefined) entry.guide = o.guide as string;
    if (o.brownouts !== undefined) entry.brownouts = (o.brownouts as Brownout[]).map((b) => ({ start: b.start, end: b.end }));
    return entry;
  });
}

/**
 * Why the entry needs a successor it does not name: a 410 names the successor (SPEC §3.4, §7.2;
 * CONTRACT §9), and without one leaves callers nowhere to go. Only a retired entry or one with a
 * brownout window not yet over answers 410; a window that has ended needs none.
 */
export function unnamedSuccessor(entry: LifecycleEntry, now: number): string | undefined {
  if (entry.successor !== undefined) return undefined;
  if (entry.state === 'retired') return 'state retired';
  return entry.brownouts?.some((b) => Date.parse(b.end) > now) ? 'brownouts' : undefined;
}

/** An entry ready for the hot path. */
export interface Compiled {
  entry: LifecycleEntry;
  /** `METHOD path`: what usage is counted under. */
  key: string;
  /** The answer for a live state when Link does not depend on the request: no allocation per request. */
  fixed: LifecycleCheck;
  /** The Link value when the successor has no path parameters to fill. */
  link: string | undefined;
  /** The successor template split on its parameters, when it has some. */
  successorParts: string[] | undefined;
  /** What goes before the filled-in successor in Link (the guide's link, if any). */
  linkPrefix: string;
  brownouts: [number, number][];
}

function compile(entry: LifecycleEntry): Compiled {
  const deprecation = `@${Math.floor(Date.parse(entry.deprecatedAt) / 1000)}`;
  // Sunset is sent whenever a date is set, in every state (SPEC §9.3: a deprecated endpoint
  // sends Deprecation, Sunset and Link on every answer), as GET /v1/deprecations publishes it.
  const sunset = entry.sunsetAt !== undefined ? new Date(Date.parse(entry.sunsetAt)).toUTCString() : undefined;
  const successorParts = entry.successor?.includes('{') ? entry.successor.split(/\{(\w+)\}/) : undefined;
  // Every non-active route links rel="deprecation": to its guide; or else, for a v1 route, to the
  // v1 → v2 migration guide, and for any other to the schedule.
  const guide = entry.guide ?? (entry.path.startsWith('/v1/') ? MIGRATION_GUIDE : SCHEDULE);
  const link = successorParts ? undefined : linkValue(guide, entry.successor);
  return {
    entry,
    key: `${entry.method} ${entry.path}`,
    fixed: { deprecation, sunset, link, gone: undefined },
    link,
    successorParts,
    linkPrefix: `<${guide}>; rel="deprecation", <`,
    brownouts: (entry.brownouts ?? []).map((b) => [Date.parse(b.start), Date.parse(b.end)]),
  };
}

function linkValue(guide: string, successor: string | undefined): string {
  return successor === undefined ? `<${guide}>; rel="deprecation"` : `<${guide}>; rel="deprecation", <${successor}>; rel="successor-version"`;
}

/** Where rel="deprecation" points for an entry that names no guide (see compile). */
const MIGRATION_GUIDE = '/docs/migration-v1-v2';
const SCHEDULE = '/v1/deprecations';

/** The effective state at `now`: a brownout window turns a live entry into 410s for its length. */
export function stateAt(c: Compiled, now: number): EffectiveState {
  if (c.entry.state === 'retired') return 'retired';
  for (const [start, end] of c.brownouts) if (now >= start && now < end) return 'brownout';
  return c.entry.state;
}

/** What the pipeline does for one request on a non-active route. */
export interface LifecycleCheck {
  // Three named members, not a header map: the pipeline copies them onto every answer, and a
  // fixed shape keeps that (and this object) cheap on the hot path.
  deprecation: string;
  sunset: string | undefined;
  link: string | undefined;
  /** Set in a brownout and once retired: the 410 to answer instead of running the route. */
  gone: ApiError | undefined;
}

/** Counts calls to non-active routes (gateway/usage.ts). */
export interface UsageSink {
  count(key: string, principal: string, now: number): void;
}

export class LifecycleRegistry {
  private byRoute = new Map<RouteDef, Compiled>();
  private current: LifecycleEntry[] = [];
  private routes: readonly RouteDef[] = [];
  private version = 0;

  constructor(
    readonly now: () => number = Date.now,
    private usage?: UsageSink,
  ) {}

  /** The routes entries are checked against and looked up by; call before `replace`. */
  bind(routes: readonly RouteDef[]): void {
    this.routes = routes;
    this.replace(this.current);
  }

  countInto(usage: UsageSink): void {
    this.usage = usage;
  }

  /**
   * Validates and swaps in a whole new set of entries; throws LifecycleError and keeps the old set.
   * `changed` (`METHOD path`) is an entry being changed now, which must name its successor when
   * it answers 410; any other entry that does not is taken (an older file may hold it) and
   * returned, `METHOD path: why`, for the caller to warn about.
   */
  replace(raw: unknown, changed?: string): string[] {
    const entries = parseEntries(raw, this.routes);
    const now = this.now();
    const unnamed: string[] = [];
    entries.forEach((e, i) => {
      const why = unnamedSuccessor(e, now);
      if (!why) return;
      const key = `${e.method} ${e.path}`;
      if (key === changed) throw new LifecycleError(`entry ${i} (${key}): successor is required with ${why}, which answer 410 naming it`);
      unnamed.push(`${key}: ${why}`);
    });
    const byKey = new Map(entries.map((e) => [`${e.method} ${e.path}`, compile(e)]));
    const byRoute = new Map<RouteDef, Compiled>();
    for (const r of this.routes) {
      const c = byKey.get(`${r.method} ${r.path}`);
      if (c) byRoute.set(r, c);
    }
    this.byRoute = byRoute;
    this.current = entries;
    this.version++;
    return unnamed;
  }

  entries(): LifecycleEntry[] {
    return this.current.map((e) => structuredClone(e));
  }

  /** Bumped on every change; a cached rendering of the schedule is keyed on it. */
  get revision(): number {
    return this.version;
  }

  compiled(): Compiled[] {
    return [...new Set(this.byRoute.values())];
  }

  /** Undefined for an active route: the common case costs one Map miss. */
  check(route: RouteDef, params: Record<string, string>): LifecycleCheck | undefined {
    const c = this.byRoute.get(route);
    if (!c) return undefined;
    const now = this.now();
    let successor = c.entry.successor;
    let check = c.fixed;
    if (c.successorParts) {
      successor = fill(c.successorParts, params);
      check = { deprecation: check.deprecation, sunset: check.sunset, link: `${c.linkPrefix}${successor}>; rel="successor-version"`, gone: undefined };
    }
    const state = stateAt(c, now);
    if (state !== 'retired' && state !== 'brownout') return check;
    const why = state === 'retired' ? 'This endpoint is retired.' : 'This endpoint is in a scheduled brownout ahead of its retirement.';
    const detail = successor ? `${why} Use ${successor} instead.` : why;
    const members: Record<string, unknown> = { lifecycle: state };
    if (successor) members.successor = successor;
    if (c.entry.guide) members.guide = c.entry.guide;
    return { ...check, gone: new ApiError('gone', detail, { headers: lifecycleHeaders(check), members }) };
  }

  /** Counts a call to a non-active route (residual traffic), once the call is let in. */
  count(route: RouteDef, principal: Principal | undefined): void {
    const c = this.byRoute.get(route);
    // Per tenant and sub: two tenants' callers of one name are two callers.
    if (c) this.usage?.count(c.key, principal?.caller ?? 'anonymous', this.now());
  }
}

/** The check's fields as response headers, set on `headers` (a new object unless given). */
export function lifecycleHeaders(check: LifecycleCheck, headers: Record<string, string> = {}): Record<string, string> {
  headers.deprecation = check.deprecation;
  if (check.sunset !== undefined) headers.sunset = check.sunset;
  if (check.link !== undefined) headers.link = check.link;
  return headers;
}

// Characters encodeURIComponent leaves as they are, letters and digits first: every id is made
// of them, and testing costs less than the call it spares on each counted request.
const UNESCAPED = /^[A-Za-z0-9_.!~*'()-]*$/;

/** The successor template with the request's path parameters put in. */
function fill(parts: string[], params: Record<string, string>): string {
  let out = '';
  for (let i = 0; i < parts.length; i++) {
    if (i % 2 === 0) {
      out += parts[i]!;
      continue;
    }
    const value = params[parts[i]!] ?? `{${parts[i]!}}`;
    out += UNESCAPED.test(value) ? value : encodeURIComponent(value);
  }
  return out;
}
