// The gateway pipeline in process, no socket (STYLE 2): handle(request) → response. Covers the
// error catalogue's shape, trace ids, negotiation, body parsing and validation, routing, auth
// and tenancy, compression and ETags, and that an unexpected error never leaks.

import { join } from 'node:path';
import anyTest, { type TestFn } from 'ava';
import type { Bus } from '../common/bus.js';
import { loadConfig } from '../common/config.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost } from '../actors/host.js';
import { allRoutes } from '../gateway/app.js';
import { Authenticator } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import { createGateway, type Gateway } from '../gateway/pipeline.js';
import { partitionForNew, principalOf, route, type RouteDef } from '../gateway/route.js';
import { newId, partitionOf } from '../common/ids.js';
import { validateBody } from '../gateway/validate.js';
import { encodeBody, MAX_COMPRESSING } from '../gateway/representation.js';
import { ApiError } from '../common/errors.js';
import { allPartitions } from '../common/partitions.js';
import type { Resolver } from '../actors/webhook-target.js';
import type { WebhookHooks } from '../gateway/webhook-wiring.js';
import {
  ALL_SCOPES,
  type Answer,
  type Call,
  type Problem,
  answerOf,
  assertProblem,
  capturingLog,
  freshTenant,
  removeDir,
  silentLog,
  tempDir,
  toRequest,
  token,
} from './helpers/edge-kit.js';

interface Context {
  dir: string;
  host: ActorHost;
  gateway: Gateway;
  secret: string;
  /** Full access for a tenant of its own. */
  admin: string;
  call(c: Call, gw?: Gateway): Promise<Answer>;
}

const test = anyTest as TestFn<Context>;
const SECRET = 'pipeline-test-secret-0123456789abcdef';
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';

test.before(async (t) => {
  const dir = await tempDir('pipeline');
  const config = loadConfig({ DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, PORT: '0' });
  const log = silentLog();
  const host = new ActorHost({
    dataDir: join(dir, 'actors'),
    partitions: allPartitions(),
    mailboxLimit: 1000,
    log,
  });
  const gateway = createGateway({ routes: allRoutes(), auth: new Authenticator(SECRET), bus: new BusClient(new LocalBus(host, 5000)), config, log });
  t.context = {
    dir,
    host,
    gateway,
    secret: SECRET,
    admin: await token(SECRET, ALL_SCOPES, { tenant: freshTenant('admin') }),
    async call(c, gw = gateway) {
      return answerOf(await gw.handle(toRequest(c)));
    },
  };
});

test.after.always(async (t) => {
  await t.context.host?.close();
  await removeDir(t.context.dir);
});

const bearer = (tok: string): Record<string, string> => ({ authorization: `Bearer ${tok}` });
const json = { 'content-type': 'application/json' };

/** A gateway of its own over `bus`, with every route (and any `extra`), logging to `log`. */
function gatewayOn(dir: string, bus: Bus, log = silentLog(), extra: RouteDef[] = [], hooks: WebhookHooks = {}): Gateway {
  const config = loadConfig({ DATA_DIR: dir, AUTH_JWT_SECRET: SECRET });
  return createGateway({ routes: [...allRoutes(hooks), ...extra], auth: new Authenticator(SECRET), bus: new BusClient(bus), config, log });
}

async function createOrder(t: { context: Context }, tok: string, body: object = { currency: 'EUR' }): Promise<Record<string, unknown>> {
  const a = await t.context.call({ method: 'POST', path: '/v1/orders', headers: { ...bearer(tok), ...json }, body });
  if (a.status !== 201) throw new Error(`create failed: ${a.status} ${a.text}`);
  return a.json();
}

// ---- problem shape and trace ids ----

test('every problem is problem+json with type, title, status, detail and the Trace-Id as traceId', async (t) => {
  const { call, admin } = t.context;
  const cases: [Call, number, string][] = [
    [{ method: 'GET', path: '/v1/nothing-here' }, 404, 'not-found'],
    [{ method: 'PUT', path: '/v1/orders', headers: bearer(admin) }, 405, 'method-not-allowed'],
    [{ method: 'GET', path: '/v1/orders' }, 401, 'unauthenticated'],
    [{ method: 'GET', path: '/v1/orders', headers: bearer(await token(SECRET, 'products:read')) }, 403, 'forbidden'],
    [{ method: 'GET', path: '/v1/orders', headers: { ...bearer(admin), accept: 'text/html' } }, 406, 'not-acceptable'],
    [{ method: 'GET', path: '/v1/orders', query: 'limit=0', headers: bearer(admin) }, 400, 'invalid-parameter'],
    [{ method: 'GET', path: '/v1/orders', query: 'bogus=1', headers: bearer(admin) }, 400, 'invalid-parameter'],
    [{ method: 'POST', path: '/v1/orders', headers: { ...bearer(admin), ...json }, body: '{' }, 400, 'malformed-request'],
    [{ method: 'POST', path: '/v1/orders', headers: { ...bearer(admin), 'content-type': 'text/plain' }, body: '{}' }, 415, 'unsupported-media-type'],
    [{ method: 'POST', path: '/v1/orders', headers: { ...bearer(admin), ...json }, body: {} }, 422, 'validation-failed'],
    [{ method: 'GET', path: '/v1/orders/ord_ff00000000000000000000', headers: bearer(admin) }, 404, 'not-found'],
  ];
  for (const [c, status, slug] of cases) {
    const a = await call(c);
    assertProblem(t, a, status, slug);
    t.regex(a.headers['trace-id'] ?? '', /^[0-9a-f]{32}$/);
  }
});

test('a problem type resolves to a page documenting it', async (t) => {
  const a = await t.context.call({ method: 'GET', path: '/problems/validation-failed' });
  t.is(a.status, 200);
  t.regex(a.headers['content-type'] ?? '', /^text\/html/);
  t.true(a.text.includes('/problems/validation-failed'));
});

test('a valid W3C traceparent sets the trace id of answers and problems', async (t) => {
  const { call, admin } = t.context;
  const traceparent = `00-${TRACE}-00f067aa0ba902b7-01`;
  const ok = await call({ method: 'GET', path: '/v1/orders', headers: { ...bearer(admin), traceparent } });
  t.is(ok.status, 200);
  t.is(ok.headers['trace-id'], TRACE);
  const bad = await call({ method: 'GET', path: '/v1/nope', headers: { traceparent } });
  const p = assertProblem(t, bad, 404, 'not-found');
  t.is(p.traceId, TRACE);
});

test('an invalid traceparent is ignored: a fresh trace id is minted', async (t) => {
  const invalid = [
    'garbage',
    `00-${TRACE.toUpperCase()}-00f067aa0ba902b7-01`, // hex must be lower case
    `00-${TRACE.slice(1)}-00f067aa0ba902b7-01`, // trace id too short
    '00-00000000000000000000000000000000-00f067aa0ba902b7-01', // all-zero trace id
    `00-${TRACE}-0000000000000000-01`, // all-zero parent id
    `ff-${TRACE}-00f067aa0ba902b7-01`, // version ff is forbidden
    `00-${TRACE}-00f067aa0ba902b7`, // no flags
  ];
  const seen = new Set<string>();
  for (const traceparent of invalid) {
    const a = await t.context.call({ method: 'GET', path: '/v1', headers: { traceparent } });
    t.is(a.status, 200);
    const id = a.headers['trace-id'] ?? '';
    t.regex(id, /^[0-9a-f]{32}$/);
    t.not(id, TRACE, `traceparent ${traceparent} should be ignored`);
    t.false(seen.has(id));
    seen.add(id);
  }
});

