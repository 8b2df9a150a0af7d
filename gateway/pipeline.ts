// The request lifecycle as one ordered list, read top to bottom (STYLE 3):
//
//   trace id → authenticate → rate limit → route → authorize → negotiate → parse and validate
//     → handler (command → bus) → render → conditional → compress
//
// `answer` is a pure function from GatewayRequest to GatewayResponse (or a promise of one, when
// something has to be waited for); the uWS adapter (gateway/http.ts) is the only code that knows
// about sockets.

import { randomBytes } from 'node:crypto';
import secureJson from 'secure-json-parse';
import type { Config } from '../common/config.js';
import { ApiError, type FieldError, fromWire } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import type { Authenticator, Principal } from './auth.js';
import { KeptAnswer, type BusClient, type Replay } from './bus-client.js';
import type { Result } from '../proto/messages.js';
import type { GatewayRequest, GatewayResponse, RequestHeaders } from './http-types.js';
import { homePartition, idemTag, parseIdempotencyKey, ReplayCache } from './idempotency.js';
import { negotiateCoding, negotiateMediaType, type Coding, type MediaType } from './negotiate.js';
import { problemResponse } from './problem.js';
import { callerKey, RateLimiter } from './rate-limit.js';
import { cachedRenderingToSend, checkReadIfMatch, codingOf, contentTag, encodeBody, fingerprintTag, type Encoded, noneMatch, parseIfMatch, parseIfNoneMatch, versionTag } from './representation.js';
import { principalOf, type Ctx, type Outcome, type RouteDef } from './route.js';
import { Router } from './router.js';
import { MAX_REPORTED_ERRORS, validateBody, warmValidators } from './validate.js';
import { relink, versionPath, type ApiVersion } from './versions.js';
import { lifecycleHeaders, type LifecycleCheck, type LifecycleRegistry } from './lifecycle.js';

const VARY_ANON = 'Accept, Accept-Encoding';
const VARY_AUTH = 'Accept, Accept-Encoding, Authorization';
const utf8 = new TextDecoder('utf-8', { fatal: true });
const EMPTY_QUERY = new URLSearchParams();

/** Deepest nesting of arrays and objects a body may have; the deepest schema needs three. */
export const MAX_JSON_DEPTH = 32;
// secure-json-parse throws a SyntaxError for a refused member as for bad JSON; only this
// message tells them apart (test/hostile.test.ts pins it through the answer's detail).
const FORBIDDEN_MEMBER = 'Object contains forbidden prototype property';

export interface GatewayDeps {
  routes: RouteDef[];
  auth: Authenticator;
  bus: BusClient;
  config: Config;
  log: Logger;
  /** Endpoint lifecycle entries (gateway/lifecycle.ts); none means every route is active. */
  lifecycle?: LifecycleRegistry;
}

export interface Gateway {
  /** The answer: at once when nothing has to be waited for (the uWS edge's entry). */
  answer(req: GatewayRequest): GatewayResponse | Promise<GatewayResponse>;
  /** The same answer, always as a promise. */
  handle(req: GatewayRequest): Promise<GatewayResponse>;
  /** Answers a request the uWS edge refused before the pipeline ran (413), charged like any other. */
  refuse(req: GatewayRequest, err: unknown): GatewayResponse;
  /**
   * Whether the caller may have to be charged by address: unless it bears a token verified
   * before, which is charged to its principal. (One that expires in between is charged to the
   * empty address: a bucket shared only by such stragglers.)
   */
  needsAddress(headers: RequestHeaders): boolean;
  routes: readonly RouteDef[];
  /**
   * Compiles the body validators in the background, one route's schema a turn: called once the
   * server listens, so compiling them does not hold back the first answer.
   */
  warm(): Promise<void>;
  /** Stops the rate limiters' sweeps and the validators' warm-up. */
  close(): void;
}

