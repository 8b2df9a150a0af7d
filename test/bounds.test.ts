// Limits that keep one client from growing state, fan-out or queues without bound, and the walls
// that keep index keys from being forged: each case here is a way the service was reachable
// before it was closed.

import anyTest, { type TestFn } from 'ava';
import { loadConfig } from '../common/config.js';
import { newId, partitionOf } from '../common/ids.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost, CLOCK_SKEW_MS, skewAllowance } from '../actors/host.js';
import { orderActor } from '../actors/orders.js';
import { Authenticator } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import { allRoutes } from '../gateway/app.js';
import { createGateway, type Gateway } from '../gateway/pipeline.js';
import { MAX_BATCH_PRODUCTS } from '../gateway/resources/order-batch.js';
import { cachedRendering } from '../gateway/representation.js';
import type { Command, OrderRecord } from '../proto/messages.js';
import { ALL_SCOPES, answerOf, assertProblem, capturingLog, failCommits, freshTenant, removeDir, silentLog, tempDir, toRequest, token, type Call } from './helpers/edge-kit.js';
import { allPartitions } from '../common/partitions.js';

interface Context {
  dir: string;
  host: ActorHost;
  gateway: Gateway;
  secret: string;
}

const test = anyTest as TestFn<Context>;
const ALL = allPartitions();

test.before(async (t) => {
  const dir = await tempDir('bounds');
  const secret = 'bounds-secret-0123456789abcdef0123456';
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: silentLog() });
  const gateway = createGateway({
    routes: allRoutes(),
    auth: new Authenticator(secret),
    bus: new BusClient(new LocalBus(host, 5000)),
    config: loadConfig({ DATA_DIR: dir }),
    log: silentLog(),
  });
  t.context = { dir, host, gateway, secret };
});

test.after.always(async (t) => {
  await t.context.host?.close();
  await removeDir(t.context.dir);
});

async function as(t: { context: Context }, tenant: string, scopes = ALL_SCOPES): Promise<(c: Call) => Promise<ReturnType<typeof answerOf>>> {
  const auth = `Bearer ${await token(t.context.secret, scopes, { tenant })}`;
  return async (c) => {
    const headers: Record<string, string> = { authorization: auth, ...c.headers };
    if (c.body !== undefined) headers['content-type'] ??= 'application/json';
    return answerOf(await t.context.gateway.handle(toRequest({ ...c, headers })));
  };
}

test('a product name with control characters is refused; index keys cannot be forged through it', async (t) => {
  const call = await as(t, freshTenant('ctl'));
  const forged = `${'a'.repeat(70)}\u0000prd_0000000000000000000000`;
  const r = await call({ method: 'POST', path: '/v1/products', body: { name: forged, price: 1, currency: 'EUR' } });
  const p = assertProblem(t, r, 422, 'validation-failed');
  t.is(p.errors?.[0]?.pointer, '/name');
  const list = await call({ method: 'GET', path: '/v1/products' });
  t.deepEqual(list.json<{ data: unknown[] }>().data, []);
});

test('a token whose tenant holds control characters or a lone surrogate is 401; an emoji tenant is fine', async (t) => {
  for (const tenant of ['a\u0000b', 'a\ud800b', '\udc00']) {
    const auth = `Bearer ${await token(t.context.secret, ALL_SCOPES, { tenant })}`;
    const r = answerOf(await t.context.gateway.handle(toRequest({ method: 'GET', path: '/v1/orders', headers: { authorization: auth } })));
    assertProblem(t, r, 401, 'unauthenticated');
  }
  const auth = `Bearer ${await token(t.context.secret, ALL_SCOPES, { tenant: 'shop-🍕' })}`;
  const r = answerOf(await t.context.gateway.handle(toRequest({ method: 'GET', path: '/v1/orders', headers: { authorization: auth } })));
  t.is(r.status, 200);
});