// ---- negotiation ----

test('Accept: text/html on /v1/orders is 406', async (t) => {
  const a = await t.context.call({ method: 'GET', path: '/v1/orders', headers: { ...bearer(t.context.admin), accept: 'text/html' } });
  const p = assertProblem(t, a, 406, 'not-acceptable');
  t.true(p.detail.includes('application/json'));
});

test('a body with characters beyond ASCII reads back whole, on the first GET and from the kept bytes', async (t) => {
  const note = 'café 😀 naïve – 東京';
  const order = await createOrder(t, t.context.admin, { currency: 'EUR', note });
  const path = `/v1/orders/${order.id as string}`;
  for (let i = 0; i < 3; i++) {
    const a = await t.context.call({ method: 'GET', path, headers: bearer(t.context.admin) });
    t.is(a.status, 200);
    t.is(a.json<{ note: string }>().note, note);
    t.is(a.raw.length, Buffer.byteLength(a.text));
  }
});

test('Accept: application/hal+json answers that media type, with its own ETag', async (t) => {
  const { call, admin } = t.context;
  const order = await createOrder(t, admin);
  const path = `/v1/orders/${String(order.id)}`;
  const hal = await call({ method: 'GET', path, headers: { ...bearer(admin), accept: 'application/hal+json' } });
  t.is(hal.status, 200);
  t.is(hal.headers['content-type'], 'application/hal+json');
  t.deepEqual(hal.json(), order);
  const plain = await call({ method: 'GET', path, headers: { ...bearer(admin), accept: 'application/json' } });
  t.is(plain.headers['content-type'], 'application/json');
  t.truthy(hal.headers.etag);
  t.not(hal.headers.etag, plain.headers.etag);
  t.regex(hal.headers.vary ?? '', /\bAccept\b/);
  // Wildcards and q-values still land on a type we serve.
  const star = await call({ method: 'GET', path, headers: { ...bearer(admin), accept: 'text/html;q=0.9, */*;q=0.1' } });
  t.is(star.status, 200);
  t.is(star.headers['content-type'], 'application/json');
});

test('Accept with charset=utf-8 (any case) is served; another charset is 406', async (t) => {
  const { call, admin } = t.context;
  const order = await createOrder(t, admin);
  const path = `/v1/orders/${String(order.id)}`;
  for (const [accept, type] of [
    ['application/json; charset=utf-8', 'application/json'],
    ['application/json;charset=UTF-8', 'application/json'],
    ['application/hal+json; charset="utf-8"', 'application/hal+json'],
    ['application/*; charset=utf-8;q=0.5', 'application/json'],
  ] as const) {
    const a = await call({ method: 'GET', path, headers: { ...bearer(admin), accept } });
    t.is(a.status, 200, accept);
    t.is(a.headers['content-type'], type, accept);
  }
  assertProblem(t, await call({ method: 'GET', path, headers: { ...bearer(admin), accept: 'application/json; charset=iso-8859-1' } }), 406, 'not-acceptable');
});

// ---- request bodies ----

test('POST with a wrong or missing Content-Type is 415', async (t) => {
  const { call, admin } = t.context;
  const body = JSON.stringify({ currency: 'EUR' });
  for (const ctype of ['text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=latin1', undefined]) {
    const headers: Record<string, string> = bearer(admin);
    if (ctype !== undefined) headers['content-type'] = ctype;
    const a = await call({ method: 'POST', path: '/v1/orders', headers, body });
    assertProblem(t, a, 415, 'unsupported-media-type');
  }
  // Parameters and case of the media type are fine.
  const ok = await call({ method: 'POST', path: '/v1/orders', headers: { ...bearer(admin), 'content-type': 'Application/JSON; charset=UTF-8' }, body });
  t.is(ok.status, 201);
});

test('malformed JSON is 400 malformed-request', async (t) => {
  const { call, admin } = t.context;
  for (const body of ['{', '{"currency": "EUR",}', "{'currency': 'EUR'}", 'null x']) {
    const a = await call({ method: 'POST', path: '/v1/orders', headers: { ...bearer(admin), ...json }, body });
    const p = assertProblem(t, a, 400, 'malformed-request');
    t.regex(p.detail, /JSON/);
  }
});