export function createGateway(deps: GatewayDeps): Gateway {
  const router = new Router<RouteDef>();
  for (const r of deps.routes) router.add(r.method, r.path, r);
  let warming: { done: Promise<void>; stop: () => void } | undefined;
  const warm = (): Promise<void> => {
    const schemas = [...new Set(deps.routes.flatMap((r) => (r.body ? [r.body.schema] : [])))];
    warming ??= warmValidators(schemas, (err) => deps.log.error({ err }, 'a route schema does not compile'));
    return warming.done;
  };
  const replays = new ReplayCache();
  const limiter = new RateLimiter({ perSecond: deps.config.rateLimitPerSecond, burst: deps.config.rateLimitBurst });
  // Verifications per address. A token not seen before costs one (an HMAC through WebCrypto,
  // about five GETs of CPU), and whether it was worth it is known only after: charged to the
  // caller's bucket alone, a flood of new or forged tokens from one address was verified at full
  // speed (3.3k a second took the whole CPU) whatever the limit. Each address has the caller's
  // budget of verifications, apart from its calls, so anonymous calls from an address never stop
  // its users' new tokens from being verified. Its answers name it: policy "verify".
  const verifications = new RateLimiter({ perSecond: deps.config.rateLimitPerSecond, burst: deps.config.rateLimitBurst, name: 'verify' });

  /**
   * The answer, at once when everything it needs is at hand: a caller whose token was verified
   * before, and a route that can read its record now (RouteDef.read). Otherwise a promise of it.
   * An answer given at once costs no promise, no turn of the microtask queue, and lets the uWS
   * edge write it before it returns, as the bare uWS ceiling does.
   */
  function answer(req: GatewayRequest): GatewayResponse | Promise<GatewayResponse> {
    const auth = req.headers.authorization;
    const principal = deps.auth.cached(auth);
    if (principal !== undefined || auth === undefined) return serve(req, principal, undefined);
    // A header refused for good before is refused again at once, without a verification.
    const refusal = deps.auth.refusal(auth);
    if (refusal !== undefined) return serve(req, undefined, refusal);
    // Charged only for a verification that will run: not for a header refused without one (not
    // Bearer), nor for one whose verification is already under way.
    if (deps.auth.needsVerification(auth)) {
      try {
        verifications.charge(callerKey(undefined, req.remoteAddress));
      } catch (limited) {
        // Its own RateLimit fields: the budget spent is the address's verifications.
        return refuse(req, limited, false);
      }
    }
    return deps.auth.authenticate(auth).then(
      (verified) => serve(req, verified, undefined),
      (err: unknown) => serve(req, undefined, err),
    );
  }

  function serve(req: GatewayRequest, principal: Principal | undefined, authFailure: unknown): GatewayResponse | Promise<GatewayResponse> {
    const p: Pending = { traceId: traceIdOf(req.headers.traceparent), life: undefined, quota: undefined, replay: undefined };
    try {
      // A non-active route's headers go on every answer, errors, 429s and 304s included
      // (CONTRACT §9): the route is known before anything can refuse the request.
      const match = router.match(req.method, req.path);
      if (match.kind === 'found' && deps.lifecycle) p.life = deps.lifecycle.check(match.route, match.params);
      // Right after authentication, before any other work: a caller without a valid token
      // (anonymous, or about to get its 401) is charged to its address, so a flood of bad tokens
      // is limited too, and a refused request costs no parsing or bus call.
      p.quota = limiter.charge(callerKey(principal, req.remoteAddress));
      // Residual traffic counts the calls let in, not those the limiter turned away.
      if (p.life && match.kind === 'found') deps.lifecycle!.count(match.route, principal);
      if (authFailure !== undefined) throw authFailure;
      if (match.kind === 'not-found') throw new ApiError('not-found', 'There is no resource at this path.');
      if (match.kind === 'method-not-allowed') {
        throw new ApiError('method-not-allowed', `${req.method} is not supported here.`, { headers: { allow: match.allow.join(', ') } });
      }
      const route = match.route;
      if (p.life?.gone) throw p.life.gone;
      if (route.scope !== undefined) deps.auth.authorize(principal, route.scope);
      const media = negotiateMediaType(req.headers.accept, route.produces);
      const coding = negotiateCoding(req.headers['accept-encoding']);
      // CONTRACT §7: the key is honoured on POST, the one method that is not idempotent already.
      const idempotencyKey = req.method === 'POST' ? parseIdempotencyKey(req.headers['idempotency-key']) : undefined;
      const ctx: Ctx = {
        req,
        params: match.params,
        query: EMPTY_QUERY,
        body: undefined,
        principal,
        traceId: p.traceId,
        media,
        coding,
        ifMatch: parseIfMatch(req.headers['if-match']),
        ifNoneMatch: req.method === 'GET' || req.method === 'HEAD' ? undefined : parseIfNoneMatch(req.headers['if-none-match']),
        bus: deps.bus,
        config: deps.config,
        idempotencyKey,
        version: route.version ?? 'v1',
      };
      let now: Outcome | undefined;
      if (idempotencyKey !== undefined) {
        p.replay = { replayed: false };
        // A kept answer is looked for before the query and body are parsed: it was only kept for
        // a request that passed them, and a retry repeats their bytes.
        const kept = route.replay ? replays.get(principalOf(ctx).tenant, idempotencyKey, req) : undefined;
        if (kept === undefined) return unkept(ctx, route, p);
        now = replayed(ctx, route, p, kept);
      } else {
        ctx.query = parseQuery(req.query, route);
        ctx.body = parseBody(req, route, deps.config);
        now = route.read !== undefined && deps.bus.readsNow ? route.read(ctx) : undefined;
        if (now === undefined) return handled(ctx, route, p);
      }
      return rendered(now, ctx, p);
    } catch (err) {
      return failed(err, p);
    }
  }

  /**
   * A POST with an Idempotency-Key whose answer this gateway does not keep: the owner's kept one,
   * or the handler's. The kept answer is looked for before the handler's first command, or found
   * by that command itself when it is the write kept (BusClient.looked). A request refused before
   * any command (its query, its body, a check of the handler's) looks before it is answered: a
   * kept answer, a reuse of the key or the key in flight comes first, as for any other request.
   * (A path naming no valid record has no place to look: route.replay.partition answers it 404.)
   */
  async function unkept(ctx: Ctx, route: RouteDef, p: Pending): Promise<GatewayResponse> {
    const req = ctx.req;
    const idempotencyKey = ctx.idempotencyKey!;
    let keyed: BusClient | undefined;
    try {
      const tag = idemTag(req, idempotencyKey);
      keyed = deps.bus.withIdempotency(tag, p.replay!, route.replay && { tenant: principalOf(ctx).tenant, partition: route.replay.partition(ctx) });
      ctx.bus = keyed;
      ctx.query = parseQuery(req.query, route);
      ctx.body = parseBody(req, route, deps.config);
      if (route.replay?.lookFirst) await keyed.looked();
      const outcome = await route.handle(ctx);
      keep(ctx, keyed.keptAnswer);
      return rendered(outcome, ctx, p);
    } catch (err) {
      let answer = err;
      if (!(answer instanceof KeptAnswer) && keyed?.unlooked) {
        try {
          await keyed.looked();
        } catch (found) {
          answer = found;
        }
      } else if (keyed && route.keyHome && !keyed.keyUsed && answer instanceof ApiError && answer.status < 500) {
        // A route whose answer is not kept in one place to look at first (RouteDef.keyHome),
        // refused before any write carried the key: a reuse of the key or the key in flight is
        // still answered first, from the key's home, which holds every key of its scope (a kept
        // answer, or the key taken for a write kept elsewhere). A kept answer of this very
        // request leaves the refusal as it is. A failure of ours (a 503: the key's home may be
        // what did not answer) is answered as it is, not after a second wait; its retry looks.
        const tenant = principalOf(ctx).tenant;
        try {
          await keyed.kept(tenant, homePartition(tenant, idempotencyKey), keyed.idempotency!);
        } catch (found) {
          answer = found;
        }
      }
      if (answer instanceof KeptAnswer) return replayedNow(ctx, route, p, answer.kept);
      keep(ctx, keyed?.keptAnswer);
      return failed(answer, p);
    }
  }

  /** A kept answer, for the next retry of the same request through this gateway. */
  function keep(ctx: Ctx, kept: Result<unknown> | undefined): void {
    if (kept) replays.set(principalOf(ctx).tenant, ctx.idempotencyKey!, ctx.req, kept);
  }

  /** A kept answer the owner gave before anything ran, answered and kept here. */
  function replayedNow(ctx: Ctx, route: RouteDef, p: Pending, kept: Result<unknown>): GatewayResponse | Promise<GatewayResponse> {
    try {
      keep(ctx, kept);
      return rendered(replayed(ctx, route, p, kept), ctx, p);
    } catch (err) {
      return failed(err, p);
    }
  }

  /** The outcome of a kept answer (a kept refusal throws it again), marked as a replay. */
  function replayed(ctx: Ctx, route: RouteDef, p: Pending, kept: Result<unknown>): Outcome {
    p.replay!.replayed = true;
    if (!kept.ok) throw fromWire(kept.error);
    return route.replay!.outcome(ctx, kept.value);
  }

  /** The route's handler, its query and body parsed. */
  async function handled(ctx: Ctx, route: RouteDef, p: Pending): Promise<GatewayResponse> {
    try {
      return rendered(await route.handle(ctx), ctx, p);
    } catch (err) {
      return failed(err, p);
    }
  }

  /**
   * The outcome rendered and finished: at once, unless a large body is compressed off the loop.
   * Its promise never rejects (a failure is answered), so callers return it without awaiting:
   * awaiting an answer that is already there would cost a promise and a turn of the queue.
   */
  function rendered(outcome: Outcome, ctx: Ctx, p: Pending): GatewayResponse | Promise<GatewayResponse> {
    const res = render(outcome, ctx, p.traceId);
    return res instanceof Promise ? res.then((r) => finish(r, p), (err: unknown) => failed(err, p)) : finish(res, p);
  }

  function failed(err: unknown, p: Pending): GatewayResponse {
    return finish(problemResponse(err, p.traceId, deps.log), p);
  }

  function finish(res: GatewayResponse, p: Pending): GatewayResponse {
    if (p.replay?.replayed) res.headers['idempotent-replayed'] = 'true';
    return withQuota(withLifecycle(res, p.life), limiter, p.quota);
  }

  /** `charged`: whether the caller is charged for this answer (not when `err` is a 429 of its own). */
  function refuse(req: GatewayRequest, err: unknown, charged = true): GatewayResponse {
    const traceId = traceIdOf(req.headers.traceparent);
    // Only a token verified before counts here: verifying one is asynchronous, and this answer
    // must not wait. An unknown token is charged to the address, like a bad one.
    let quota: string | undefined;
    let problem = err;
    const match = router.match(req.method, req.path);
    // Headers only: a request refused at the edge is not a call the route served.
    const life = match.kind === 'found' && deps.lifecycle ? deps.lifecycle.check(match.route, match.params) : undefined;
    if (charged) {
      try {
        quota = limiter.charge(callerKey(deps.auth.cached(req.headers.authorization), req.remoteAddress));
      } catch (limited) {
        problem = limited;
      }
    }
    return withQuota(withLifecycle(problemResponse(problem, traceId, deps.log), life), limiter, quota);
  }

  const needsAddress = (headers: RequestHeaders): boolean => deps.auth.cached(headers.authorization) === undefined;

  const handle = async (req: GatewayRequest): Promise<GatewayResponse> => answer(req);
  const close = (): void => {
    warming?.stop();
    limiter.close();
    verifications.close();
  };
  return { answer, handle, refuse, needsAddress, routes: deps.routes, warm, close };
}