test('metadata stays within 50 keys after merge patches, and a refused patch changes nothing', async (t) => {
  const call = await as(t, freshTenant('meta'));
  const first = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, 'v']));
  const created = await call({ method: 'POST', path: '/v1/orders', body: { currency: 'EUR', metadata: first } });
  t.is(created.status, 201);
  const path = created.headers.location!;
  const more = await call({ method: 'PATCH', path, body: { metadata: { extra: 'x' } } });
  const p = assertProblem(t, more, 422, 'validation-failed');
  t.is(p.errors?.[0]?.pointer, '/metadata');
  const after = await call({ method: 'GET', path });
  t.is(after.headers.etag, created.headers.etag, 'the order did not change');
  t.is(Object.keys(after.json<{ metadata: object }>().metadata).length, 50);
  // Replacing a key while removing another keeps the count and is allowed.
  const swap = await call({ method: 'PATCH', path, body: { metadata: { k0: null, extra: 'x' } } });
  t.is(swap.status, 200);
});

test('expand=items.product refuses a page that would embed more than 500 products', async (t) => {
  const call = await as(t, freshTenant('fan'));
  const products: string[] = [];
  for (let i = 0; i < 501; i++) {
    const r = await call({ method: 'POST', path: '/v1/products', body: { name: `p${i}`, price: 1, currency: 'EUR' } });
    products.push(r.json<{ id: string }>().id);
  }
  for (let o = 0; o < 6; o++) {
    const items = products.slice(o * 100, o * 100 + 100).map((productId) => ({ productId, quantity: 1 }));
    t.is((await call({ method: 'POST', path: '/v1/orders', body: { currency: 'EUR', items } })).status, 201);
  }
  const wide = await call({ method: 'GET', path: '/v1/orders', query: 'expand=items.product&limit=6' });
  const p = assertProblem(t, wide, 400, 'invalid-parameter');
  t.is(p.errors?.[0]?.parameter, 'expand');
  const narrow = await call({ method: 'GET', path: '/v1/orders', query: 'expand=items.product&limit=5' });
  t.is(narrow.status, 200);
  t.is(narrow.json<{ data: { items: { product: { id: string } }[] }[] }>().data.length, 5);
});

test('an item priced in a currency the order no longer has is refused by the actor', (t) => {
  const now = Date.now();
  const id = newId('order');
  const order: OrderRecord = {
    id, tenant: 't', version: 2, status: 'pending', currency: 'USD', customerId: null, note: null, metadata: {}, items: [], total: 0, createdAt: now, updatedAt: now,
  };
  const cmd: Command = {
    kind: 'order.addItem', tenant: 't', partition: partitionOf(id), id, ifMatch: undefined, currency: 'EUR',
    item: { id: newId('item', partitionOf(id)), productId: newId('product'), quantity: 1, unitPrice: 100 },
  };
  const err = t.throws(() => orderActor.decide(cmd as Parameters<typeof orderActor.decide>[0], order, now));
  t.is((err as { slug?: string }).slug, 'conflict');
});

test('a write whose sender already gave up is dropped unrun', async (t) => {
  const id = newId('order');
  const base = { tenant: 'late', partition: partitionOf(id), id };
  const late = await t.context.host.handle({ ...base, kind: 'order.create', input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [], budgetMs: -1 });
  t.like(late, { ok: false, error: { code: 'unavailable' } });
  t.like(await t.context.host.handle({ ...base, kind: 'order.get' }), { ok: false, error: { code: 'not-found' } });
});

test('a write whose sender\'s deadline passed on the wall clock is dropped unrun, however much budget it carries', async (t) => {
  // A message held up before the node read it (a stalled nats-server, a paused node) still
  // carries its whole budget; its wall-clock deadline shows it is late.
  const create = (id: string, deadlineAt: number): Command => ({ tenant: 'late', partition: partitionOf(id), id, kind: 'order.create', input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [], budgetMs: 60_000, deadlineAt });
  const stale = newId('order');
  t.like(await t.context.host.handle(create(stale, Date.now() - 2000)), { ok: false, error: { code: 'unavailable' } });
  t.like(await t.context.host.handle({ tenant: 'late', partition: partitionOf(stale), id: stale, kind: 'order.get' }), { ok: false, error: { code: 'not-found' } });
  // Within what the clocks may differ by of the deadline, the sender may already have answered
  // 503 by its own clock: dropped too.
  const close = newId('order');
  t.like(await t.context.host.handle(create(close, Date.now() + CLOCK_SKEW_MS / 2)), { ok: false, error: { code: 'unavailable' } });
  t.like(await t.context.host.handle({ tenant: 'late', partition: partitionOf(close), id: close, kind: 'order.get' }), { ok: false, error: { code: 'not-found' } });
  // Further from it, it runs.
  t.like(await t.context.host.handle(create(newId('order'), Date.now() + CLOCK_SKEW_MS + 2000)), { ok: true });
  // A write given less than twice the allowance (BUS_TIMEOUT_MS under 2 s) is allowed half its time.
  const short = (deadlineAt: number): Command => ({ ...create(newId('order'), deadlineAt), budgetMs: 400 });
  t.is(skewAllowance(400), 200);
  t.like(await t.context.host.handle(short(Date.now() + 350)), { ok: true });
  t.like(await t.context.host.handle(short(Date.now() + 150)), { ok: false, error: { code: 'unavailable' } });
});

