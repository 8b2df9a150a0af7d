// Bearer JWT (HS256) checked on every request with nothing kept between requests but caches of
// verified tokens and of tokens refused for good, both safe to lose (CONTRACT §3, ARCHITECTURE
// "Hot paths"). Errors follow RFC 6750 §3: 401 with WWW-Authenticate, 403 for a missing scope.

import { jwtVerify, SignJWT, errors as joseErrors } from 'jose';
import { ApiError } from '../common/errors.js';
import { BoundedMap } from '../common/bounded-map.js';

export interface Principal {
  sub: string;
  tenant: string;
  scopes: ReadonlySet<string>;
  /**
   * Tenant and sub joined by NUL (neither may hold a control character): one string naming the
   * caller, built once per verified token so per-caller state (rate-limit buckets) costs no
   * string building per request.
   */
  key: string;
  /** Tenant and sub as a JSON pair, `["acme","u1"]`: how usage counts (gateway/usage.ts) name the caller. */
  caller: string;
}

const CACHE_LIMIT = 10_000;
/** Bytes of refused headers kept (Authenticator.refusal): a header counts two bytes a character. */
const REFUSED_BUDGET_BYTES = 4 * 1024 * 1024;
/**
 * How long a refusal is kept at most. Every kept refusal holds for good while the secret and the
 * clock do; an hour bounds how long a token refused as expired by a clock that ran ahead (and was
 * then set back) stays refused.
 */
const REFUSAL_KEPT_MS = 3_600_000;
const RECENT_SLOTS = 16;

/** A header's 401, kept until `until` (Authenticator.refusal). */
interface Refused {
  problem: ApiError;
  until: number;
}

interface Verified {
  /** The Authorization header verified, whole. */
  header: string;
  principal: Principal;
  expMs: number;
}

/**
 * The slot of the front cache for a header: its length and its second-to-last character, which
 * in a token is a character of the signature (the last one carries only four bits of it).
 */
export function recentSlot(header: string): number {
  return (header.length + header.charCodeAt(header.length - 2)) & (RECENT_SLOTS - 1);
}
// Tenants and principals become index keys: no control characters in them.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;
// With the u flag a pair is one code point, so only a surrogate standing alone matches.
const LONE_SURROGATE = /\p{Cs}/u;
const CHALLENGE = 'Bearer realm="api"';
const BEARER = /^Bearer +([A-Za-z0-9\-_.~+/]+=*) *$/i;

/**
 * A tenant or principal name: 1-255 characters, no control character, and well-formed UTF-16.
 * A lone surrogate cannot survive the UTF-8 of index keys, so such a tenant could write records
 * it could never read back.
 */
export function isName(v: unknown): v is string {
  return typeof v === 'string' && v !== '' && v.length <= 255 && !CONTROL.test(v) && !LONE_SURROGATE.test(v);
}

function unauthenticated(detail: string, code?: string): ApiError {
  const challenge = code ? `${CHALLENGE}, error="${code}", error_description="${detail}"` : CHALLENGE;
  return new ApiError('unauthenticated', detail, { headers: { 'www-authenticate': challenge } });
}

export class Authenticator {
  private readonly key: Uint8Array;
  // Verified Authorization headers, whole (a token sliced out of one would be a new string to
  // hash on every lookup). The oldest is forgotten first once CACHE_LIMIT are held.
  private readonly cache = new BoundedMap<string, Verified>(CACHE_LIMIT);
  // In front of it, the headers seen last, one per slot picked by a character of the signature:
  // a hit costs one string comparison, where the Map first hashes the whole fresh header string
  // uWS handed over (about 0.25 µs for a typical token, 3% of a GET). A client sends the same
  // header on every call, so most requests hit here.
  private readonly recent: Verified[] = [];
  // Headers refused for good, with their answer: expired, badly signed, malformed, or carrying a
  // claim that can never be valid. A client retrying with a dead token, or a flood of one, costs
  // a lookup where each verification cost about five GETs (jose's HMAC goes through WebCrypto).
  // A refusal that may not hold later (a `nbf` still ahead) is not kept. Bounded in bytes, since
  // anyone can send new garbage; safe to lose.
  private readonly refused = new BoundedMap<string, Refused>(REFUSED_BUDGET_BYTES);
  // Verifications under way, by header.
  private readonly verifying = new Map<string, Promise<Principal | undefined>>();

  constructor(secret: string) {
    this.key = new TextEncoder().encode(secret);
  }

  /** The caller if this exact header was verified before and has not expired; no await on the hot path. */
  cached(header: string | undefined): Principal | undefined {
    if (header === undefined) return undefined;
    const slot = recentSlot(header);
    const front = this.recent[slot];
    if (front !== undefined && front.header === header && front.expMs > Date.now()) return front.principal;
    const hit = this.cache.get(header);
    if (hit === undefined || hit.expMs <= Date.now()) return undefined;
    this.recent[slot] = hit;
    return hit.principal;
  }