/** What an answer carries whatever it turns out to be: set as the request goes through. */
interface Pending {
  traceId: string;
  life: LifecycleCheck | undefined;
  quota: string | undefined;
  replay: Replay | undefined;
}

/** A non-active route's headers (CONTRACT §9), on whatever answer it gets. */
function withLifecycle(res: GatewayResponse, life: LifecycleCheck | undefined): GatewayResponse {
  if (life) lifecycleHeaders(life, res.headers);
  return res;
}

/**
 * Every answer carries the rate-limit fields (draft-ietf-httpapi-ratelimit-headers-11 §6: they
 * may appear whatever the status). A 429 brought its own from the limiter, so `quota` is unset.
 */
function withQuota(res: GatewayResponse, limiter: RateLimiter, quota: string | undefined): GatewayResponse {
  if (quota !== undefined) {
    res.headers['ratelimit-policy'] = limiter.policy;
    res.headers.ratelimit = quota;
  }
  return res;
}

/**
 * W3C Trace Context: a valid incoming traceparent sets the trace id (CONTRACT §2). Version ff
 * and all-zero trace or parent ids are invalid (Trace Context §3.2.2), so they are ignored.
 */
export function traceIdOf(traceparent: string | undefined): string {
  if (traceparent) {
    const m = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(traceparent.trim());
    if (m && m[1] !== 'ff' && !/^0+$/.test(m[2]!) && !/^0+$/.test(m[3]!)) return m[2]!;
  }
  return nextTraceId();
}