test('a body that is not valid UTF-8 is 400 malformed-request', async (t) => {
  const body = Buffer.concat([Buffer.from('{"currency":"EUR","note":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('"}')]);
  const a = await t.context.call({ method: 'POST', path: '/v1/orders', headers: { ...bearer(t.context.admin), ...json }, body });
  const p = assertProblem(t, a, 400, 'malformed-request');
  t.regex(p.detail, /UTF-8/);
});

test('a member failing two ways (type and enum) is one invalid member, named once', (t) => {
  const schema = { type: 'object', properties: { role: { type: 'string', enum: ['member', 'owner'] }, note: { type: 'string', maxLength: 3 } } };
  const err = t.throws(() => validateBody(schema, { role: null, note: 'long' }, [], 30), { instanceOf: ApiError });
  t.deepEqual(err!.extra.errors?.map((e) => e.pointer), ['/role', '/note']);
  t.is(err!.detail, 'The body has 2 invalid members.');
});

test('422 names every invalid member at once with RFC 6901 pointers', async (t) => {
  const body = { id: 'ord_mine', total: 5, bogus: 1, note: 42, metadata: { 'a/b': 'x' }, items: [{ quantity: 0 }] };
  const a = await t.context.call({ method: 'POST', path: '/v1/orders', headers: { ...bearer(t.context.admin), ...json }, body });
  const p = assertProblem(t, a, 422, 'validation-failed');
  const errors = p.errors ?? [];
  const byPointer = new Map(errors.map((e) => [e.pointer, e.detail]));
  t.is(byPointer.get('/id'), 'is read-only');
  t.is(byPointer.get('/total'), 'is read-only');
  t.is(byPointer.get('/bogus'), 'is not a known member');
  t.true(byPointer.has('/note'), 'bad type');
  t.is(byPointer.get('/currency'), 'is required');
  t.is(byPointer.get('/items/0/productId'), 'is required');
  t.true(byPointer.has('/items/0/quantity'), 'below the minimum');
  t.true(byPointer.has('/metadata/a~1b'), 'a member name with a slash is escaped per RFC 6901');
  t.true(errors.length >= 8);
  for (const e of errors) {
    t.is(typeof e.detail, 'string');
    t.regex(e.pointer ?? '', /^(\/[^/]*)+$/);
  }
  // Nothing was written.
  const list = await t.context.call({ method: 'GET', path: '/v1/orders', headers: bearer(await token(SECRET, ALL_SCOPES, { tenant: 'never-used' })) });
  t.deepEqual(list.json<{ data: unknown[] }>().data, []);
});

test('a bodyless endpoint refuses a body', async (t) => {
  const a = await t.context.call({ method: 'GET', path: '/v1/orders', headers: { ...bearer(t.context.admin), ...json }, body: '{}' });
  assertProblem(t, a, 415, 'unsupported-media-type');
});

// ---- routing ----

test('an unknown route is 404, with or without a token', async (t) => {
  const { call, admin } = t.context;
  for (const path of ['/v1/nothing', '/v3/orders', '/v1/orders/', '/v1/orders/x/y/z/w']) {
    assertProblem(t, await call({ method: 'GET', path }), 404, 'not-found');
    assertProblem(t, await call({ method: 'GET', path, headers: bearer(admin) }), 404, 'not-found');
  }
});

test('a wrong method is 405 with Allow; TRACE too', async (t) => {
  const { call, admin } = t.context;
  const list = await call({ method: 'DELETE', path: '/v1/orders', headers: bearer(admin) });
  assertProblem(t, list, 405, 'method-not-allowed');
  t.deepEqual((list.headers.allow ?? '').split(', ').sort(), ['GET', 'HEAD', 'POST']);

  const one = await call({ method: 'POST', path: '/v1/orders/ord_ff00000000000000000000', headers: bearer(admin) });
  assertProblem(t, one, 405, 'method-not-allowed');
  t.deepEqual((one.headers.allow ?? '').split(', ').sort(), ['DELETE', 'GET', 'HEAD', 'PATCH', 'PUT']);

  for (const path of ['/v1/orders', '/v1', '/v1/orders/ord_ff00000000000000000000']) {
    const trace = await call({ method: 'TRACE', path, headers: bearer(admin) });
    assertProblem(t, trace, 405, 'method-not-allowed');
    t.false((trace.headers.allow ?? '').includes('TRACE'));
  }
});

test('the version roots answer', async (t) => {
  const root = await t.context.call({ method: 'GET', path: '/' });
  t.is(root.status, 200);
  t.truthy(root.json<{ _links: { v1: unknown } }>()._links.v1);
  const v1 = await t.context.call({ method: 'GET', path: '/v1' });
  t.is(v1.status, 200);
  t.deepEqual(v1.json<{ _links: { orders: unknown } }>()._links.orders, { href: '/v1/orders' });
});

// ---- authentication and tenancy ----

test('no token on a protected route is 401 with a Bearer challenge', async (t) => {
  const a = await t.context.call({ method: 'GET', path: '/v1/orders' });
  assertProblem(t, a, 401, 'unauthenticated');
  t.regex(a.headers['www-authenticate'] ?? '', /^Bearer\b/);
});

function b64url(x: object): string {
  return Buffer.from(JSON.stringify(x)).toString('base64url');
}

test('malformed, badly signed, expired and alg:none tokens are 401', async (t) => {
  const { call } = t.context;
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub: 'u1', scope: ALL_SCOPES, iat: now, exp: now + 3600 };
  const valid = await token(SECRET, ALL_SCOPES);
  const [h, p] = valid.split('.');
  const bad: [string, string][] = [
    ['not a jwt', 'Bearer abc'],
    ['two segments', `Bearer ${h}.${p}`],
    ['basic scheme', 'Basic dTE6cGFzcw=='],
    ['empty bearer', 'Bearer '],
    ['other secret', `Bearer ${await token('another-secret-entirely-0123456789', ALL_SCOPES)}`],
    ['tampered payload', `Bearer ${h}.${b64url({ ...claims, scope: `${ALL_SCOPES} admin` })}.${valid.split('.')[2]}`],
    ['expired', `Bearer ${await token(SECRET, ALL_SCOPES, { expiresIn: now - 60 })}`],
    ['alg none, empty signature', `Bearer ${b64url({ alg: 'none', typ: 'JWT' })}.${b64url(claims)}.`],
    ['alg none, no signature', `Bearer ${b64url({ alg: 'none', typ: 'JWT' })}.${b64url(claims)}`],
    ['alg HS512', `Bearer ${b64url({ alg: 'HS512', typ: 'JWT' })}.${b64url(claims)}.${valid.split('.')[2]}`],
  ];
  for (const [why, authorization] of bad) {
    const a = await call({ method: 'GET', path: '/v1/orders', headers: { authorization } });
    t.is(a.status, 401, why);
    assertProblem(t, a, 401, 'unauthenticated');
    t.regex(a.headers['www-authenticate'] ?? '', /^Bearer\b/, why);
  }
  const expired = await call({ method: 'GET', path: '/v1/orders', headers: { authorization: bad[6]![1] } });
  t.regex(JSON.parse(expired.text).detail as string, /expired/);
});

test('a valid token without the scope is 403', async (t) => {
  const { call } = t.context;
  const reader = await token(SECRET, 'orders:read');
  const a = await call({ method: 'POST', path: '/v1/orders', headers: { ...bearer(reader), ...json }, body: { currency: 'EUR' } });
  const p = assertProblem(t, a, 403, 'forbidden');
  t.true(p.detail.includes('orders:write'));
  t.regex(a.headers['www-authenticate'] ?? '', /insufficient_scope/);
  const none = await token(SECRET, '');
  assertProblem(t, await call({ method: 'GET', path: '/v1/orders', headers: bearer(none) }), 403, 'forbidden');
});

test("another tenant's order is 404, never 403, for reads and writes", async (t) => {
  const { call } = t.context;
  const mine = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('a') });
  const theirs = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('b') });
  const order = await createOrder(t, mine);
  const path = `/v1/orders/${String(order.id)}`;
  assertProblem(t, await call({ method: 'GET', path, headers: bearer(theirs) }), 404, 'not-found');
  assertProblem(t, await call({ method: 'PATCH', path, headers: { ...bearer(theirs), ...json }, body: { note: 'x' } }), 404, 'not-found');
  assertProblem(t, await call({ method: 'DELETE', path, headers: bearer(theirs) }), 404, 'not-found');
  assertProblem(t, await call({ method: 'POST', path: `${path}/cancel`, headers: bearer(theirs) }), 404, 'not-found');
  const list = await call({ method: 'GET', path: '/v1/orders', headers: bearer(theirs) });
  t.deepEqual(list.json<{ data: unknown[] }>().data, []);
  // And it is untouched for its owner.
  const back = await call({ method: 'GET', path, headers: bearer(mine) });
  t.is(back.status, 200);
  t.deepEqual(back.json(), order);
});

// ---- compression and ETags ----

async function bigOrder(t: { context: Context }, tok: string): Promise<string> {
  const p = await t.context.call({ method: 'POST', path: '/v1/products', headers: { ...bearer(tok), ...json }, body: { name: 'Widget', price: 250, currency: 'EUR' } });
  if (p.status !== 201) throw new Error(p.text);
  const productId = p.json<{ id: string }>().id;
  const items = Array.from({ length: 30 }, (_, i) => ({ productId, quantity: i + 1 }));
  const order = await createOrder(t, tok, { currency: 'EUR', note: 'a big one', items });
  return `/v1/orders/${String(order.id)}`;
}