test('writes dropped as late by the wall clock alone are logged at warn, once a minute, with their count', async (t) => {
  // What an actor node whose clock runs ahead of the gateway's sees: every write past its deadline.
  const dir = await tempDir('late-log');
  const lines: string[] = [];
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: capturingLog(lines) });
  try {
    const create = (deadlineAt: number, budgetMs = 60_000, id = newId('order')): Command => {
      return { tenant: 'skewed', partition: partitionOf(id), id, kind: 'order.create', input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [], budgetMs, deadlineAt };
    };
    const late = (): { level: number; msg: string; dropped?: number; pastCutoffMs?: number }[] =>
      lines.map((l) => JSON.parse(l) as { level: number; msg: string; dropped?: number; pastCutoffMs?: number }).filter((l) => l.msg.includes("this node's clock"));
    // Late by the wall clock and by the time it carries alike: a write that waited its time out in
    // its key's queue, here behind a commit that takes 600 ms.
    failCommits(host, 1, 600);
    const busy = newId('order');
    const first = host.handle(create(Date.now() + 60_000, 60_000, busy));
    const queued = host.handle(create(Date.now() + 700, 1000, busy));
    t.like(await first, { ok: false });
    t.like(await queued, { ok: false, error: { code: 'unavailable' } });
    t.deepEqual(late(), [], 'a write late by both clocks says nothing of them');
    for (let i = 0; i < 3; i++) t.like(await host.handle(create(Date.now() - 5000)), { ok: false, error: { code: 'unavailable' } });
    t.like(await host.handle(create(Date.now() + CLOCK_SKEW_MS + 5000)), { ok: true });
    t.is(late().length, 1, 'one line for three drops within a minute');
    t.like(late()[0], { level: 40, dropped: 1 });
    t.true(late()[0]!.pastCutoffMs! >= 5000 + CLOCK_SKEW_MS, `past by ${String(late()[0]!.pastCutoffMs)} ms`);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('the in-flight bound counts queued writes, not only running ones', async (t) => {
  const dir = await tempDir('inflight');
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, inflightLimit: 2, log: silentLog() });
  try {
    const id = newId('order');
    const base = { tenant: 'busy', partition: partitionOf(id), id };
    const create = host.handle({ ...base, kind: 'order.create', input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] });
    const queued = host.handle({ ...base, kind: 'order.patch', ifMatch: undefined, patch: { note: 'a' } });
    const refused = await host.handle({ ...base, kind: 'order.patch', ifMatch: undefined, patch: { note: 'b' } });
    t.like(refused, { ok: false, error: { code: 'unavailable' } });
    t.like(await create, { ok: true });
    t.like(await queued, { ok: true });
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('renderings are cached per version and variant; large ones are not kept', (t) => {
  let renders = 0;
  const small = () => (renders++, { a: 1 });
  cachedRendering('bounds-small', 1, 'v', small);
  cachedRendering('bounds-small', 1, 'v', small);
  t.is(renders, 1, 'a small rendering is served from the cache');
  cachedRendering('bounds-small', 2, 'v', small);
  t.is(renders, 2, 'a new version renders again');
  let bigRenders = 0;
  const big = () => (bigRenders++, { blob: 'x'.repeat(20_000) });
  cachedRendering('bounds-big', 1, 'v', big);
  cachedRendering('bounds-big', 1, 'v', big);
  t.is(bigRenders, 2, 'a rendering over the size limit is not kept');
});

test('the next link after the longest product name sorts on is followed, not refused', async (t) => {
  const call = await as(t, freshTenant('cursor'));
  // 200 code points (the name limit) of four UTF-8 bytes each: the longest value a cursor holds.
  for (const c of ['😀', '😁']) {
    t.is((await call({ method: 'POST', path: '/v1/products', body: { name: c.repeat(200), price: 1, currency: 'EUR' } })).status, 201);
  }
  const first = await call({ method: 'GET', path: '/v1/products', query: 'sort=name&limit=1' });
  const next = first.json<{ _links: { next?: { href: string } } }>()._links.next?.href ?? '';
  t.true(next.length > 1024, `a cursor of ${next.length} characters`);
  const [path, query] = next.split('?');
  const second = await call({ method: 'GET', path: path!, query: query! });
  t.is(second.status, 200, second.text);
  t.is(second.json<{ data: { name: string }[] }>().data[0]?.name, '😁'.repeat(200));
});

test("a cursor is good only for the collection that issued it; one issued before cursors named theirs is still followed", async (t) => {
  const call = await as(t, freshTenant('cursor-bound'), `${ALL_SCOPES} users:read users:write`);
  for (let i = 0; i < 2; i++) {
    t.is((await call({ method: 'POST', path: '/v1/products', body: { name: `p${i}`, price: 1, currency: 'EUR' } })).status, 201);
    t.is((await call({ method: 'POST', path: '/v1/users', body: { email: `u${i}@example.com`, name: `u${i}` } })).status, 201);
  }
  const firstProducts = await call({ method: 'GET', path: '/v1/products', query: 'limit=1' });
  const next = firstProducts.json<{ _links: { next?: { href: string } } }>()._links.next?.href ?? '';
  const cursor = new URLSearchParams(next.split('?')[1]).get('cursor') ?? '';
  t.not(cursor, '');

  // The products cursor on users, with the same (default) sort and no filter: refused, naming it.
  const users = await call({ method: 'GET', path: '/v1/users', query: `limit=1&cursor=${cursor}` });
  const p = assertProblem(t, users, 400, 'invalid-parameter');
  t.is(p.errors?.[0]?.parameter, 'cursor');
  t.regex(p.errors?.[0]?.detail ?? '', /another collection/);

  // The same position without the collection, as cursors were issued before: followed.
  const body = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as Record<string, unknown>;
  t.is(body.c, 'product');
  delete body.c;
  const legacy = Buffer.from(JSON.stringify(body)).toString('base64url');
  const second = await call({ method: 'GET', path: '/v1/products', query: `limit=1&cursor=${legacy}` });
  t.is(second.status, 200, second.text);
  const [a, b] = [firstProducts, second].map((r) => r.json<{ data: { id: string }[] }>().data[0]?.id);
  t.truthy(b);
  t.not(a, b);
  const followed = await call({ method: 'GET', path: next.split('?')[0]!, query: next.split('?')[1]! });
  t.is(followed.json<{ data: { id: string }[] }>().data[0]?.id, b);
});

test(`a batch naming more than ${MAX_BATCH_PRODUCTS} distinct products is 413 before any is read, partial or atomic, and writes nothing; ${MAX_BATCH_PRODUCTS} are priced`, async (t) => {
  const call = await as(t, freshTenant('batch-products'));
  // Ids of products that do not exist, well formed (a malformed one is refused without a read).
  const ids = Array.from({ length: MAX_BATCH_PRODUCTS + 1 }, () => newId('product'));
  const batchOf = (n: number, atomic: boolean) => ({
    atomic,
    operations: Array.from({ length: Math.ceil(n / 100) }, (_, op) => ({
      method: 'POST',
      body: { currency: 'EUR', items: Array.from({ length: Math.min(100, n - op * 100) }, (_, i) => ({ productId: ids[op * 100 + i], quantity: 1 })) },
    })),
  });
  for (const atomic of [false, true]) {
    const over = await call({ method: 'POST', path: '/v1/orders/batch', body: batchOf(MAX_BATCH_PRODUCTS + 1, atomic) });
    t.regex(assertProblem(t, over, 413, 'payload-too-large').detail ?? '', new RegExp(`${MAX_BATCH_PRODUCTS + 1} distinct products`));
  }
  // At the bound they are looked up: none exists, so each create is refused on its own.
  const at = await call({ method: 'POST', path: '/v1/orders/batch', body: batchOf(MAX_BATCH_PRODUCTS, false) });
  t.is(at.status, 207, at.text);
  t.true(at.json<{ results: { status: number }[] }>().results.every((r) => r.status === 422));
  t.is((await call({ method: 'GET', path: '/v1/orders' })).json<{ data: unknown[] }>().data.length, 0);
});

test('a large invalid body names its first failure; a small one names every failure, at most 100', async (t) => {
  const call = await as(t, freshTenant('big'));
  // 40,000 metadata members: one failed limit check answers it, not 40,000 member checks.
  const huge = await call({ method: 'POST', path: '/v1/orders', body: { currency: 'EUR', metadata: Object.fromEntries(Array.from({ length: 40_000 }, (_, i) => [`k${i}`, 'v'])) } });
  const p = assertProblem(t, huge, 422, 'validation-failed');
  t.is(p.errors?.length, 1);
  t.is(p.errors?.[0]?.pointer, '/metadata');
  // Small, with three bad members: all three.
  const small = await call({ method: 'POST', path: '/v1/orders', body: { currency: 'eur', note: 5, customerId: '' } });
  t.is(assertProblem(t, small, 422, 'validation-failed').errors?.length, 3);
  // Small, with 300 bad items: the first 100, and the count.
  const many = await call({ method: 'POST', path: '/v1/orders/batch', body: { operations: Array.from({ length: 100 }, () => ({ method: 'GET', id: 1, ifMatch: 2 })) } });
  t.is(many.status, 207);
  const items = await call({ method: 'POST', path: '/v1/orders', body: { currency: 'EUR', items: Array.from({ length: 300 }, () => ({ productId: 1, quantity: 0 })) } });
  const pi = assertProblem(t, items, 422, 'validation-failed');
  t.is(pi.errors?.length, 100);
  t.regex(pi.detail ?? '', /the first 100 are listed/);
});

test('in a batch, the size of the whole request decides: operations of a large batch name their first failure, of a small one every failure', async (t) => {
  const call = await as(t, freshTenant('big-batch'));
  type Result = { status: number; problem?: { errors?: unknown[] } };
  const reported = async (operations: unknown[]): Promise<number[]> => {
    const res = await call({ method: 'POST', path: '/v1/orders/batch', body: { operations } });
    t.is(res.status, 207, res.text);
    return res.json<{ results: Result[] }>().results.map((r) => {
      t.is(r.status, 422);
      return r.problem?.errors?.length ?? 0;
    });
  };
  // Three bad members in each of two operations: a small batch lists all three for each.
  const bad = { method: 'POST', body: { currency: 'eur', note: 5, customerId: '' } };
  t.deepEqual(await reported([bad, bad]), [3, 3]);
  // Ten operations of 200 bad items each, over 64 KiB in all: each names only its first failure,
  // as a single body of that size would.
  const items = { method: 'POST', body: { currency: 'eur', items: Array.from({ length: 200 }, () => ({ productId: 'p', quantity: 0, extra: 'x'.repeat(20) })) } };
  t.true(JSON.stringify({ operations: Array(10).fill(items) }).length > 64 * 1024);
  t.deepEqual(await reported(Array(10).fill(items)), Array(10).fill(1));
});

test('a query naming one parameter many times lists it once, and at most 100 parameters are listed', async (t) => {
  const call = await as(t, freshTenant('query'));
  const repeated = await call({ method: 'GET', path: '/v1/orders', query: Array(1500).fill('a').join('&') });
  const once = assertProblem(t, repeated, 400, 'invalid-parameter');
  t.deepEqual(once.errors, [{ parameter: 'a', detail: 'is not a known parameter' }]);
  const twice = assertProblem(t, await call({ method: 'GET', path: '/v1/orders', query: Array(250).fill('limit=5').join('&') }), 400, 'invalid-parameter');
  t.deepEqual(twice.errors, [{ parameter: 'limit', detail: 'may appear only once' }]);
  const many = await call({ method: 'GET', path: '/v1/orders', query: Array.from({ length: 300 }, (_, i) => `p${i}=1`).join('&') });
  const listed = assertProblem(t, many, 400, 'invalid-parameter').errors ?? [];
  t.is(listed.length, 100);
  t.deepEqual(listed.slice(0, 2), [{ parameter: 'p0', detail: 'is not a known parameter' }, { parameter: 'p1', detail: 'is not a known parameter' }]);
  t.true(many.raw.length < 8192, `${many.raw.length} bytes`);
});