// A fresh trace id is 64 random bits fixed per process plus a 64-bit counter: unique across
// processes without paying for randomness on every request (trace ids are not secrets).
// The counter's low 16 bits come from a table of hex pairs; the rest is formatted once per 65,536
// ids. (Formatting the whole counter with toString(16) and padStart cost a GET 2% of its
// instructions.)
const TRACE_PREFIX = randomBytes(8).toString('hex');
const HEX_PAIRS = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));
let traceHigh = 0;
let traceLow = 0;
let traceHead = traceHeadOf(0);
function traceHeadOf(high: number): string {
  return TRACE_PREFIX + high.toString(16).padStart(12, '0');
}
function nextTraceId(): string {
  if (++traceLow === 0x10000) {
    traceLow = 0;
    traceHead = traceHeadOf(++traceHigh);
  }
  return traceHead + HEX_PAIRS[traceLow >> 8]! + HEX_PAIRS[traceLow & 0xff]!;
}

function parseQuery(raw: string, route: RouteDef): URLSearchParams {
  // Most requests carry no query: one shared empty instance (handlers only read a query).
  if (raw === '') return EMPTY_QUERY;
  const query = new URLSearchParams(raw);
  const allowed = route.query ?? {};
  const errors: FieldError[] = [];
  const seen = new Set<string>();
  const named = new Set<string>();
  // Each name at most once, and at most MAX_REPORTED_ERRORS names: `?a&a&a…` may not turn a
  // 4 KiB head into an answer twenty times its size.
  for (const name of query.keys()) {
    const detail = !Object.prototype.hasOwnProperty.call(allowed, name) ? 'is not a known parameter' : seen.has(name) ? 'may appear only once' : undefined;
    seen.add(name);
    if (detail === undefined || named.has(name) || errors.length === MAX_REPORTED_ERRORS) continue;
    named.add(name);
    errors.push({ parameter: name, detail });
  }
  if (errors.length) throw new ApiError('invalid-parameter', 'The query string has invalid parameters.', { errors });
  return query;
}