test('a GET of an order by a token verified before, and a replay the gateway keeps, are answered at once, as handle() answers them; what must wait is a promise', async (t) => {
  const { gateway } = t.context;
  const tenant = freshTenant('at-once');
  const headers = bearer(await token(SECRET, ALL_SCOPES, { tenant }));
  // Created with another token of the tenant: this one is first seen by the GET below.
  const writer = bearer(await token(SECRET, 'orders:write', { tenant }));
  const created = await t.context.call({ method: 'POST', path: '/v1/orders', headers: { ...writer, ...json }, body: { currency: 'EUR' } });
  t.is(created.status, 201);
  const path = created.headers.location!;
  const get = (extra: Record<string, string> = {}, query = ''): ReturnType<Gateway['answer']> => gateway.answer(toRequest({ method: 'GET', path, query, headers: { ...headers, ...extra } }));

  // A token seen for the first time is verified asynchronously.
  const first = get();
  t.true(first instanceof Promise);
  const waited = answerOf(await first);
  t.is(waited.status, 200);

  const now = get();
  t.false(now instanceof Promise, 'a read answered from committed state, by a known token, is not a promise');
  const answered = answerOf(now as Awaited<typeof now>);
  t.is(answered.status, 200);
  t.is(answered.text, waited.text);
  t.is(answered.headers.etag, waited.headers.etag);
  const notModified = get({ 'if-none-match': answered.headers.etag! });
  t.false(notModified instanceof Promise);
  t.is((notModified as Awaited<typeof notModified>).status, 304);
  // Problems found on the way are answered at once too.
  const unknown = gateway.answer(toRequest({ method: 'GET', path: '/v1/orders/ord_0000000000000000000000000z', headers }));
  t.false(unknown instanceof Promise);
  t.is((unknown as Awaited<typeof unknown>).status, 404);
  const badFields = get({}, 'fields=nope');
  t.false(badFields instanceof Promise);
  t.is((badFields as Awaited<typeof badFields>).status, 400);

  // A token refused for good is verified once; its next request is refused at once.
  const forged = bearer(await token('another-secret-0123456789abcdef0123', ALL_SCOPES, { tenant }));
  const forgedGet = (): ReturnType<Gateway['answer']> => gateway.answer(toRequest({ method: 'GET', path, headers: forged }));
  const firstRefusal = forgedGet();
  t.true(firstRefusal instanceof Promise);
  t.is(answerOf(await firstRefusal).status, 401);
  const nextRefusal = forgedGet();
  t.false(nextRefusal instanceof Promise, 'a header refused for good before is refused at once');
  const refused = answerOf(nextRefusal as Awaited<typeof nextRefusal>);
  t.is(refused.status, 401);
  t.regex(refused.headers['www-authenticate'] ?? '', /error="invalid_token"/);
  t.truthy(refused.headers.ratelimit, 'charged like any other answer');

  // Products live with their own owners: expanding them waits, and still answers.
  const expanded = get({}, 'expand=items.product');
  t.true(expanded instanceof Promise);
  t.is(answerOf(await expanded).status, 200);
  // So does any write.
  const write = gateway.answer(toRequest({ method: 'PATCH', path, headers: { ...headers, 'content-type': 'application/merge-patch+json' }, body: { note: 'x' } }));
  t.true(write instanceof Promise);
  t.is(answerOf(await write).status, 200);

  // A keyed POST runs, its first retry is answered from the owner's kept answer, which the
  // gateway then keeps: the next retry is answered at once, the same answer.
  const keyed = (): ReturnType<Gateway['answer']> =>
    gateway.answer(toRequest({ method: 'POST', path: '/v1/orders', headers: { ...headers, ...json, 'idempotency-key': 'at-once-1' }, body: { currency: 'EUR' } }));
  const ran = keyed();
  t.true(ran instanceof Promise);
  const original = answerOf(await ran);
  t.is(original.status, 201);
  const fromOwner = keyed();
  t.true(fromOwner instanceof Promise);
  t.is(answerOf(await fromOwner).headers['idempotent-replayed'], 'true');
  const fromGateway = keyed();
  t.false(fromGateway instanceof Promise, 'a replay the gateway keeps is answered at once');
  const replay = answerOf(fromGateway as Awaited<typeof fromGateway>);
  t.is(replay.status, 201);
  t.is(replay.headers['idempotent-replayed'], 'true');
  t.is(replay.headers.location, original.headers.location);
  t.is(replay.text, original.text);
});

test('a large answer is br- or gzip-encoded as asked and decodes to the identity JSON', async (t) => {
  const { call } = t.context;
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('zip') });
  const path = await bigOrder(t, tok);
  for (let i = 0; i < 4; i++) await createOrder(t, tok, { currency: 'EUR', note: `order ${i}`, metadata: { n: String(i) } });

  for (const [p, query] of [[path, 'expand=items,items.product'], ['/v1/orders', 'limit=100']] as const) {
    const ask = (ae: string | undefined): Promise<Answer> =>
      call({ method: 'GET', path: p, query, headers: ae === undefined ? bearer(tok) : { ...bearer(tok), 'accept-encoding': ae } });
    const identity = await ask(undefined);
    t.is(identity.status, 200);
    t.is(identity.headers['content-encoding'], undefined);
    t.true(identity.raw.length >= 1024, `identity body is ${identity.raw.length} bytes`);

    const br = await ask('br');
    t.is(br.headers['content-encoding'], 'br');
    t.true(br.raw.length < identity.raw.length);
    t.deepEqual(br.json(), identity.json());
    t.regex(br.headers.vary ?? '', /\bAccept-Encoding\b/);

    const gz = await ask('gzip');
    t.is(gz.headers['content-encoding'], 'gzip');
    t.deepEqual(gz.json(), identity.json());

    t.is((await ask('gzip, br')).headers['content-encoding'], 'br');
    t.is((await ask('br;q=0.5, gzip')).headers['content-encoding'], 'gzip');
    t.is((await ask('deflate')).headers['content-encoding'], undefined);
    t.is((await ask('br;q=0, gzip;q=0')).headers['content-encoding'], undefined);

    const tags = [identity, br, gz].map((a) => a.headers.etag);
    t.true(tags.every((tag) => typeof tag === 'string' && /^"[^"]+"$/.test(tag)));
    t.is(new Set(tags).size, 3, 'ETags differ per content coding');

    // A tag is only good for its own coding.
    const cross = await call({ method: 'GET', path: p, query, headers: { ...bearer(tok), 'accept-encoding': 'br', 'if-none-match': identity.headers.etag! } });
    t.is(cross.status, 200);
    t.is(cross.headers['content-encoding'], 'br');
    const same = await call({ method: 'GET', path: p, query, headers: { ...bearer(tok), 'accept-encoding': 'br', 'if-none-match': br.headers.etag! } });
    t.is(same.status, 304);
    t.is(same.raw.length, 0);
    t.is(same.headers.etag, br.headers.etag);
  }
});

test('at most MAX_COMPRESSING large bodies compress at once; past it a body goes uncompressed, and the slots come back', async (t) => {
  const body = JSON.stringify({ data: Array.from({ length: 2000 }, (_, i) => ({ id: i, note: `order ${i} `.repeat(8) })) });
  t.true(body.length > 64 * 1024);
  const first = Array.from({ length: MAX_COMPRESSING + 3 }, () => encodeBody(body, 'br'));
  t.is(first.filter((e) => e instanceof Promise).length, MAX_COMPRESSING);
  for (const e of first.filter((e) => !(e instanceof Promise))) t.like(e, { coding: 'identity', uncompressed: true, bytes: body });
  const done = await Promise.all(first.map(async (e) => e));
  t.is(done.filter((e) => e.coding === 'br').length, MAX_COMPRESSING);
  const again = encodeBody(body, 'gzip');
  t.true(again instanceof Promise, 'a slot is free again');
  t.is((await again).coding, 'gzip');
});