  /** The 401 this exact header was refused with before, when that refusal holds for good. */
  refusal(header: string | undefined): ApiError | undefined {
    return header === undefined ? undefined : this.keptRefusal(header);
  }

  /**
   * Whether answering `header` would verify a token now: a Bearer token neither verified nor
   * refused before, and not being verified already (a request that comes while it is waits for
   * that verification). What the gateway charges to the address's budget of verifications.
   */
  needsVerification(header: string): boolean {
    if (this.verifying.has(header) || this.keptRefusal(header) !== undefined || !BEARER.test(header)) return false;
    const hit = this.cache.get(header);
    return hit === undefined || hit.expMs <= Date.now();
  }

  /** The caller, or undefined when no Authorization header was sent. Throws 401 for a bad one. */
  authenticate(header: string | undefined): Promise<Principal | undefined> {
    if (header === undefined) return Promise.resolve(undefined);
    // One verification for every request that brings the same header while it runs.
    let pending = this.verifying.get(header);
    if (pending === undefined) {
      pending = this.verify(header);
      this.verifying.set(header, pending);
      const done = (): void => {
        this.verifying.delete(header);
      };
      pending.then(done, done);
    }
    return pending;
  }

  private async verify(header: string): Promise<Principal | undefined> {
    const m = BEARER.exec(header);
    if (!m) throw this.refuse(header, unauthenticated('The Authorization header must use the Bearer scheme.', 'invalid_request'));
    const token = m[1]!;
    const hit = this.cache.get(header);
    if (hit) {
      if (hit.expMs > Date.now()) return hit.principal;
      this.cache.delete(header);
    }
    const refused = this.keptRefusal(header);
    if (refused) throw refused;
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, this.key, { algorithms: ['HS256'] }));
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) throw this.refuse(header, unauthenticated('The token has expired.', 'invalid_token'));
      const problem = unauthenticated('The token is malformed or its signature is invalid.', 'invalid_token');
      // A claim check (`nbf` still ahead) may pass later; everything else jose refuses never will.
      throw err instanceof joseErrors.JWTClaimValidationFailed || !(err instanceof joseErrors.JOSEError) ? problem : this.refuse(header, problem);
    }
    const { sub, tenant, scope, exp } = payload;
    if (!isName(sub)) {
      throw this.refuse(header, unauthenticated('The token has no valid sub claim.', 'invalid_token'));
    }
    if (tenant !== undefined && !isName(tenant)) {
      throw this.refuse(header, unauthenticated('The token has an invalid tenant claim.', 'invalid_token'));
    }
    if (scope !== undefined && typeof scope !== 'string') throw this.refuse(header, unauthenticated('The token has an invalid scope claim.', 'invalid_token'));
    const tenantOrSub = (tenant as string | undefined) ?? sub;
    const principal: Principal = {
      sub,
      tenant: tenantOrSub,
      scopes: new Set((scope ?? '').split(' ').filter(Boolean)),
      key: `${tenantOrSub}\u0000${sub}`,
      caller: JSON.stringify([tenantOrSub, sub]),
    };
    // Without exp a token stays valid; re-verify hourly anyway so the cache never pins one forever.
    const expMs = typeof exp === 'number' ? exp * 1000 : Date.now() + 3_600_000;
    this.cache.set(header, { header, principal, expMs });
    return principal;
  }

  /** The kept refusal of `header`, unless it has outlived REFUSAL_KEPT_MS. */
  private keptRefusal(header: string): ApiError | undefined {
    const kept = this.refused.get(header);
    if (kept === undefined) return undefined;
    if (kept.until > Date.now()) return kept.problem;
    this.refused.delete(header);
    return undefined;
  }

  /** Keeps `problem` as the answer to `header` for good, and returns it. */
  private refuse(header: string, problem: ApiError): ApiError {
    this.refused.set(header, { problem, until: Date.now() + REFUSAL_KEPT_MS }, header.length * 2 + 200);
    return problem;
  }

  /** 401 when the route needs a caller and there is none; 403 when the scope is missing. */
  authorize(principal: Principal | undefined, scope: string): Principal {
    if (!principal) throw unauthenticated('This endpoint needs a bearer token.');
    if (!principal.scopes.has(scope)) throw insufficientScope(scope);
    return principal;
  }
}

/** 403 for a valid token without `scope` (RFC 6750 §3.1). */
export function insufficientScope(scope: string): ApiError {
  return new ApiError('forbidden', `The token lacks the '${scope}' scope.`, {
    headers: { 'www-authenticate': `${CHALLENGE}, error="insufficient_scope", scope="${scope}"` },
  });
}

export async function mintToken(
  secret: string,
  claims: { sub: string; tenant?: string; scope: string },
  expiresIn: string | number = '30d',
): Promise<string> {
  const body: Record<string, string> = { scope: claims.scope };
  if (claims.tenant) body.tenant = claims.tenant;
  return new SignJWT(body)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.sub)
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .sign(new TextEncoder().encode(secret));
}
