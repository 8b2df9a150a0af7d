// Rate limiting per caller. The bucket arithmetic is checked on RateLimiter with an injected
// clock; the behaviour on the wire over real sockets, against an embedded service with a small
// budget (RATE_LIMIT_PER_SECOND=1, RATE_LIMIT_BURST=5). Socket tests never rely on timing
// precision: the first `burst` requests of a fresh caller always pass (waiting only adds
// tokens), and bounds allow for one token more per second elapsed.

import { Buffer } from 'node:buffer';
import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import { Pool } from 'undici';
import { ApiError } from '../common/errors.js';
import type { Principal } from '../gateway/auth.js';
import { callerKey, RateLimiter } from '../gateway/rate-limit.js';
import { ALL_SCOPES, assertProblem, freshTenant, token } from './helpers/edge-kit.js';
import { parseResponses, rawExchange, rawRequest } from './helpers/raw-http.js';
import { startEmbedded, type RunningService } from './helpers/service.js';

interface Context {
  service: RunningService;
  pools: Pool[];
}

const test = anyTest as TestFn<Context>;
const BURST = 5;
const POLICY = `"default";q=${BURST};w=${BURST}`;
const FIELD = /^"default";r=(\d+);t=(\d+)$/;

test.before(async (t) => {
  t.context = { service: await startEmbedded({ RATE_LIMIT_PER_SECOND: '1', RATE_LIMIT_BURST: String(BURST) }), pools: [] };
});

test.after.always(async (t) => {
  await Promise.all(t.context.pools.map((p) => p.close()));
  await t.context.service?.close();
});

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
  const p = (tenant: string, sub: string): Principal => ({ tenant, sub, scopes: new Set(), key: `${tenant}\u0000${sub}`, caller: JSON.stringify([tenant, sub]) });
  t.is(callerKey(p('t1', 'u1'), '10.0.0.1'), 't1\u0000u1');
  t.is(callerKey(undefined, '10.0.0.1'), '10.0.0.1');
  t.is(callerKey(undefined, '2001:0db8:0001:0002:0000:0000:0000:0001'), '2001:0db8:0001:0002');
  t.is(callerKey(undefined, '2001:0db8:0001:0002:ffff:0000:0000:0009'), '2001:0db8:0001:0002');
  t.is(callerKey(undefined, '0000:0000:0000:0000:0000:ffff:0a00:0001'), '0000:0000:0000:0000:0000:ffff:0a00:0001');
});

// ---- on the wire ----

interface Reply {
  status: number;
  headers: Record<string, string>;
  text: string;
}

/** A client whose connections come from `from` (any 127.x address reaches the loopback service). */
function client(t: { context: Context }, from: string): (path: string, init?: { method?: string; headers?: Record<string, string>; body?: string }) => Promise<Reply> {
  const pool = new Pool(t.context.service.url, { connections: 1, localAddress: from });
  t.context.pools.push(pool);
  return async (path, init = {}) => {
    const res = await pool.request({ path, method: (init.method ?? 'GET') as 'GET', headers: init.headers ?? {}, body: init.body ?? null });
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) headers[k] = Array.isArray(v) ? v.join(', ') : (v ?? '');
    return { status: res.statusCode, headers, text: await res.body.text() };
  };
}

/** Asserts both fields are present and well-formed, and returns r. */
function remaining(t: ExecutionContext, r: Reply): number {
  t.is(r.headers['ratelimit-policy'], POLICY, `RateLimit-Policy on ${r.status}`);
  t.regex(r.headers.ratelimit ?? '', FIELD, `RateLimit on ${r.status}`);
  return Number(FIELD.exec(r.headers.ratelimit ?? '')?.[1]);
}

const bearer = (tok: string, extra: Record<string, string> = {}): Record<string, string> => ({ authorization: `Bearer ${tok}`, ...extra });
/** A token for a principal of its own. */
const caller = (t: { context: Context }, label: string): Promise<string> => token(t.context.service.secret, ALL_SCOPES, { tenant: freshTenant(label) });

/** Sends until the first 429 (at most `max` requests) and returns every reply with the time it took. */
async function drain(send: () => Promise<Reply>, max = 40): Promise<{ replies: Reply[]; seconds: number }> {
  const started = Date.now();
  const replies: Reply[] = [];
  while (replies.length < max) {
    const r = await send();
    replies.push(r);
    if (r.status === 429) break;
  }
  return { replies, seconds: (Date.now() - started) / 1000 };
}