function parseBody(req: GatewayRequest, route: RouteDef, config: Config): unknown {
  const spec = route.body;
  const raw = req.body;
  if (!spec) {
    if (raw && raw.length > 0) throw new ApiError('unsupported-media-type', 'This endpoint takes no request body.');
    return undefined;
  }
  if (!raw || raw.length === 0) {
    if (spec.required === false) return undefined;
    throw new ApiError('malformed-request', 'A JSON request body is required.');
  }
  const accepted = spec.mediaTypes ?? ['application/json'];
  // A coded body (gzip, br) is not decoded: refused as such, not misread as a body that is not
  // UTF-8, and plain JSON labelled with a coding is not taken for what its label says it is not.
  const coding = req.headers['content-encoding'];
  if (coding !== undefined && codedBody(coding)) {
    throw unsupportedBody('Send the body without a Content-Encoding: no coding of request bodies is accepted.', req.method, accepted);
  }
  const ctype = req.headers['content-type'];
  const [mediaPart, ...paramParts] = (ctype ?? '').split(';');
  const media = mediaPart!.trim().toLowerCase();
  const charset = paramParts.map((p) => p.trim().toLowerCase()).find((p) => p.startsWith('charset='));
  if (!accepted.includes(media) || (charset && charset !== 'charset=utf-8' && charset !== 'charset="utf-8"')) {
    throw unsupportedBody(`Send the body as ${accepted.join(' or ')} in UTF-8.`, req.method, accepted);
  }
  let text: string;
  try {
    text = utf8.decode(raw);
  } catch {
    throw new ApiError('malformed-request', 'The body is not valid UTF-8.');
  }
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) {
    throw new ApiError('malformed-request', `The body nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep.`);
  }
  let body: unknown;
  try {
    // A member named __proto__ (or a constructor holding prototype) is refused, not kept: any
    // later spread or Object.assign of the body, or of a metadata map, would set a prototype.
    body = parseJson(text);
  } catch (err) {
    if (err instanceof SyntaxError && err.message === FORBIDDEN_MEMBER) {
      throw new ApiError('malformed-request', 'The body has a member named __proto__, or a constructor member holding prototype; such names are refused.');
    }
    throw new ApiError('malformed-request', 'The body is not valid JSON.');
  }
  spec.precheck?.(body, config);
  validateBody(spec.schema, body, spec.readOnly ?? [], raw.length);
  return body;
}