test('a large answer sent uncompressed because compressions were at their bound carries the identity tag, not the one of its compressed bytes', async (t) => {
  const { call } = t.context;
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('zip-bound') });
  const metadata = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, `${i}`.repeat(500).slice(0, 500)]));
  for (let i = 0; i < 4; i++) await createOrder(t, tok, { currency: 'EUR', metadata });
  const product = await call({ method: 'POST', path: '/v1/products', headers: { ...bearer(tok), ...json }, body: { name: 'w'.repeat(200), price: 250, currency: 'EUR' } });
  const items = Array.from({ length: 100 }, (_, i) => ({ productId: product.json<{ id: string }>().id, quantity: i + 1 }));
  const big = await createOrder(t, tok, { currency: 'EUR', metadata, items });
  // A page (its tag a fingerprint of what it lists), one order (its version and variant) and a
  // document (its tag hashes its bytes).
  for (const [path, query] of [['/v1/orders', 'limit=100'], [`/v1/orders/${String(big.id)}`, 'expand=items.product'], ['/v1/openapi.json', '']] as const) {
    const get = (ae?: string, extra: Record<string, string> = {}): Promise<Answer> =>
      call({ method: 'GET', path, query, headers: { ...bearer(tok), ...(ae ? { 'accept-encoding': ae } : {}), ...extra } });
    const identity = await get();
    t.true(identity.raw.length > 64 * 1024, `${path}: ${identity.raw.length} bytes`);
    const br = await get('br');
    t.is(br.headers['content-encoding'], 'br');
    t.not(br.headers.etag, identity.headers.etag);
    // Many at once: the reads answer together, so more bodies reach compression than it takes.
    const many = await Promise.all(Array.from({ length: 4 * MAX_COMPRESSING + 4 }, () => get('br')));
    const plain = many.filter((a) => a.headers['content-encoding'] === undefined);
    t.true(plain.length > 0, `${path}: some went uncompressed`);
    t.true(many.length - plain.length >= MAX_COMPRESSING, `${path}: as many as the bound were compressed`);
    for (const a of many) {
      t.is(a.status, 200);
      t.deepEqual(a.json(), identity.json());
      t.is(a.headers.etag, a.headers['content-encoding'] === 'br' ? br.headers.etag : identity.headers.etag, path);
      t.regex(a.headers.vary ?? '', /\bAccept-Encoding\b/);
    }
    // Revalidation under the same load: the tag of the coding asked for is always 304, whatever
    // would have been sent; the identity tag is 304 wherever identity would have been sent.
    const held = await Promise.all(Array.from({ length: 4 * MAX_COMPRESSING + 4 }, () => get('br', { 'if-none-match': br.headers.etag! })));
    t.deepEqual([...new Set(held.map((a) => a.status))], [304], path);
    const other = await Promise.all(Array.from({ length: 4 * MAX_COMPRESSING + 4 }, () => get('br', { 'if-none-match': identity.headers.etag! })));
    for (const a of other) {
      if (a.status === 304) t.is(a.headers.etag, identity.headers.etag, path);
      else t.like(a.headers, { 'content-encoding': 'br', etag: br.headers.etag }, path);
    }
    t.true(other.some((a) => a.status === 304), `${path}: some would have gone uncompressed`);
  }
});

test('conditional reads: a stale If-Match is 412, If-None-Match: * is 304, and HEAD answers as GET does', async (t) => {
  const { call, admin } = t.context;
  const order = await createOrder(t, admin);
  const path = `/v1/orders/${String(order.id)}`;
  const first = await call({ method: 'GET', path, headers: bearer(admin) });
  const patched = await call({ method: 'PATCH', path, headers: { ...bearer(admin), 'content-type': 'application/merge-patch+json' }, body: JSON.stringify({ note: 'v2' }) });
  t.is(patched.status, 200);
  for (const method of ['GET', 'HEAD']) {
    assertProblem(t, await call({ method, path, headers: { ...bearer(admin), 'if-match': first.headers.etag! } }), 412, 'precondition-failed');
    t.is((await call({ method, path, headers: { ...bearer(admin), 'if-match': patched.headers.etag! } })).status, 200, method);
    t.is((await call({ method, path, headers: { ...bearer(admin), 'if-none-match': '*' } })).status, 304, method);
    t.is((await call({ method, path, headers: { ...bearer(admin), 'if-none-match': patched.headers.etag! } })).status, 304, method);
  }
});

test('a body under 1 KiB stays identity whatever Accept-Encoding says', async (t) => {
  const { call, admin } = t.context;
  const order = await createOrder(t, admin);
  const a = await call({ method: 'GET', path: `/v1/orders/${String(order.id)}`, headers: { ...bearer(admin), 'accept-encoding': 'gzip, br' } });
  t.is(a.status, 200);
  t.true(a.raw.length < 1024);
  t.is(a.headers['content-encoding'], undefined);
  t.deepEqual(a.json(), order);
  const problem = await call({ method: 'GET', path: '/v1/nope', headers: { 'accept-encoding': 'br' } });
  t.is(problem.headers['content-encoding'], undefined);
  assertProblem(t, problem, 404, 'not-found');
});

test("a batch's etags are the tags a GET of each order answers when asked as the batch was, in v1 and v2", async (t) => {
  const { call, admin } = t.context;
  const order = await createOrder(t, admin);
  for (const [version, coding] of [['v1', 'gzip, br'], ['v1', undefined], ['v2', 'gzip'], ['v2', undefined]] as const) {
    const enc: Record<string, string> = coding ? { 'accept-encoding': coding } : {};
    const batch = await call({ method: 'POST', path: `/${version}/orders/batch`, headers: { ...bearer(admin), ...enc, 'content-type': 'application/json' }, body: JSON.stringify({ operations: [{ method: 'POST', body: { currency: 'EUR' } }, { method: 'PATCH', id: String(order.id), body: { note: `${version} ${coding}` } }] }) });
    t.is(batch.status, 207, batch.text);
    const results = batch.json<{ results: { id: string; etag: string }[] }>().results;
    for (const r of results) {
      const get = await call({ method: 'GET', path: `/${version}/orders/${r.id}`, headers: { ...bearer(admin), ...enc } });
      t.is(get.headers.etag, r.etag, `${version} ${coding ?? 'identity'}`);
      const again = await call({ method: 'GET', path: `/${version}/orders/${r.id}`, headers: { ...bearer(admin), ...enc, 'if-none-match': r.etag } });
      t.is(again.status, 304, `${version} ${coding ?? 'identity'}`);
    }
  }
});

// ---- unexpected errors ----

// The host name holds letters no hex trace id has, so a trace id can never look like a leak.
const LEAK = 'secret internal host zqdb.internal';

