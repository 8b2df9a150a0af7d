// Rate limiting per caller: the bucket arithmetic of RateLimiter, on an injected clock.

import anyTest from 'ava';
import { ApiError } from '../common/errors.js';
import type { Principal } from '../gateway/auth.js';
import { callerKey, RateLimiter } from '../gateway/rate-limit.js';

const test = anyTest;

// ---- the bucket, on an injected clock ----

function limiter(opts: { perSecond: number; burst: number; maxBuckets?: number }): { rl: RateLimiter; clock: { ms: number } } {
  const clock = { ms: 1_000_000 };
  const rl = new RateLimiter({ ...opts, now: () => clock.ms });
  rl.close();
  return { rl, clock };
}

/** The 429 thrown for an empty bucket; fails the test if the request was let through. */
function refusal(rl: RateLimiter, key: string): ApiError {
  try {
    rl.charge(key);
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error(`${key} was let through`);
}

test('the policy is the burst over the seconds it takes to refill, rounded up', (t) => {
  t.is(limiter({ perSecond: 1000, burst: 2000 }).rl.policy, '"default";q=2000;w=2');
  t.is(limiter({ perSecond: 2, burst: 5 }).rl.policy, '"default";q=5;w=3');
  t.is(limiter({ perSecond: 1000, burst: 10 }).rl.policy, '"default";q=10;w=1', 'w is at least 1 (draft §3.1.3)');
});

test('a burst drains the bucket, then the caller is refused with Retry-After until a token is back', (t) => {
  const { rl, clock } = limiter({ perSecond: 1, burst: 3 });
  // r is what is left; t the seconds until full again, or until the next token once r is 0.
  t.is(rl.charge('a'), '"default";r=2;t=1');
  t.is(rl.charge('a'), '"default";r=1;t=2');
  t.is(rl.charge('a'), '"default";r=0;t=1');
  const refused = refusal(rl, 'a');
  t.is(refused.status, 429);
  t.is(refused.slug, 'rate-limited');
  t.deepEqual(refused.extra.headers, { 'retry-after': '1', 'ratelimit-policy': '"default";q=3;w=3', ratelimit: '"default";r=0;t=1' });
  clock.ms += 999;
  t.is(refusal(rl, 'a').extra.headers?.['retry-after'], '1', 'a refusal takes no token: 0.999 of one is back');
  clock.ms += 1;
  t.is(rl.charge('a'), '"default";r=0;t=1');
  refusal(rl, 'a');
  clock.ms += 2500;
  t.is(rl.charge('a'), '"default";r=1;t=2', 'two and a half tokens back, one taken');
});

test('Retry-After is whole seconds, rounded up, when the rate is below one a second', (t) => {
  const { rl, clock } = limiter({ perSecond: 0.25, burst: 1 });
  t.is(rl.charge('a'), '"default";r=0;t=4');
  t.is(refusal(rl, 'a').extra.headers?.['retry-after'], '4');
  clock.ms += 1000;
  t.is(refusal(rl, 'a').extra.headers?.['retry-after'], '3');
  clock.ms += 2001;
  t.is(refusal(rl, 'a').extra.headers?.['retry-after'], '1', '0.99975 seconds left is still 1');
  clock.ms += 999;
  t.is(rl.charge('a'), '"default";r=0;t=4');
});

test('a bucket refills up to the burst and no further', (t) => {
  const { rl, clock } = limiter({ perSecond: 10, burst: 20 });
  for (let i = 0; i < 20; i++) rl.charge('a');
  clock.ms += 3_600_000;
  t.is(rl.charge('a'), '"default";r=19;t=1');
});

test('each key has its own bucket', (t) => {
  const { rl } = limiter({ perSecond: 1, burst: 2 });
  rl.charge('a');
  rl.charge('a');
  refusal(rl, 'a');
  t.is(rl.charge('b'), '"default";r=1;t=1');
});

test('the sweep drops buckets that are full again, and only those', (t) => {
  const { rl, clock } = limiter({ perSecond: 1, burst: 4 });
  rl.charge('one-taken');
  for (let i = 0; i < 4; i++) rl.charge('drained');
  t.is(rl.size, 2);
  clock.ms += 1000;
  rl.sweep();
  t.is(rl.size, 1, 'the bucket one token short is full again');
  clock.ms += 2999;
  rl.sweep();
  t.is(rl.size, 1, 'the drained bucket is still short of 4 tokens');
  clock.ms += 1;
  rl.sweep();
  t.is(rl.size, 0);
  t.is(rl.charge('drained'), '"default";r=3;t=1', 'a dropped bucket comes back full');
});

test('at the cap, a new caller pushes out the oldest bucket, which starts again full', (t) => {
  const { rl } = limiter({ perSecond: 1, burst: 3, maxBuckets: 3 });
  for (const key of ['a', 'b', 'c']) {
    rl.charge(key);
    rl.charge(key);
  }
  t.is(rl.charge('d'), '"default";r=2;t=1');
  t.is(rl.size, 3);
  t.is(rl.charge('b'), '"default";r=0;t=1', 'b kept its state');
  t.is(rl.charge('a'), '"default";r=2;t=1', 'a was dropped, then pushed out c');
  t.is(rl.size, 3);
});

test('the periodic sweep runs on its own timer', async (t) => {
  let ms = 0;
  const rl = new RateLimiter({ perSecond: 1, burst: 1, sweepMs: 10, now: () => ms });
  try {
    rl.charge('a');
    ms += 1000;
    const until = Date.now() + 5000;
    while (rl.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    t.is(rl.size, 0);
  } finally {
    rl.close();
  }
});

test('callers are keyed by principal, else by address; IPv6 by its /64, IPv4-mapped whole', (t) => {
  const p = (tenant: string, sub: string): Principal => ({ tenant, sub, scopes: new Set(), key: `${tenant}\u0000${sub}` });
  t.is(callerKey(p('t1', 'u1'), '10.0.0.1'), 't1\u0000u1');
  t.is(callerKey(undefined, '10.0.0.1'), '10.0.0.1');
  t.is(callerKey(undefined, '2001:0db8:0001:0002:0000:0000:0000:0001'), '2001:0db8:0001:0002');
  t.is(callerKey(undefined, '2001:0db8:0001:0002:ffff:0000:0000:0009'), '2001:0db8:0001:0002');
  t.is(callerKey(undefined, '0000:0000:0000:0000:0000:ffff:0a00:0001'), '0000:0000:0000:0000:0000:ffff:0a00:0001');
});