test('both fields are on every answer: 201, 200, 304, 404, 401 and the edge 413', async (t) => {
  const call = client(t, '127.0.0.2');
  const tok = await caller(t, 'fields');
  const made = await call('/v1/products', { method: 'POST', headers: bearer(tok, { 'content-type': 'application/json' }), body: JSON.stringify({ name: 'W', price: 100, currency: 'EUR' }) });
  t.is(made.status, 201);
  t.is(remaining(t, made), BURST - 1, 'a fresh caller has the whole burst less this request');
  const { id } = JSON.parse(made.text) as { id: string };
  const got = await call(`/v1/products/${id}`, { headers: bearer(tok) });
  t.is(got.status, 200);
  remaining(t, got);
  const same = await call(`/v1/products/${id}`, { headers: bearer(tok, { 'if-none-match': got.headers.etag ?? '' }) });
  t.is(same.status, 304);
  remaining(t, same);
  const missing = await call('/v1/products/prd_ff00000000000000000000', { headers: bearer(tok) });
  t.is(missing.status, 404);
  remaining(t, missing);
  const anonymous = await call('/v1/orders');
  t.is(anonymous.status, 401);
  t.is(remaining(t, anonymous), BURST - 1, 'charged to the address, which has its own bucket');

  const head = rawRequest('POST', '/v1/orders', { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json', 'Content-Length': String(2 * 1048576) });
  const port = Number(new URL(t.context.service.url).port);
  const [tooLarge] = parseResponses((await rawExchange(port, { send: [head] })).bytes, ['POST']);
  t.is(tooLarge?.status, 413);
  t.is(tooLarge?.headers['ratelimit-policy']?.[0], POLICY);
  t.regex(tooLarge?.headers.ratelimit?.[0] ?? '', FIELD);
});

test('past the burst a caller gets 429 rate-limited with Retry-After, RateLimit r=0 and a problem body', async (t) => {
  const call = client(t, '127.0.0.3');
  const tok = await caller(t, 'burst');
  const { replies, seconds } = await drain(() => call('/v1/products?limit=1', { headers: bearer(tok) }));
  const passed = replies.filter((r) => r.status === 200);
  t.deepEqual(
    replies.slice(0, BURST).map((r) => r.status),
    Array(BURST).fill(200),
  );
  t.true(passed.length <= BURST + Math.ceil(seconds), `${passed.length} passed in ${seconds} s`);
  const last = replies.at(-1)!;
  assertProblem(t, last, 429, 'rate-limited');
  t.is(last.headers['retry-after'], '1', 'at 1 token a second one is back within a second');
  t.is(last.headers['ratelimit-policy'], POLICY);
  t.is(last.headers.ratelimit, '"default";r=0;t=1');
  const counts = passed.slice(0, BURST).map((r) => remaining(t, r));
  // Exact only while no token has come back, i.e. within the first second.
  if (seconds < 1) t.deepEqual(counts, [4, 3, 2, 1, 0], 'r counts down');
});

test('a refused request does nothing: a refused create writes no order', async (t) => {
  const call = client(t, '127.0.0.4');
  const tok = await caller(t, 'refused-write');
  const create = (): Promise<Reply> => call('/v1/orders', { method: 'POST', headers: bearer(tok, { 'content-type': 'application/json' }), body: '{"currency":"EUR"}' });
  const { replies } = await drain(create);
  const created = replies.filter((r) => r.status === 201).length;
  t.is(replies.at(-1)?.status, 429);
  // Wait for a token, then count what is there.
  await new Promise((r) => setTimeout(r, 1500));
  const list = await call('/v1/orders?limit=100', { headers: bearer(tok) });
  t.is(list.status, 200);
  t.is((JSON.parse(list.text) as { data: unknown[] }).data.length, created);
});

test('a drained bucket lets a request through again after Retry-After', async (t) => {
  const call = client(t, '127.0.0.5');
  const tok = await caller(t, 'refill');
  const { replies } = await drain(() => call('/v1/products?limit=1', { headers: bearer(tok) }));
  const refused = replies.at(-1)!;
  t.is(refused.status, 429);
  await new Promise((r) => setTimeout(r, Number(refused.headers['retry-after']) * 1000 + 300));
  const again = await call('/v1/products?limit=1', { headers: bearer(tok) });
  t.is(again.status, 200);
});

test('principals have separate buckets; two tokens of one principal share one', async (t) => {
  const call = client(t, '127.0.0.6');
  const tenant = freshTenant('principals');
  const secret = t.context.service.secret;
  const [a, aOther, sameTenant, otherTenant] = await Promise.all([
    token(secret, ALL_SCOPES, { tenant, sub: 'alice' }),
    token(secret, 'products:read', { tenant, sub: 'alice', expiresIn: '2h' }),
    token(secret, ALL_SCOPES, { tenant, sub: 'bob' }),
    token(secret, ALL_SCOPES, { tenant: `${tenant}-2`, sub: 'alice' }),
  ]);
  const { replies } = await drain(() => call('/v1/products?limit=1', { headers: bearer(a) }));
  t.is(replies.at(-1)?.status, 429);
  const shared = await call('/v1/products?limit=1', { headers: bearer(aOther) });
  // Refused, or (after a stall) let through on a token that came back: never a fresh bucket.
  if (shared.status === 200) t.true(remaining(t, shared) < BURST - 1, 'the second token drew on the same bucket');
  else t.is(shared.status, 429);
  for (const other of [sameTenant, otherTenant]) {
    const r = await call('/v1/products?limit=1', { headers: bearer(other) });
    t.is(r.status, 200);
    t.is(remaining(t, r), BURST - 1);
  }
});

test('callers without a valid token are limited by address; a valid token from that address is not', async (t) => {
  const flooder = client(t, '127.0.0.7');
  const neighbour = client(t, '127.0.0.8');
  const anon = await drain(() => flooder('/v1'));
  t.deepEqual(
    anon.replies.slice(0, BURST).map((r) => r.status),
    Array(BURST).fill(200),
  );
  t.is(anon.replies.at(-1)?.status, 429);
  // Bad tokens draw on the same bucket as anonymous calls from that address.
  const bad = await flooder('/v1/orders', { headers: { authorization: 'Bearer not.a.token' } });
  t.true(bad.status === 429 || (bad.status === 401 && remaining(t, bad) === 0), `got ${bad.status}`);
  const other = await neighbour('/v1');
  t.is(other.status, 200);
  t.is(remaining(t, other), BURST - 1, 'another address has its own bucket');
  const valid = await flooder('/v1/orders', { headers: bearer(await caller(t, 'from-flooded-address')) });
  t.is(valid.status, 200);
  t.is(remaining(t, valid), BURST - 1);
});

test('a flood of bad tokens gets 401s, then 429s, each with the fields', async (t) => {
  const call = client(t, '127.0.0.9');
  const { replies } = await drain(() => call('/v1/orders', { headers: { authorization: 'Bearer not.a.token' } }));
  t.deepEqual(
    replies.slice(0, BURST).map((r) => r.status),
    Array(BURST).fill(401),
  );
  t.is(replies.at(-1)?.status, 429);
  for (const r of replies) remaining(t, r);
});

test('new tokens from one address are verified within its budget: forged ones then get 429, as does a new valid one, until a token is back', async (t) => {
  const call = client(t, '127.0.0.12');
  const known = await caller(t, 'verified-elsewhere');
  t.is((await client(t, '127.0.0.13')('/v1/orders', { headers: bearer(known) })).status, 200);
  // Each forged token is new: each needs a verification, and fails it.
  const [head, payload] = known.split('.');
  let n = 0;
  const forged = (): string => `${head}.${payload}.${String(++n).padStart(43, 'A')}`;
  const { replies } = await drain(() => call('/v1/orders', { headers: bearer(forged()) }));
  t.deepEqual(
    replies.slice(0, BURST).map((r) => r.status),
    Array(BURST).fill(401),
  );
  const refused = replies.at(-1)!;
  t.is(refused.status, 429);
  assertProblem(t, { status: refused.status, headers: refused.headers, text: refused.text }, 429, 'rate-limited');
  t.is(refused.headers['retry-after'], '1');
  // Refused by the address's verifications, which its fields name.
  t.is(refused.headers['ratelimit-policy'], `"verify";q=${BURST};w=${BURST}`);
  t.regex(refused.headers.ratelimit ?? '', /^"verify";r=0;t=1$/);
  const drainedAt = Date.now();
  const fresh = await call('/v1/orders', { headers: bearer(await caller(t, 'new-on-a-busy-address')) });
  // A second is a token back: on a machine slow enough to take that long, the new token passes.
  if (Date.now() - drainedAt < 900) t.is(fresh.status, 429, 'a new valid token waits for the budget too');
  // A token verified before needs no verification: this address's calls are not spent.
  const again = await call('/v1/orders', { headers: bearer(known) });
  t.is(again.status, 200);
  await new Promise((resolve) => setTimeout(resolve, 1100));
  t.is((await call('/v1/orders', { headers: bearer(await caller(t, 'new-after-the-wait')) })).status, 200);
});

test('headers refused without a verification (not Bearer) spend none: a new valid token from that address is verified', async (t) => {
  const call = client(t, '127.0.0.14');
  const { replies } = await drain(() => call('/v1/orders', { headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` } }));
  t.deepEqual(
    replies.slice(0, BURST).map((r) => r.status),
    Array(BURST).fill(401),
  );
  t.is(replies.at(-1)?.headers['ratelimit-policy'], POLICY, 'the 429 is the address bucket, not its verifications');
  const fresh = await call('/v1/orders', { headers: bearer(await caller(t, 'after-basic-flood')) });
  t.is(fresh.status, 200);
});

test('the OpenAPI document gives every operation a 429 and the RateLimit headers', async (t) => {
  const call = client(t, '127.0.0.10');
  const doc = JSON.parse((await call('/v1/openapi.json')).text) as {
    paths: Record<string, Record<string, { responses: Record<string, { headers?: Record<string, unknown> }> }>>;
    components: { headers: Record<string, unknown> };
  };
  let operations = 0;
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      operations++;
      const tooMany = op.responses['429'];
      t.truthy(tooMany, `${method} ${path} documents 429`);
      t.truthy(tooMany?.headers?.['Retry-After'], `${method} ${path} 429 has Retry-After`);
      for (const [status, response] of Object.entries(op.responses)) {
        t.truthy(response.headers?.RateLimit, `${method} ${path} ${status} has RateLimit`);
        t.truthy(response.headers?.['RateLimit-Policy'], `${method} ${path} ${status} has RateLimit-Policy`);
      }
    }
  }
  t.true(operations > 10);
  t.truthy(doc.components.headers.RateLimit);
});