function assertNoLeak(t: { false(v: boolean, m?: string): void }, a: Answer): void {
  for (const needle of ['secret', 'zqdb', 'internal host', 'Error:', '    at ', '.js:', 'stack']) {
    t.false(a.text.includes(needle), `the body leaks ${JSON.stringify(needle)}: ${a.text}`);
  }
  for (const [k, v] of Object.entries(a.headers)) t.false(v.includes('zqdb'), `header ${k} leaks`);
}

test('a bus that throws is answered 500 internal with none of the error in the body', async (t) => {
  const throwing: Bus = {
    send() {
      throw new Error(LEAK);
    },
    scatter() {
      return Promise.reject(new Error(LEAK));
    },
    async close() {},
  };
  const lines: string[] = [];
  const gw = gatewayOn(t.context.dir, throwing, capturingLog(lines));
  const tok = await token(SECRET, ALL_SCOPES);
  const calls: Call[] = [
    { method: 'GET', path: '/v1/orders/ord_ff00000000000000000000', headers: bearer(tok) },
    { method: 'GET', path: '/v1/orders', headers: bearer(tok) },
    { method: 'POST', path: '/v1/orders', headers: { ...bearer(tok), ...json }, body: { currency: 'EUR' } },
  ];
  for (const c of calls) {
    const a = await t.context.call({ ...c, headers: { ...c.headers, traceparent: `00-${TRACE}-00f067aa0ba902b7-01` } }, gw);
    const p: Problem = assertProblem(t, a, 500, 'internal');
    t.is(p.traceId, TRACE);
    assertNoLeak(t, a);
  }
  // The operator still gets the whole story, keyed by the trace id.
  const logged = lines.join('');
  t.true(logged.includes(LEAK));
  t.true(logged.includes(TRACE));
  t.regex(logged, /"stack":"Error: secret internal host/);
});

test('a route that throws a non-ApiError is answered 500 internal without its message or stack', async (t) => {
  const boom = route({
    method: 'GET',
    path: '/v1/boom',
    operationId: 'boom',
    summary: 'Throws.',
    tag: 'test',
    scope: undefined,
    responses: {},
    async handle() {
      throw new TypeError(`Cannot read properties of undefined (reading 'x') at ${LEAK}`);
    },
  });
  const gw = gatewayOn(t.context.dir, new LocalBus(t.context.host, 5000), silentLog(), [boom]);
  const a = await t.context.call({ method: 'GET', path: '/v1/boom' }, gw);
  assertProblem(t, a, 500, 'internal');
  assertNoLeak(t, a);
  t.false(a.text.includes('TypeError'));
  t.is(a.headers['cache-control'], 'no-store');
});

test('batch-get reads an actor node of the earlier release, which answers only the users it found', async (t) => {
  // The earlier reply shape: the found users, in order, without a slot for a miss. A gateway
  // upgraded before the actor nodes must still put each user under its own id.
  const local = new LocalBus(t.context.host, 5000);
  const earlier: Bus = {
    async send(cmd) {
      const r = await local.send(cmd);
      if (cmd.kind === 'user.batchGet' && r.ok) return { ...r, value: (r.value as unknown[]).filter((u) => u !== null) };
      return r;
    },
    scatter: (q) => local.scatter(q),
    async close() {},
  };
  const gw = gatewayOn(t.context.dir, earlier);
  const tok = await token(SECRET, 'users:read users:write', { tenant: freshTenant('batch-earlier') });
  const ids: string[] = [];
  for (const email of ['a@x.io', 'b@x.io']) {
    const a = await t.context.call({ method: 'POST', path: '/v1/users', headers: { ...bearer(tok), ...json }, body: { email } });
    t.is(a.status, 201, a.text);
    ids.push((a.json() as { id: string }).id);
  }
  const a = await t.context.call({ method: 'POST', path: '/v1/users/batch-get', headers: { ...bearer(tok), ...json }, body: { ids: ['usr_nope', ids[1], ids[0]] } }, gw);
  t.is(a.status, 200, a.text);
  const body = a.json() as { data: { id: string; email: string }[]; notFound: string[] };
  t.deepEqual(body.data.map((u) => [u.id, u.email]), [[ids[1], 'b@x.io'], [ids[0], 'a@x.io']]);
  t.deepEqual(body.notFound, ['usr_nope']);
});

// ---- Idempotency-Key: a retry is answered before the handler reads anything or queues ----

/** A gateway of its own over `host`, logging the kind of every bus message; `refused` kinds get 503. */
function gatewayOver(host: ActorHost, dir: string, refused: string[] = [], hooks: WebhookHooks = {}): { gw: Gateway; kinds: string[] } {
  const kinds: string[] = [];
  const local = new LocalBus(host, 5000);
  const bus: Bus = {
    send(cmd) {
      kinds.push(cmd.kind);
      if (refused.includes(cmd.kind)) return Promise.resolve({ ok: false, error: { code: 'unavailable', detail: 'No node is serving this data right now.' } });
      return local.send(cmd);
    },
    scatter: (q) => local.scatter(q),
    keptApart: () => local.keptApart(),
    close: () => local.close(),
  };
  return { gw: gatewayOn(dir, bus, silentLog(), [], hooks), kinds };
}

test('a keyed retry replays without reading what the first attempt read: a product owner down does not matter', async (t) => {
  const tok = t.context.admin;
  const product = await t.context.call({ method: 'POST', path: '/v1/products', headers: { ...bearer(tok), ...json }, body: { name: 'Far away', price: 500, currency: 'EUR' } });
  t.is(product.status, 201, product.text);
  const create: Call = {
    method: 'POST',
    path: '/v1/orders',
    headers: { ...bearer(tok), ...json, 'idempotency-key': 'owner-down-1' },
    body: { currency: 'EUR', items: [{ productId: (product.json() as { id: string }).id, quantity: 1 }] },
  };
  const first = await t.context.call(create);
  t.is(first.status, 201, first.text);
  const down = gatewayOver(t.context.host, t.context.dir, ['product.get']);
  const retry = await t.context.call(create, down.gw);
  t.is(retry.status, 201, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.is(retry.text, first.text);
  t.deepEqual(down.kinds, ['idem.peek'], 'the kept answer, asked for first, is all the retry needs');
});

test('a keyed create whose first command is its write sends only that write; its retry and a reuse are answered by the owner', async (t) => {
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('one-call') });
  const orderCount = async (): Promise<number> => (await t.context.call({ method: 'GET', path: '/v1/orders', headers: bearer(tok) })).json<{ data: unknown[] }>().data.length;
  const create: Call = { method: 'POST', path: '/v1/orders', headers: { ...bearer(tok), ...json, 'idempotency-key': 'one-call-1' }, body: { currency: 'EUR' } };
  const first = gatewayOver(t.context.host, t.context.dir);
  const made = await t.context.call(create, first.gw);
  t.is(made.status, 201, made.text);
  t.deepEqual(first.kinds, ['order.create'], 'no look for a kept answer first: the write finds it');
  // Through a gateway that keeps nothing yet: the write is sent, and its owner replays.
  const second = gatewayOver(t.context.host, t.context.dir);
  const retry = await t.context.call(create, second.gw);
  t.is(retry.status, 201, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.is(retry.text, made.text);
  t.deepEqual(second.kinds, ['order.create']);
  // That gateway now keeps the answer: the next retry costs no bus call.
  t.is((await t.context.call(create, second.gw)).text, made.text);
  t.deepEqual(second.kinds, ['order.create']);
  t.is(await orderCount(), 1, 'one order made');
  // Another body under the key is refused as a reuse, even one that would fail validation: the
  // key is looked up before the body's errors are answered.
  const reused = await t.context.call({ ...create, body: { currency: 'EUR', note: 'other' } }, second.gw);
  t.is(reused.status, 422, reused.text);
  t.is(reused.json().type, '/problems/idempotency-key-reused');
  const invalid = await t.context.call({ ...create, body: { currency: 'nope' } }, second.gw);
  t.is(invalid.status, 422, invalid.text);
  t.is(invalid.json().type, '/problems/idempotency-key-reused');
  // One the handler refuses before any command (an item naming no product, by its id's shape).
  const unpriced = await t.context.call({ ...create, body: { currency: 'EUR', items: [{ productId: 'no-such-shape', quantity: 1 }] } }, second.gw);
  t.is(unpriced.status, 422, unpriced.text);
  t.is(unpriced.json().type, '/problems/idempotency-key-reused');
  t.deepEqual(second.kinds, ['order.create', 'order.create', 'idem.peek', 'idem.peek']);
  // A fresh key with an invalid body: the look finds nothing, and the body's errors are answered.
  const fresh = await t.context.call({ ...create, headers: { ...create.headers, 'idempotency-key': 'one-call-2' }, body: { currency: 'nope' } }, second.gw);
  t.is(fresh.status, 422, fresh.text);
  t.is(fresh.json().type, '/problems/validation-failed');
  const freshUnpriced = await t.context.call({ ...create, headers: { ...create.headers, 'idempotency-key': 'one-call-3' }, body: { currency: 'EUR', items: [{ productId: 'no-such-shape', quantity: 1 }] } }, second.gw);
  t.is(freshUnpriced.status, 422, freshUnpriced.text);
  t.is(freshUnpriced.json().type, '/problems/validation-failed');
  t.is(await orderCount(), 1);
});

test('a batch or a refund refused before any write carries its key still meets a reuse of the key first', async (t) => {
  const tenant = freshTenant('reuse-apart');
  const tok = await token(SECRET, `${ALL_SCOPES} refunds:write users:read`, { tenant });
  const keyed = (path: string, key: string, body: Call['body']): Call => ({ method: 'POST', path, headers: { ...bearer(tok), ...json, 'idempotency-key': key }, body });
  const typeOf = (a: Answer): unknown => a.json<{ type: string }>().type;

  const batch = keyed('/v1/orders/batch', 'batch-1', { operations: [{ method: 'POST', body: { currency: 'EUR' } }] });
  const first = await t.context.call(batch);
  t.is(first.status, 207, first.text);
  // Refused by the envelope's schema, and by an atomic batch's own check before anything is sent.
  for (const body of [{ operations: [] }, { atomic: true, operations: [{ method: 'POST', body: { currency: 'euro' } }] }]) {
    const reused = await t.context.call({ ...batch, body });
    t.is(reused.status, 422, reused.text);
    t.is(typeOf(reused), '/problems/idempotency-key-reused', JSON.stringify(body));
    const fresh = await t.context.call(keyed('/v1/orders/batch', `batch-${JSON.stringify(body).length}`, body));
    t.is(fresh.status, 422, fresh.text);
    t.is(typeOf(fresh), '/problems/validation-failed', 'under a fresh key the refusal is the answer');
  }
  // A POST that only reads has no key to reuse: its refusal is its answer, without a look.
  const readOnly = await t.context.call(keyed('/v1/users/batch-get', 'batch-1', { ids: [] }));
  t.is(readOnly.status, 422, readOnly.text);
  t.is(typeOf(readOnly), '/problems/validation-failed');
  // One it runs checks its key at the key's home: a key kept for the batch is a reuse. Under a
  // key of its own it runs each time, and keeps nothing that a later write would meet.
  const readReused = await t.context.call(keyed('/v1/users/batch-get', 'batch-1', { ids: ['usr_nope'] }));
  t.is(readReused.status, 422, readReused.text);
  t.is(typeOf(readReused), '/problems/idempotency-key-reused');
  for (let i = 0; i < 2; i++) {
    const read = await t.context.call(keyed('/v1/users/batch-get', 'read-1', { ids: ['usr_nope'] }));
    t.is(read.status, 200, read.text);
    t.is(read.headers['idempotent-replayed'], undefined);
  }
  const afterRead = await t.context.call(keyed('/v1/orders/batch', 'read-1', { operations: [{ method: 'POST', body: { currency: 'EUR' } }] }));
  t.is(afterRead.status, 207, afterRead.text);
  t.is(afterRead.headers['idempotent-replayed'], undefined);
  const again = await t.context.call(batch);
  t.is(again.status, 207, again.text);
  t.is(again.headers['idempotent-replayed'], 'true');
  t.is(again.text, first.text);

  const partition = partitionOf(newId('order'));
  const id = newId('order', partition);
  const input = { currency: 'EUR', customerId: null, note: null, metadata: {} };
  const created = await t.context.host.handle({ kind: 'order.create', tenant, partition, id, input, items: [{ id: newId('item', partition), productId: newId('product'), quantity: 1, unitPrice: 3000 }] });
  t.true(created.ok);
  t.true((await t.context.host.handle({ kind: 'order.pay', tenant, partition, id, ifMatch: undefined })).ok);
  const refund = await t.context.call(keyed('/v1/refunds', 'refund-1', { orderId: id, amount: 1000 }));
  t.is(refund.status, 202, refund.text);
  // orderId naming no order is refused by the handler, before its write.
  const reused = await t.context.call(keyed('/v1/refunds', 'refund-1', { orderId: 'nope', amount: 1000 }));
  t.is(reused.status, 422, reused.text);
  t.is(typeOf(reused), '/problems/idempotency-key-reused');
  const fresh = await t.context.call(keyed('/v1/refunds', 'refund-2', { orderId: 'nope', amount: 1000 }));
  t.is(fresh.status, 422, fresh.text);
  t.is(typeOf(fresh), '/problems/validation-failed');
});

test('a keyed batch that fails on our side before its write is answered 503 at once, not after asking the key\'s home too', async (t) => {
  const tok = t.context.admin;
  const product = await t.context.call({ method: 'POST', path: '/v1/products', headers: { ...bearer(tok), ...json }, body: { name: 'Priced', price: 700, currency: 'EUR' } });
  t.is(product.status, 201, product.text);
  const productId = (product.json() as { id: string }).id;
  const down = gatewayOver(t.context.host, t.context.dir, ['product.get']);
  const batch: Call = {
    method: 'POST',
    path: '/v1/orders/batch',
    headers: { ...bearer(tok), ...json, 'idempotency-key': 'batch-owner-down' },
    body: { atomic: true, operations: [{ method: 'POST', body: { currency: 'EUR', items: [{ productId, quantity: 1 }] } }] },
  };
  const answer = await t.context.call(batch, down.gw);
  t.is(answer.status, 503, answer.text);
  t.truthy(answer.headers['retry-after']);
  // The batch's own look at the key's home, then the read that failed; nothing after it.
  t.deepEqual(down.kinds, ['idem.peek', 'product.get']);
});

/**
 * A keyed create route for these tests (no real route does this yet): `body` gets the order's
 * write and a read of `product`, to send as it likes.
 */
function orderAndProductRoute(path: string, product: string, body: (write: () => Promise<{ id: string }>, read: () => Promise<{ id: string }>) => Promise<object>): RouteDef {
  return route({
    method: 'POST',
    path,
    operationId: `create${path.replace(/\W/g, '')}`,
    summary: 'Writes an order and reads a product.',
    tag: 'test',
    scope: 'orders:write',
    responses: {},
    async handle(ctx) {
      const tenant = principalOf(ctx).tenant;
      const id = newId('order', partitionForNew(ctx));
      const write = (): Promise<{ id: string }> =>
        ctx.bus.call({ kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] });
      const read = (): Promise<{ id: string }> => ctx.bus.call({ kind: 'product.get', tenant, partition: partitionOf(product), id: product });
      return { status: 201, body: await body(write, read) };
    },
    replay: { partition: partitionForNew, outcome: (_ctx, reply) => ({ status: 201, body: { id: (reply as { id: string }).id } }) },
  });
}