/**
 * Whether a Content-Encoding value names a coding: a list (repeated lines arrive joined), whose
 * empty elements and `identity` name none (RFC 9110 §5.6.1, §8.4.1).
 */
function codedBody(value: string): boolean {
  for (const part of value.split(',')) {
    const c = part.trim().toLowerCase();
    if (c !== '' && c !== 'identity') return true;
  }
  return false;
}

/** 415, saying what may be sent: no coding (RFC 7694 §3) and, for PATCH, the media types (RFC 5789 §2.2). */
function unsupportedBody(detail: string, method: string, accepted: readonly string[]): ApiError {
  return new ApiError('unsupported-media-type', detail, { headers: { 'accept-encoding': 'identity', ...(method === 'PATCH' ? { 'accept-patch': accepted.join(', ') } : {}) } });
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * JSON.parse, refusing a member named __proto__ (or a constructor holding prototype) as
 * secure-json-parse does. That library looks for such a name with two regular expressions that
 * also match each letter written as a \u escape; text without a backslash can only hold the
 * names as they are, which two indexOf scans rule out at a fraction of the cost (a 2.9 kB
 * batch-get body: 9k instructions fewer, of about 360k). Anything else goes through the library.
 */
export function parseJson(text: string): unknown {
  if (text.indexOf('\\') === -1 && text.indexOf('__proto__') === -1 && text.indexOf('constructor') === -1 && text.charCodeAt(0) !== BOM) return JSON.parse(text);
  return secureJson.parse(text, { protoAction: 'error', constructorAction: 'error' });
}

const BOM = 0xfeff;

/**
 * Whether arrays and objects nest deeper than `max`: one pass over the text, no recursion, so
 * a megabyte of `[` costs one loop and never reaches the parser, the validator or a renderer.
 * Brackets inside strings do not count; an escaped character cannot end a string. Unbalanced
 * text is left for the parser to refuse.
 */
function nestsDeeperThan(text: string, max: number): boolean {
  // Nesting is never deeper than the number of opening brackets, counted natively by indexOf
  // (brackets inside strings too, which only errs towards the exact scan below). Most bodies
  // stop here: the character loop cost about 5 µs for a 2.8 KB batch-get body, this 50 ns.
  let opens = 0;
  for (let i = text.indexOf('['); i !== -1 && opens <= max; i = text.indexOf('[', i + 1)) opens++;
  for (let i = text.indexOf('{'); i !== -1 && opens <= max; i = text.indexOf('{', i + 1)) opens++;
  if (opens <= max) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) {
      inString = true;
    } else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > max) return true;
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) {
      depth--;
    }
  }
  return false;
}

