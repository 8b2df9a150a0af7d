// Rate limiting per caller (SPEC §8, CONTRACT §1): one token bucket per principal (tenant + sub
// of a verified token) or, for callers without a valid token, per client address. Each gateway
// keeps its buckets in memory and enforces the limit on its own (README "Rate limiting" says why).
//
// Answers advertise the limit in the fields of draft-ietf-httpapi-ratelimit-headers-11
// (Structured Fields, RFC 9651), with one policy named "default":
//
//   RateLimit-Policy: "default";q=<burst>;w=<ceil(burst / rate)>        (draft §3.1)
//   RateLimit:        "default";r=<whole tokens left>;t=<seconds>       (draft §4.1)
//
// t is the time until the bucket is full again, or, when r is 0, until the next request will be
// let through (then it equals Retry-After, as draft §6 asks: Retry-After no earlier than the end
// of the effective window). docs/api-guide.md spells out the mapping for clients.

import { performance } from 'node:perf_hooks';
import { ApiError } from '../common/errors.js';
import type { Principal } from './auth.js';
import { BoundedMap } from '../common/bounded-map.js';

export interface RateLimitOptions {
  perSecond: number;
  burst: number;
  /** Most buckets held at once (the hard memory bound); see `charge` for what happens past it. */
  maxBuckets?: number;
  /** How often buckets that are full again are dropped. */
  sweepMs?: number;
  /** The policy's name in both fields (a structured-field token or string's content): "default" when not given. */
  name?: string;
  /** Milliseconds on a monotonic clock; tests inject their own. */
  now?: () => number;
}

/** About 200 bytes each with a key of 24 characters (measured): some 20 MB at the cap. */
export const MAX_BUCKETS = 100_000;
const SWEEP_MS = 10_000;

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date. */
  at: number;
}

export class RateLimiter {
  /** The RateLimit-Policy field value: the same on every answer (draft §3), built once. */
  readonly policy: string;
  /** The policy's name as both fields write it, quoted. */
  private readonly tag: string;
  private readonly perSecond: number;
  private readonly burst: number;
  private readonly now: () => number;
  private readonly buckets: BoundedMap<string, Bucket>;
  private readonly timer: NodeJS.Timeout;

  constructor(opts: RateLimitOptions) {
    if (!(opts.perSecond > 0) || !(opts.burst >= 1)) throw new Error('a rate limit needs a rate above 0 and a burst of at least 1');
    this.perSecond = opts.perSecond;
    this.burst = opts.burst;
    // Full, a new key drops the oldest bucket (see `charge`).
    this.buckets = new BoundedMap(opts.maxBuckets ?? MAX_BUCKETS);
    this.now = opts.now ?? (() => performance.now());
    // w must be a whole number of seconds, at least 1 (draft §3.1.3); rounding up never
    // overstates the sustained rate q/w.
    this.tag = `"${opts.name ?? 'default'}"`;
    this.policy = `${this.tag};q=${this.burst};w=${Math.max(1, Math.ceil(this.burst / this.perSecond))}`;
    this.timer = setInterval(() => this.sweep(), opts.sweepMs ?? SWEEP_MS);
    // The sweep only frees memory: it must never keep the process alive.
    this.timer.unref();
  }

  /**
   * Charges one request to `key` and returns the RateLimit field value for its answer. An empty
   * bucket is not charged: it throws 429 `rate-limited` carrying Retry-After and both fields.
   *
   * Fast path: one Map lookup and arithmetic; the returned string is the only allocation. A new
   * key when the table is full drops the oldest bucket, whose caller starts again with a full
   * burst if it returns. Refusing new keys instead would let anyone with many addresses lock
   * every new caller out; and to reset one caller's bucket this way takes `maxBuckets` other
   * keys, far more requests than the burst it gives back.
   */
  charge(key: string): string {
    const now = this.now();
    let b = this.buckets.get(key);
    if (b === undefined) {
      b = { tokens: this.burst, at: now };
      this.buckets.set(key, b);
    } else if (now > b.at) {
      // Refill lazily for the time since the last request, up to the burst. Multiplying before
      // dividing keeps whole-token refills exact (1000 ms at 1/s is exactly 1 token).
      b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) * this.perSecond) / 1000);
      b.at = now;
    }
    if (b.tokens < 1) {
      const retryAfter = this.secondsUntilNext(b.tokens);
      throw new ApiError('rate-limited', `Too many requests; retry in ${retryAfter} s.`, {
        headers: { 'retry-after': String(retryAfter), 'ratelimit-policy': this.policy, ratelimit: `${this.tag};r=0;t=${retryAfter}` },
      });
    }
    b.tokens -= 1;
    const remaining = Math.floor(b.tokens);
    const t = remaining === 0 ? this.secondsUntilNext(b.tokens) : Math.ceil((this.burst - b.tokens) / this.perSecond);
    return `${this.tag};r=${remaining};t=${t}`;
  }

  /** Drops every bucket that is full again: forgetting it changes nothing for its caller. */
  sweep(): void {
    const now = this.now();
    for (const [key, b] of this.buckets.entries()) {
      if (b.tokens + ((now - b.at) * this.perSecond) / 1000 >= this.burst) this.buckets.delete(key);
    }
  }

  /** Buckets held now. */
  get size(): number {
    return this.buckets.size;
  }

  close(): void {
    clearInterval(this.timer);
  }

  /** Whole seconds, at least 1, until a bucket holding `tokens` (< 1) has one again. */
  private secondsUntilNext(tokens: number): number {
    return Math.max(1, Math.ceil((1 - tokens) / this.perSecond));
  }
}

// IPv4-mapped IPv6 addresses (RFC 4291 §2.5.5.2): what a dual-stack listener reports for IPv4
// callers, each a caller of its own.
const MAPPED_V4 = '0000:0000:0000:0000:0000:ffff:';

/**
 * The bucket key of a caller: its principal, or without one its address. uWS writes IPv6
 * addresses in full (8 groups of 4 hex digits, 39 characters); one end site holds at least a
 * whole /64 (RFC 7421), so keying by address would hand anyone with a /64 unlimited buckets:
 * IPv6 callers are keyed by their /64. Principal keys hold a NUL, so they never equal an address.
 */
export function callerKey(principal: Principal | undefined, address: string): string {
  if (principal !== undefined) return principal.key;
  if (address.length !== 39 || address.startsWith(MAPPED_V4)) return address;
  return address.slice(0, 19);
}