test('a command sent beside the write that answers for the kept answer waits for its reply: a retry replays, whatever the other finds', async (t) => {
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('beside') });
  const product = (await t.context.call({ method: 'POST', path: '/v1/products', headers: { ...bearer(tok), ...json }, body: { name: 'Beside', price: 100, currency: 'EUR' } })).json<{ id: string }>().id;
  // A create that reads a product at the same time as it writes (no route does this yet).
  const pair = orderAndProductRoute('/v1/test-pairs', product, async (write, read) => {
    const [order] = await Promise.all([write(), read()]);
    return { id: order.id };
  });
  const bus = new LocalBus(t.context.host, 5000);
  const create: Call = { method: 'POST', path: '/v1/test-pairs', headers: { ...bearer(tok), 'idempotency-key': 'pair-1' } };
  const first = await t.context.call(create, gatewayOn(t.context.dir, bus, silentLog(), [pair]));
  t.is(first.status, 201, first.text);
  t.is((await t.context.call({ method: 'DELETE', path: `/v1/products/${product}`, headers: bearer(tok) })).status, 204);
  // Through a gateway keeping nothing: the write is sent unasked; the read beside it, which
  // would now be a 404, waits for the write's reply and is never sent.
  const retry = await t.context.call(create, gatewayOn(t.context.dir, bus, silentLog(), [pair]));
  t.is(retry.status, 201, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.is(retry.text, first.text);
});