/** The answer for an outcome. Synchronous unless a large body must be compressed off the loop. */
function render(outcome: Outcome, ctx: Ctx, traceId: string): GatewayResponse | Promise<GatewayResponse> {
  let vary = ctx.req.headers.authorization !== undefined ? VARY_AUTH : VARY_ANON;
  if (outcome.vary) vary = `${vary}, ${outcome.vary.join(', ')}`;
  const headers: Record<string, string> = {
    'trace-id': traceId,
    'cache-control': outcome.cache ?? 'private, no-cache',
    vary,
  };
  if (outcome.headers) Object.assign(headers, outcome.headers);
  // A v1-built Location moves under the request's version, as the body's links do.
  if (outcome.location) headers.location = outcome.versioned ? outcome.location : versionPath(outcome.location, ctx.version);
  if (outcome.body === undefined && outcome.text === undefined && outcome.render === undefined) {
    return { status: outcome.status, headers, body: undefined };
  }

  const isRead = ctx.req.method === 'GET' || ctx.req.method === 'HEAD';
  // The API version is part of every variant: one record renders differently per version.
  const api = ctx.version === 'v1' ? '' : `;api=${ctx.version}`;
  const version = outcome.tag && outcome.tag !== 'content' && 'version' in outcome.tag ? outcome.tag.version : undefined;
  let tag: string | undefined;
  if (outcome.tag && outcome.tag !== 'content') {
    tag = variantTag(outcome.tag, api, ctx.media, ctx.coding);
    // The answer is known before any byte is rendered: a matching tag costs no serialization.
    const unchanged = isRead ? conditionalRead(ctx, headers, tag, version) : undefined;
    if (unchanged) return unchanged;
  } else if (isRead && outcome.tag !== 'content') {
    checkReadIfMatch(ctx.req.headers['if-match'], ctx.ifMatch, undefined, undefined);
  }
  const text = outcome.text !== undefined ? versionedText(outcome.text, outcome, ctx.version) : serialize(outcome, ctx.version, api);
  if (outcome.tag === 'content') {
    // The rendered bytes and the coding they go in: known before compressing (which is
    // deterministic), so a matching tag costs no compression.
    tag = contentTag(text, ctx.media, codingOf(text, ctx.coding));
    const unchanged = isRead ? conditionalRead(ctx, headers, tag, undefined) : undefined;
    if (unchanged) return unchanged;
  }
  const withBody = ({ bytes, coding, uncompressed }: Encoded): GatewayResponse => {
    // Not compressed as asked (the compressions under way were at their bound): the tag of the
    // bytes sent, or one tag would name two byte sequences, and the conditions checked again
    // against it.
    if (uncompressed && outcome.tag) {
      tag = outcome.tag === 'content' ? contentTag(text, ctx.media, coding) : variantTag(outcome.tag, api, ctx.media, coding);
      const unchanged = isRead ? conditionalRead(ctx, headers, tag, version) : undefined;
      if (unchanged) return unchanged;
    }
    headers['content-type'] = ctx.media.startsWith('text/') ? `${ctx.media}; charset=utf-8` : ctx.media;
    if (tag) headers.etag = tag;
    if (coding !== 'identity') headers['content-encoding'] = coding;
    return { status: outcome.status, headers, body: bytes };
  };
  // Awaiting a body that is already there would cost every answer a promise and a turn.
  const encoded = encodeBody(text, ctx.coding);
  return encoded instanceof Promise ? encoded.then(withBody) : withBody(encoded);
}

/**
 * A read's preconditions against the tag it would be answered with (RFC 9110 §13.2.2): If-Match
 * first (a failure throws 412), then If-None-Match, whose match is the 304 returned.
 */
function conditionalRead(ctx: Ctx, headers: Record<string, string>, tag: string, version: number | undefined): GatewayResponse | undefined {
  checkReadIfMatch(ctx.req.headers['if-match'], ctx.ifMatch, tag, version);
  return noneMatch(ctx.req.headers['if-none-match'], tag) ? notModified(headers, tag) : undefined;
}

/** The strong tag of a versioned or fingerprinted variant in one media type and coding. */
function variantTag(tag: { version: number; variant: string } | { fingerprint: string }, api: string, media: MediaType, coding: Coding): string {
  return 'version' in tag ? versionTag(tag.version, tag.variant + api, media, coding) : fingerprintTag(tag.fingerprint + api, media, coding);
}

function serialize(outcome: Outcome, version: ApiVersion, api: string): string | Buffer {
  const shape = version === 'v1' || outcome.versioned ? (v: unknown) => v : (v: unknown) => relink(v, version);
  if (outcome.cacheKey && outcome.tag && typeof outcome.tag === 'object' && 'version' in outcome.tag) {
    const render = (): unknown => shape(outcome.render?.() ?? outcome.body);
    return cachedRenderingToSend(outcome.cacheKey, outcome.tag.version, outcome.tag.variant + api, render, outcome.record);
  }
  return JSON.stringify(shape(outcome.render ? outcome.render() : outcome.body));
}

/** Text a handler assembled (a page of cached renderings) moved under the request's version. */
function versionedText(text: string | Buffer, outcome: Outcome, version: ApiVersion): string | Buffer {
  return version === 'v1' || outcome.versioned ? text : JSON.stringify(relink(JSON.parse(text.toString()), version));
}

function notModified(headers: Record<string, string>, tag: string): GatewayResponse {
  // RFC 9110 §15.4.5: a 304 carries the validators and Cache-Control/Vary of the 200 it stands for.
  // `headers` is this answer's own: set in place, as a 200 does. A spread copy cost a third of the
  // 304's throughput: properties added to it afterwards (rate-limit fields) took the slow path.
  headers.etag = tag;
  return { status: 304, headers, body: undefined };
}