test('a command sent after the write that answers for the kept answer came back kept is never sent: the retry replays', async (t) => {
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('after') });
  const product = (await t.context.call({ method: 'POST', path: '/v1/products', headers: { ...bearer(tok), ...json }, body: { name: 'After', price: 100, currency: 'EUR' } })).json<{ id: string }>().id;
  // A create that reads a product once its write is done (no route does this yet).
  const sent: string[] = [];
  const then = orderAndProductRoute('/v1/test-thens', product, async (write, read) => {
    sent.push('order.create');
    const order = await write();
    sent.push('product.get');
    return { id: order.id, product: (await read()).id };
  });
  const bus = new LocalBus(t.context.host, 5000);
  const create: Call = { method: 'POST', path: '/v1/test-thens', headers: { ...bearer(tok), 'idempotency-key': 'then-1' } };
  const first = await t.context.call(create, gatewayOn(t.context.dir, bus, silentLog(), [then]));
  t.is(first.status, 201, first.text);
  t.is(first.json<{ product: string }>().product, product);
  t.is((await t.context.call({ method: 'DELETE', path: `/v1/products/${product}`, headers: bearer(tok) })).status, 204);
  // Through a gateway keeping nothing: the write is sent unasked and comes back kept; the read
  // after it, which would now be a 404, is never sent, and the answer is the kept one.
  sent.length = 0;
  const retry = await t.context.call(create, gatewayOn(t.context.dir, bus, silentLog(), [then]));
  t.is(retry.status, 201, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.is(retry.json<{ id: string }>().id, first.json<{ id: string }>().id);
  t.deepEqual(sent, ['order.create', 'product.get'], 'the handler went on, and its read was refused before it was sent');
});

test("a keyed webhook endpoint create is replayed before the target's address is looked up again", async (t) => {
  const tok = await token(SECRET, 'webhooks:read webhooks:write', { tenant: freshTenant('hook-key') });
  let lookups = 0;
  const resolver: Resolver = async () => {
    lookups++;
    return [{ address: '93.184.216.34', family: 4 }];
  };
  const create: Call = {
    method: 'POST',
    path: '/v1/webhook-endpoints',
    headers: { ...bearer(tok), ...json, 'idempotency-key': 'hook-1' },
    body: { endpointUrl: 'https://hooks.example.com/in', eventTypes: ['order.created'] },
  };
  const first = await t.context.call(create, gatewayOver(t.context.host, t.context.dir, [], { resolver }).gw);
  t.is(first.status, 201, first.text);
  t.is(lookups, 1);
  const again = gatewayOver(t.context.host, t.context.dir, [], { resolver });
  const retry = await t.context.call(create, again.gw);
  t.is(retry.status, 201, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.is(retry.text, first.text, 'the same signing secret');
  t.is(lookups, 1, 'the retry did not wait on DNS');
  t.deepEqual(again.kinds, ['idem.peek']);
});

test('a keyed retry is answered while the writes it would queue behind fill the mailbox', async (t) => {
  const dir = await tempDir('pipeline-busy');
  const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 8, log: silentLog() });
  try {
    const { gw } = gatewayOver(host, dir);
    const tok = await token(SECRET, `${ALL_SCOPES} users:read users:write`, { tenant: freshTenant('busy') });
    const call = async (c: Call): Promise<Answer> => answerOf(await gw.handle(toRequest(c)));
    const create: Call = { method: 'POST', path: '/v1/users', headers: { ...bearer(tok), ...json, 'idempotency-key': 'busy-1' }, body: { email: 'first@example.com' } };
    const first = await call(create);
    t.is(first.status, 201, first.text);
    // A tenant's users share one queue: these fill it, and the ones past its bound are refused.
    const settled: string[] = [];
    const noted = (name: string, a: Promise<Answer>): Promise<Answer> => a.then((answer) => (settled.push(`${name} ${answer.status}`), answer));
    const burst = Array.from({ length: 12 }, (_, i) => noted('burst', call({ method: 'POST', path: '/v1/users', headers: { ...bearer(tok), ...json }, body: { email: `b${i}@example.com` } })));
    // The retry comes once the burst has reached the queue.
    await new Promise((resolve) => setImmediate(resolve));
    const retry = noted('retry', call(create));
    const statuses = (await Promise.all(burst)).map((a) => a.status);
    t.true(statuses.includes(503), `the burst overflows the queue: ${statuses.join(' ')}`);
    const again = await retry;
    t.is(again.status, 201, again.text);
    t.is(again.headers['idempotent-replayed'], 'true');
    t.is(again.text, first.text);
    // Answered before any write queued ahead of it was done: it did not wait its turn.
    t.true(settled.indexOf('retry 201') < settled.indexOf('burst 201'), settled.join(', '));
  } finally {
    await host.close();
    await removeDir(dir);
  }
});
