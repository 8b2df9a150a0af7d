// The end-to-end behaviour of orders, line items and products (CONTRACT §2-6), written once and
// registered against each way of running the service (test/embedded.test.ts,
// test/cluster.test.ts), so both modes are held to the same observable contract.
//
// Every test makes its own data under its own tenant, so tests run concurrently, in any order,
// and a list only ever shows what its test created.

import { randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import type { ExecutionContext, TestFn } from 'ava';
import { PARTITIONS, partitionOf } from '../../common/ids.js';
import { Api, type Caller, type Reply, mintToken } from './client.js';
import type { RunningService } from './service.js';
import { registerArticleSuite } from './article-suite.js';
import { registerRefundSuite } from './refund-suite.js';
import { registerSafeWritesSuite } from './safe-writes-suite.js';
import { registerUserSuite } from './user-suite.js';

export interface SuiteContext {
  service: RunningService;
  api: Api;
}

export type T = ExecutionContext<SuiteContext>;

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const STRONG_TAG = /^"[^"]+"$/;

// ---- helpers ----

/** A fresh tenant per test keeps lists clean across concurrent tests. */
export function newTenant(label: string): string {
  return `${label}-${randomBytes(6).toString('hex')}`;
}

export async function tenant(t: T, label = 'tn', scope?: string): Promise<Caller> {
  return t.context.api.as(newTenant(label), scope);
}

function vary(res: Reply): string[] {
  return (res.headers.vary ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
}

/** RFC 9457 problem+json of the given type, with traceId equal to the Trace-Id header. */
export function assertProblem(t: T, res: Reply, status: number, slug: string, first?: { pointer?: string; parameter?: string; detail?: RegExp }): void {
  t.is(res.status, status, `expected ${status} ${slug}, got ${res.status}: ${res.text}`);
  t.regex(res.headers['content-type'] ?? '', /^application\/problem\+json/);
  const body = res.json;
  t.is(body.type, `/problems/${slug}`);
  t.is(body.status, status);
  t.is(typeof body.title, 'string');
  t.is(typeof body.detail, 'string');
  t.truthy(res.headers['trace-id']);
  t.is(body.traceId, res.headers['trace-id']);
  if (first) {
    t.true(Array.isArray(body.errors) && body.errors.length > 0, `errors[] expected in ${res.text}`);
    const e = body.errors?.[0] ?? {};
    if (first.pointer !== undefined) t.is(e.pointer, first.pointer, res.text);
    if (first.parameter !== undefined) t.is(e.parameter, first.parameter, res.text);
    if (first.detail !== undefined) t.regex(String(e.detail), first.detail);
  }
}

function assertCacheHeaders(t: T, res: Reply): void {
  t.is(res.headers['cache-control'], 'private, no-cache');
  for (const h of ['accept', 'accept-encoding', 'authorization']) t.true(vary(res).includes(h), `Vary names ${h}: ${res.headers.vary}`);
}

interface ProductBody {
  name: string;
  price: number;
  currency: string;
}

export async function createProduct(t: T, c: Caller, body: Partial<ProductBody> = {}): Promise<{ id: string; body: Record<string, unknown> }> {
  const res = await c.post('/v1/products', { name: 'Widget', price: 1250, currency: 'EUR', ...body });
  t.is(res.status, 201, res.text);
  return { id: res.json.id as string, body: res.json };
}

export interface Created {
  id: string;
  href: string;
  etag: string;
  body: Record<string, unknown> & { id: string; total: number; status: string };
}

export async function createOrder(t: T, c: Caller, body: Record<string, unknown> = {}): Promise<Created> {
  const res = await c.post('/v1/orders', { currency: 'EUR', ...body });
  t.is(res.status, 201, res.text);
  return { id: res.json.id, href: `/v1/orders/${res.json.id}`, etag: res.headers.etag ?? '', body: res.json };
}

/** An order holding `quantity` of a product priced 100: its total is 100 × quantity. */
async function orderWithTotal(t: T, c: Caller, productId: string, quantity: number): Promise<Created> {
  return createOrder(t, c, quantity > 0 ? { items: [{ productId, quantity }] } : {});
}

interface Page {
  data: Record<string, unknown>[];
  hasMore: boolean;
  _links: { self: { href: string }; next?: { href: string } };
}

/** Follows `next` links from `first` to the end, asserting the shape of every page on the way. */
async function walk(t: T, c: Caller, first: string, limit: number): Promise<{ ids: string[]; pages: Page[] }> {
  const pages: Page[] = [];
  const ids: string[] = [];
  let href: string | undefined = first;
  while (href) {
    const res = await c.get(href);
    t.is(res.status, 200, `${href}: ${res.text}`);
    const page = res.json as Page;
    t.true(page.data.length <= limit, 'a page holds at most limit entries');
    t.is(page.hasMore, page._links.next !== undefined, 'hasMore exactly when there is a next link');
    if (page.hasMore) t.is(page.data.length, limit, 'only the last page may be short');
    pages.push(page);
    ids.push(...page.data.map((d) => d.id as string));
    href = page._links.next?.href;
    if (pages.length > 100) throw new Error('pagination does not end');
  }
  return { ids, pages };
}

async function listAll(t: T, c: Caller, query: string): Promise<Record<string, unknown>[]> {
  const res = await c.get(`/v1/orders?limit=100${query ? `&${query}` : ''}`);
  t.is(res.status, 200, res.text);
  return res.json.data;
}

/** Code point order, which is also the byte order of UTF-8. */
function byCodePoint(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function byTotalThenId(a: { total: number; id: string }, b: { total: number; id: string }): number {
  return a.total - b.total || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

const sorted = (xs: string[]): string[] => [...xs].sort();

const cursorOf = (href: string): string => new URL(href, 'http://x').searchParams.get('cursor') ?? '';

// ---- the suite ----

/** Starts the service once for the file, runs the whole suite against it, and stops it after. */
export function runOrderSuiteAgainst(test: TestFn<SuiteContext>, start: () => Promise<RunningService>): void {
  test.before(async (t) => {
    const service = await start();
    t.context.service = service;
    t.context.api = new Api(service.url, service.secret);
  });

  test.after.always(async (t) => {
    // The context is partly filled when before() failed half-way.
    const { api, service } = t.context as Partial<SuiteContext>;
    await api?.close();
    await service?.close();
  });

  registerOrderSuite(test);
  registerSafeWritesSuite(test);
  registerUserSuite(test);
  registerArticleSuite(test);
  registerRefundSuite(test);
}

export function registerOrderSuite(test: TestFn<SuiteContext>): void {
  // ---------------- products ----------------

  test('products: create answers 201 with Location and ETag; GET, PATCH and DELETE follow', async (t) => {
    const c = await tenant(t, 'prd');
    const created = await c.post('/v1/products', { name: 'Espresso cup', price: 1250, currency: 'EUR' });
    t.is(created.status, 201);
    const p = created.json;
    t.regex(p.id, /^prd_/);
    t.is(created.headers.location, `/v1/products/${p.id}`);
    t.regex(created.headers.etag ?? '', STRONG_TAG);
    t.like(p, { name: 'Espresso cup', price: 1250, currency: 'EUR', _links: { self: { href: `/v1/products/${p.id}` } } });
    t.regex(p.createdAt, ISO_MS);
    t.regex(p.updatedAt, ISO_MS);

    const read = await c.get(created.headers.location!);
    t.is(read.status, 200);
    t.deepEqual(read.json, p);
    t.is(read.headers.etag, created.headers.etag, 'the create answer and a GET name the same representation');
    assertCacheHeaders(t, read);

    const patched = await c.patch(`/v1/products/${p.id}`, { price: 990 });
    t.is(patched.status, 200, patched.text);
    t.like(patched.json, { id: p.id, name: 'Espresso cup', price: 990, currency: 'EUR' });
    t.not(patched.headers.etag, created.headers.etag);
    t.deepEqual((await c.get(`/v1/products/${p.id}`)).json, patched.json);

    const stale = await c.patch(`/v1/products/${p.id}`, { price: 1 }, { 'if-match': created.headers.etag! });
    assertProblem(t, stale, 412, 'precondition-failed');
    t.is((await c.get(`/v1/products/${p.id}`)).json.price, 990);

    const del = await c.delete(`/v1/products/${p.id}`);
    t.is(del.status, 204);
    t.is(del.raw.length, 0);
    assertProblem(t, await c.get(`/v1/products/${p.id}`), 404, 'not-found');
    assertProblem(t, await c.delete(`/v1/products/${p.id}`), 404, 'not-found');
  });

  test('products: bodies are validated member by member', async (t) => {
    const c = await tenant(t, 'prdv');
    assertProblem(t, await c.post('/v1/products', { name: 'No price', currency: 'EUR' }), 422, 'validation-failed', { pointer: '/price', detail: /required/ });
    assertProblem(t, await c.post('/v1/products', { name: 'Neg', price: -1, currency: 'EUR' }), 422, 'validation-failed', { pointer: '/price' });
    assertProblem(t, await c.post('/v1/products', { name: 'Cur', price: 1, currency: 'euro' }), 422, 'validation-failed', { pointer: '/currency' });
    assertProblem(t, await c.post('/v1/products', { id: 'prd_x', name: 'Id', price: 1, currency: 'EUR' }), 422, 'validation-failed', {
      pointer: '/id',
      detail: /read-only/,
    });
    assertProblem(t, await c.post('/v1/products', { name: 'X', price: 1, currency: 'EUR', colour: 'red' }), 422, 'validation-failed', {
      pointer: '/colour',
      detail: /not a known member/,
    });
    t.deepEqual((await c.get('/v1/products')).json.data, [], 'nothing was created');
  });

  test('products: list sorts by price and pages with next links; fields trims members', async (t) => {
    const c = await tenant(t, 'prdl');
    const prices = [500, 100, 300, 200, 400];
    const made = [];
    for (const price of prices) made.push(await createProduct(t, c, { name: `P${price}`, price }));

    const { ids, pages } = await walk(t, c, '/v1/products?sort=price&limit=2', 2);
    t.is(pages.length, 3);
    t.deepEqual(
      pages.flatMap((p) => p.data.map((d) => d.price)),
      [100, 200, 300, 400, 500],
    );
    t.is(new Set(ids).size, 5);

    const desc = await c.get('/v1/products?sort=-price');
    t.deepEqual(
      desc.json.data.map((d: { price: number }) => d.price),
      [500, 400, 300, 200, 100],
    );
    assertCacheHeaders(t, desc);
    t.regex(desc.headers.etag ?? '', STRONG_TAG, 'collection pages carry an ETag');

    // Default: newest first (-createdAt; products made in the same millisecond by id, descending).
    const newest = await c.get('/v1/products');
    const key = (m: { id: string; body: Record<string, unknown> }): string => `${m.body.createdAt as string} ${m.id}`;
    t.deepEqual(
      newest.json.data.map((d: { id: string }) => d.id),
      [...made].sort((x, y) => (key(x) < key(y) ? 1 : -1)).map((m) => m.id),
    );

    const trimmed = await c.get('/v1/products?fields=name');
    for (const d of trimmed.json.data) t.deepEqual(Object.keys(d).sort(), ['_links', 'id', 'name']);
    assertProblem(t, await c.get('/v1/products?fields=name,weight'), 400, 'invalid-parameter', { parameter: 'fields', detail: /weight/ });
    assertProblem(t, await c.get('/v1/products?sort=weight'), 400, 'invalid-parameter', { parameter: 'sort' });
  });

  test('products: names sort in code point order and every one is listed, whatever its characters', async (t) => {
    const c = await tenant(t, 'prdu');
    // Latin, accented, CJK, fullwidth (U+FF21) and astral (emoji, U+1F355) first characters: UTF-16
    // code unit order and code point order disagree between the last two.
    const names = ['apple', 'Zebra', 'éclair', '中文', 'Ａpple', '🍕 pizza', 'ｚ'];
    for (const name of names) await createProduct(t, c, { name, price: 100 });
    const expected = [...names].sort(byCodePoint);
    for (const limit of [1, 2, 100]) {
      const asc = await walk(t, c, `/v1/products?sort=name&limit=${limit}`, limit);
      t.deepEqual(
        asc.pages.flatMap((p) => p.data.map((d) => d.name)),
        expected,
        `sort=name, limit=${limit}`,
      );
      const desc = await walk(t, c, `/v1/products?sort=-name&limit=${limit}`, limit);
      t.deepEqual(
        desc.pages.flatMap((p) => p.data.map((d) => d.name)),
        [...expected].reverse(),
        `sort=-name, limit=${limit}`,
      );
    }
  });

  // ---------------- orders: create, read, replace, patch, delete ----------------

  test('orders: create with items prices them from the catalogue; 201 with Location and ETag', async (t) => {
    const c = await tenant(t, 'ordc');
    const cup = await createProduct(t, c, { name: 'Cup', price: 1250 });
    const saucer = await createProduct(t, c, { name: 'Saucer', price: 300 });
    const res = await c.post('/v1/orders', {
      currency: 'EUR',
      customerId: 'cus_42',
      note: 'gift wrap',
      metadata: { channel: 'web' },
      items: [
        { productId: cup.id, quantity: 2 },
        { productId: saucer.id, quantity: 3, unitPrice: 250 },
      ],
    });
    t.is(res.status, 201, res.text);
    const o = res.json;
    t.regex(o.id, /^ord_/);
    t.is(res.headers.location, `/v1/orders/${o.id}`);
    t.regex(res.headers.etag ?? '', STRONG_TAG);
    t.regex(res.headers['content-type'] ?? '', /^application\/json/);
    t.like(o, { status: 'pending', currency: 'EUR', total: 2 * 1250 + 3 * 250, customerId: 'cus_42', note: 'gift wrap', metadata: { channel: 'web' } });
    t.is(o.items, undefined, 'items are embedded only with expand=items');
    t.regex(o.createdAt, ISO_MS);
    t.regex(o.updatedAt, ISO_MS);
    t.deepEqual(o._links.self, { href: `/v1/orders/${o.id}` });
    t.deepEqual(o._links.items, { href: `/v1/orders/${o.id}/items` });

    const read = await c.get(res.headers.location!);
    t.is(read.status, 200);
    t.deepEqual(read.json, o);
    t.is(read.headers.etag, res.headers.etag);

    const items = (await c.get(`/v1/orders/${o.id}/items`)).json.data;
    t.is(items.length, 2);
    t.like(items[0], { productId: cup.id, quantity: 2, unitPrice: 1250, orderId: o.id });
    t.like(items[1], { productId: saucer.id, quantity: 3, unitPrice: 250, orderId: o.id });
    t.regex(items[0].id, /^itm_/);
  });

  test('orders: an unknown product, or another tenant\'s, is 422 pointing at the item; nothing is created', async (t) => {
    const c = await tenant(t, 'ordu');
    const other = await tenant(t, 'ordu-other');
    const mine = await createProduct(t, c, { price: 100 });
    const theirs = await createProduct(t, other, { price: 100 });
    const gone = await createProduct(t, c, { price: 100 });
    t.is((await c.delete(`/v1/products/${gone.id}`)).status, 204);

    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: 'prd_doesnotexist', quantity: 1 }] }), 422, 'validation-failed', {
      pointer: '/items/0/productId',
    });
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: theirs.id, quantity: 1 }] }), 422, 'validation-failed', {
      pointer: '/items/0/productId',
    });
    const mixed = await c.post('/v1/orders', {
      currency: 'EUR',
      items: [
        { productId: mine.id, quantity: 1 },
        { productId: gone.id, quantity: 1 },
        { productId: theirs.id, quantity: 1 },
      ],
    });
    assertProblem(t, mixed, 422, 'validation-failed', { pointer: '/items/1/productId' });
    t.deepEqual(
      mixed.json.errors.map((e: { pointer: string }) => e.pointer),
      ['/items/1/productId', '/items/2/productId'],
    );
    t.deepEqual(await listAll(t, c, ''), [], 'no order was created');
  });

  test('orders: create validates the body and refuses read-only members', async (t) => {
    const c = await tenant(t, 'ordv');
    const usd = await createProduct(t, c, { currency: 'USD', price: 100 });
    assertProblem(t, await c.post('/v1/orders', {}), 422, 'validation-failed', { pointer: '/currency' });
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', status: 'paid' }), 422, 'validation-failed', { pointer: '/status', detail: /read-only/ });
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', total: 5 }), 422, 'validation-failed', { pointer: '/total', detail: /read-only/ });
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: usd.id, quantity: 0 }] }), 422, 'validation-failed', {
      pointer: '/items/0/quantity',
    });
    // A product priced in another currency needs an explicit unit price.
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: usd.id, quantity: 1 }] }), 422, 'validation-failed', {
      pointer: '/items/0/unitPrice',
    });
    const ok = await createOrder(t, c, { items: [{ productId: usd.id, quantity: 1, unitPrice: 90 }] });
    t.is(ok.body.total, 90);
    assertProblem(t, await c.post('/v1/orders', 'not json', undefined), 422, 'validation-failed');
    const malformed = await c.http.send('POST', '/v1/orders', { token: c.token, body: '{"currency":', contentType: 'application/json' });
    assertProblem(t, malformed, 400, 'malformed-request');
    t.is((await listAll(t, c, '')).length, 1);
  });

  test('text members refuse a lone surrogate (422): it could not be stored and read back unchanged', async (t) => {
    const c = await tenant(t, 'surr');
    // JSON.stringify writes a lone surrogate as the escape \ud800, as a client would send it.
    const lone = 'a\ud800b';
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', note: lone }), 422, 'validation-failed', { pointer: '/note' });
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', customerId: '\udc00' }), 422, 'validation-failed', { pointer: '/customerId' });
    assertProblem(t, await c.post('/v1/orders', { currency: 'EUR', metadata: { k: lone } }), 422, 'validation-failed', { pointer: '/metadata/k' });
    assertProblem(t, await c.post('/v1/products', { name: lone, price: 1, currency: 'EUR' }), 422, 'validation-failed', { pointer: '/name' });
    t.deepEqual(await listAll(t, c, ''), [], 'no order was created');

    // A pair is one character, and round-trips.
    const o = await createOrder(t, c, { note: 'tea \u{1F375}', customerId: '\u{1F600}', metadata: { k: '\u{10FFFF}' } });
    assertProblem(t, await c.patch(o.href, { note: lone }), 422, 'validation-failed', { pointer: '/note' });
    assertProblem(t, await c.patch(o.href, { metadata: { k: '\udfff' } }), 422, 'validation-failed', { pointer: '/metadata/k' });
    assertProblem(t, await c.put(o.href, { currency: 'EUR', note: lone }), 422, 'validation-failed', { pointer: '/note' });
    const read = await c.get(o.href);
    t.is(read.headers.etag, o.etag, 'the refused writes changed nothing');
    t.deepEqual(read.json, o.body);
    t.like(read.json, { note: 'tea \u{1F375}', customerId: '\u{1F600}', metadata: { k: '\u{10FFFF}' } });
  });

  test('orders: PUT replaces every writable member and clears omitted ones; items are read-only', async (t) => {
    const c = await tenant(t, 'ordput');
    const p = await createProduct(t, c, { price: 700 });
    const o = await createOrder(t, c, { customerId: 'cus_1', note: 'n', metadata: { a: '1' }, items: [{ productId: p.id, quantity: 2 }] });

    const refused = await c.put(o.href, { currency: 'EUR', items: [] });
    assertProblem(t, refused, 422, 'validation-failed', { pointer: '/items', detail: /read-only/ });
    assertProblem(t, await c.put(o.href, { currency: 'EUR', status: 'paid' }), 422, 'validation-failed', { pointer: '/status', detail: /read-only/ });
    assertProblem(t, await c.put(o.href, { note: 'no currency' }), 422, 'validation-failed', { pointer: '/currency' });
    const unchanged = await c.get(o.href);
    t.is(unchanged.headers.etag, o.etag, 'refused replacements changed nothing');

    const res = await c.put(o.href, { currency: 'EUR', note: 'replaced' });
    t.is(res.status, 200, res.text);
    t.like(res.json, { id: o.id, status: 'pending', currency: 'EUR', total: 1400, customerId: null, note: 'replaced', metadata: {} });
    t.not(res.headers.etag, o.etag);
    t.deepEqual((await c.get(o.href)).json, res.json);
    t.is((await c.get(`${o.href}/items`)).json.data.length, 1, 'items are kept by a replacement');
  });

  test('orders: PATCH is a JSON merge patch; null removes a metadata key', async (t) => {
    const c = await tenant(t, 'ordpatch');
    const o = await createOrder(t, c, { customerId: 'cus_1', note: 'first', metadata: { keep: 'k', drop: 'd' } });

    const res = await c.patch(o.href, { note: 'second', metadata: { drop: null, add: 'a' } });
    t.is(res.status, 200, res.text);
    t.like(res.json, { customerId: 'cus_1', note: 'second', currency: 'EUR' });
    t.deepEqual(res.json.metadata, { keep: 'k', add: 'a' });
    t.not(res.headers.etag, o.etag);
    t.true(res.json.updatedAt >= (o.body.updatedAt as string));

    const viaJson = await c.patch(o.href, { note: null }, undefined, 'application/json');
    t.is(viaJson.status, 200, 'application/json is accepted as a merge patch');
    t.is(viaJson.json.note, null);
    t.is(viaJson.json.customerId, 'cus_1');

    const cleared = await c.patch(o.href, { metadata: null });
    t.deepEqual(cleared.json.metadata, {});

    assertProblem(t, await c.patch(o.href, { total: 1 }), 422, 'validation-failed', { pointer: '/total', detail: /read-only/ });
    assertProblem(t, await c.patch(o.href, { items: [] }), 422, 'validation-failed', { pointer: '/items', detail: /read-only/ });
    assertProblem(t, await c.patch(o.href, { note: 'x' }, undefined, 'text/plain'), 415, 'unsupported-media-type');
    t.deepEqual((await c.get(o.href)).json, cleared.json, 'refused patches changed nothing');
  });

  test('orders: DELETE answers 204, then GET and DELETE answer 404', async (t) => {
    const c = await tenant(t, 'orddel');
    const o = await createOrder(t, c);
    const del = await c.delete(o.href);
    t.is(del.status, 204);
    t.is(del.raw.length, 0);
    t.truthy(del.headers['trace-id']);
    assertProblem(t, await c.get(o.href), 404, 'not-found');
    assertProblem(t, await c.delete(o.href), 404, 'not-found');
    assertProblem(t, await c.get(`${o.href}/items`), 404, 'not-found');
    t.deepEqual(await listAll(t, c, ''), []);
    assertProblem(t, await c.get('/v1/orders/ord_nonsense'), 404, 'not-found');
  });

  test('orders: a paid order cannot be deleted (409); a cancelled one can', async (t) => {
    const c = await tenant(t, 'orddel409');
    const p = await createProduct(t, c, { price: 100 });
    const paid = await orderWithTotal(t, c, p.id, 1);
    t.is((await c.post(`${paid.href}/pay`)).status, 200);
    assertProblem(t, await c.delete(paid.href), 409, 'invalid-state');
    t.is((await c.get(paid.href)).json.status, 'paid');

    const cancelled = await createOrder(t, c);
    t.is((await c.post(`${cancelled.href}/cancel`)).status, 200);
    t.is((await c.delete(cancelled.href)).status, 204);
  });

  // ---------------- line items ----------------

  test('line items: POST answers 201 with Location; GET one; the order total follows', async (t) => {
    const c = await tenant(t, 'itm');
    const p = await createProduct(t, c, { price: 450 });
    const o = await createOrder(t, c);
    t.is(o.body.total, 0);

    const res = await c.post(`${o.href}/items`, { productId: p.id, quantity: 2 });
    t.is(res.status, 201, res.text);
    const item = res.json;
    t.regex(item.id, /^itm_/);
    t.is(res.headers.location, `${o.href}/items/${item.id}`);
    t.regex(res.headers.etag ?? '', STRONG_TAG);
    t.like(item, { orderId: o.id, productId: p.id, quantity: 2, unitPrice: 450 });
    t.deepEqual(item._links.self, { href: res.headers.location });
    t.regex(item.createdAt, ISO_MS);

    const one = await c.get(res.headers.location!);
    t.is(one.status, 200);
    t.deepEqual(one.json, item);
    assertCacheHeaders(t, one);
    t.regex(one.headers.etag ?? '', STRONG_TAG);
    const revalidated = await c.get(res.headers.location!, { 'if-none-match': one.headers.etag! });
    t.is(revalidated.status, 304);
    t.is(revalidated.raw.length, 0);

    const priced = await c.post(`${o.href}/items`, { productId: p.id, quantity: 1, unitPrice: 99 });
    t.is(priced.status, 201);
    t.is(priced.json.unitPrice, 99);
    t.is((await c.get(o.href)).json.total, 2 * 450 + 99);

    assertProblem(t, await c.get(`${o.href}/items/itm_nope`), 404, 'not-found');
    assertProblem(t, await c.post(`${o.href}/items`, { productId: 'prd_unknown', quantity: 1 }), 422, 'validation-failed', { pointer: '/productId' });
    assertProblem(t, await c.post(`${o.href}/items`, { productId: p.id, quantity: 0 }), 422, 'validation-failed', { pointer: '/quantity' });
    assertProblem(t, await c.post(`${o.href}/items`, { productId: p.id, quantity: 1, id: 'itm_x' }), 422, 'validation-failed', {
      pointer: '/id',
      detail: /read-only/,
    });
    assertProblem(t, await c.post('/v1/orders/ord_nope/items', { productId: p.id, quantity: 1 }), 404, 'not-found');
  });

  test('line items: the list keeps the order they were added in and pages with limit and cursor', async (t) => {
    const c = await tenant(t, 'itml');
    const p = await createProduct(t, c, { price: 10 });
    const o = await createOrder(t, c);
    const added: string[] = [];
    for (let q = 1; q <= 5; q++) {
      const r = await c.post(`${o.href}/items`, { productId: p.id, quantity: q });
      t.is(r.status, 201);
      added.push(r.json.id);
    }
    const { ids, pages } = await walk(t, c, `${o.href}/items?limit=2`, 2);
    t.deepEqual(ids, added);
    t.deepEqual(
      pages.map((pg) => pg.data.length),
      [2, 2, 1],
    );
    t.deepEqual(
      pages.flatMap((pg) => pg.data.map((d) => d.quantity)),
      [1, 2, 3, 4, 5],
    );
    const trimmed = await c.get(`${o.href}/items?fields=quantity&limit=1`);
    t.deepEqual(Object.keys(trimmed.json.data[0]).sort(), ['_links', 'id', 'quantity']);
    assertProblem(t, await c.get(`${o.href}/items?limit=0`), 400, 'invalid-parameter', { parameter: 'limit' });
    assertProblem(t, await c.get(`${o.href}/items?cursor=garbage!`), 400, 'invalid-parameter', { parameter: 'cursor' });
    // A cursor belongs to the list that issued it.
    const other = await createOrder(t, c);
    const next = pages[0]!._links.next!.href;
    assertProblem(t, await c.get(`${other.href}/items?cursor=${cursorOf(next)}`), 400, 'invalid-parameter', { parameter: 'cursor' });
  });

  test('line items: only a pending order takes new items (409 invalid-state)', async (t) => {
    const c = await tenant(t, 'itm409');
    const p = await createProduct(t, c, { price: 100 });
    const paid = await orderWithTotal(t, c, p.id, 1);
    t.is((await c.post(`${paid.href}/pay`)).status, 200);
    const cancelled = await createOrder(t, c);
    t.is((await c.post(`${cancelled.href}/cancel`)).status, 200);

    for (const o of [paid, cancelled]) {
      const before = await c.get(o.href);
      assertProblem(t, await c.post(`${o.href}/items`, { productId: p.id, quantity: 1 }), 409, 'invalid-state');
      const after = await c.get(o.href);
      t.is(after.headers.etag, before.headers.etag, 'the refused item changed nothing');
      t.is(after.json.total, before.json.total);
    }
  });

  test('orders: the currency of an order with items cannot change (409); of one without, it can', async (t) => {
    const c = await tenant(t, 'ordcur');
    const p = await createProduct(t, c, { price: 500 });
    const o = await orderWithTotal(t, c, p.id, 1);
    for (const refused of [await c.patch(o.href, { currency: 'JPY' }), await c.put(o.href, { currency: 'JPY' })]) {
      assertProblem(t, refused, 409, 'invalid-state');
      t.regex(refused.json.detail, /items/);
    }
    const after = await c.get(o.href);
    t.is(after.headers.etag, o.etag, 'nothing changed');
    t.like(after.json, { currency: 'EUR', total: 500 });
    t.is((await c.patch(o.href, { currency: 'EUR', note: 'same currency' })).status, 200, 'naming the same currency is no change');
    const empty = await createOrder(t, c);
    const moved = await c.patch(empty.href, { currency: 'JPY' });
    t.is(moved.status, 200, moved.text);
    t.is(moved.json.currency, 'JPY');
  });

  // ---------------- state machine and links ----------------

  test('state: a pending order links cancel, and pay only when its total is above 0', async (t) => {
    const c = await tenant(t, 'st');
    const p = await createProduct(t, c, { price: 100 });
    const empty = await createOrder(t, c);
    t.deepEqual(empty.body._links, {
      self: { href: empty.href },
      items: { href: `${empty.href}/items` },
      cancel: { href: `${empty.href}/cancel`, method: 'POST' },
    });
    assertProblem(t, await c.post(`${empty.href}/pay`), 409, 'invalid-state');
    t.is((await c.get(empty.href)).json.status, 'pending');

    const full = await orderWithTotal(t, c, p.id, 3);
    t.deepEqual(full.body._links, {
      self: { href: full.href },
      items: { href: `${full.href}/items` },
      cancel: { href: `${full.href}/cancel`, method: 'POST' },
      pay: { href: `${full.href}/pay`, method: 'POST' },
    });
    // An item brings the pay link to an empty order.
    t.is((await c.post(`${empty.href}/items`, { productId: p.id, quantity: 1 })).status, 201);
    t.deepEqual((await c.get(empty.href)).json._links.pay, { href: `${empty.href}/pay`, method: 'POST' });
  });

  test('state: pay makes an order paid, with refund links instead of cancel or pay; paying twice is 409', async (t) => {
    const c = await tenant(t, 'stpay');
    const p = await createProduct(t, c, { price: 100 });
    const o = await orderWithTotal(t, c, p.id, 2);
    const paid = await c.post(`${o.href}/pay`);
    t.is(paid.status, 200, paid.text);
    t.like(paid.json, { id: o.id, status: 'paid', total: 200 });
    t.deepEqual(paid.json._links, {
      self: { href: o.href },
      items: { href: `${o.href}/items` },
      refund: { href: '/v1/refunds', method: 'POST' },
      refunds: { href: `/v1/refunds?orderId=${o.id}` },
    });
    t.regex(paid.headers.etag ?? '', STRONG_TAG);
    t.deepEqual((await c.get(o.href)).json, paid.json);

    assertProblem(t, await c.post(`${o.href}/pay`), 409, 'invalid-state');
    assertProblem(t, await c.post(`${o.href}/cancel`), 409, 'invalid-state');
    assertProblem(t, await c.patch(o.href, { currency: 'USD' }), 409, 'invalid-state');
    t.is((await c.get(o.href)).headers.etag, paid.headers.etag, 'refused actions changed nothing');
  });

  test('state: cancel makes an order cancelled; it can then be neither paid nor cancelled', async (t) => {
    const c = await tenant(t, 'stcancel');
    const p = await createProduct(t, c, { price: 100 });
    const o = await orderWithTotal(t, c, p.id, 1);
    const cancelled = await c.post(`${o.href}/cancel`);
    t.is(cancelled.status, 200, cancelled.text);
    t.is(cancelled.json.status, 'cancelled');
    t.deepEqual(cancelled.json._links, { self: { href: o.href }, items: { href: `${o.href}/items` } });
    assertProblem(t, await c.post(`${o.href}/pay`), 409, 'invalid-state');
    assertProblem(t, await c.post(`${o.href}/cancel`), 409, 'invalid-state');
    assertProblem(t, await c.post(`${o.href}/pay`, { now: true }), 422, 'validation-failed');
    t.is((await c.get(o.href)).json.status, 'cancelled');
  });

  // ---------------- lists ----------------

  test('lists: the status filter returns only orders in that status', async (t) => {
    const c = await tenant(t, 'lst');
    const p = await createProduct(t, c, { price: 100 });
    const [a, b, d, e] = await Promise.all([1, 2, 3, 4].map((q) => orderWithTotal(t, c, p.id, q)));
    t.is((await c.post(`${b!.href}/pay`)).status, 200);
    t.is((await c.post(`${d!.href}/pay`)).status, 200);
    t.is((await c.post(`${e!.href}/cancel`)).status, 200);
    const ids = async (status: string): Promise<string[]> => (await listAll(t, c, `status=${status}`)).map((o) => o.id as string).sort();
    t.deepEqual(await ids('pending'), [a!.id]);
    t.deepEqual(await ids('paid'), [b!.id, d!.id].sort());
    t.deepEqual(await ids('cancelled'), [e!.id]);
    t.deepEqual(await ids('refunded'), []);
    for (const o of await listAll(t, c, 'status=paid')) t.is(o.status, 'paid');
    t.is((await listAll(t, c, '')).length, 4);
  });

  test('lists: sort by total ascending and descending, and by createdAt', async (t) => {
    const c = await tenant(t, 'lsort');
    const p = await createProduct(t, c, { price: 100 });
    const made: Created[] = [];
    // Ties on purpose: equal totals are ordered by id.
    for (const q of [3, 1, 4, 1, 5, 0, 4]) made.push(await orderWithTotal(t, c, p.id, q));
    const rows = made.map((m) => ({ id: m.id, total: m.body.total }));

    const asc = await listAll(t, c, 'sort=total');
    t.deepEqual(
      asc.map((o) => o.id),
      [...rows].sort(byTotalThenId).map((r) => r.id),
    );
    const desc = await listAll(t, c, 'sort=-total');
    t.deepEqual(
      desc.map((o) => o.id),
      [...rows].sort(byTotalThenId).reverse().map((r) => r.id),
    );

    // Adding an item moves an order in the total order.
    const smallest = [...rows].sort(byTotalThenId)[0]!;
    t.is((await c.post(`/v1/orders/${smallest.id}/items`, { productId: p.id, quantity: 9 })).status, 201);
    smallest.total += 900;
    t.deepEqual(
      (await listAll(t, c, 'sort=total')).map((o) => o.id),
      [...rows].sort(byTotalThenId).map((r) => r.id),
    );
    t.is((await listAll(t, c, 'sort=-total'))[0]!.id, smallest.id);

    const byCreated = (await listAll(t, c, 'sort=createdAt')).map((o) => ({ id: o.id as string, at: o.createdAt as string }));
    const expected = [...byCreated].sort((x, y) => (x.at < y.at ? -1 : x.at > y.at ? 1 : x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
    t.deepEqual(byCreated, expected, 'ascending createdAt, ties by id');
    t.deepEqual(sorted(byCreated.map((r) => r.id)), sorted(made.map((m) => m.id)));
    const newestFirst = (await listAll(t, c, '')).map((o) => o.id);
    t.deepEqual(newestFirst, [...byCreated].reverse().map((r) => r.id), 'the default is -createdAt');
  });

  test('lists: keyset pagination with next links visits every order exactly once', async (t) => {
    const c = await tenant(t, 'lpage');
    const p = await createProduct(t, c, { price: 100 });
    const made = await Promise.all(Array.from({ length: 25 }, (_, i) => orderWithTotal(t, c, p.id, i % 4)));
    const all = sorted(made.map((m) => m.id));
    t.is(new Set(all).size, 25);
    // Ids are random over the partitions; with 25 of them both halves (so, in cluster mode, both
    // actor nodes) hold some. A failure here is a 1 in 2^24 fluke, not a bug.
    const halves = new Set(made.map((m) => (partitionOf(m.id) < PARTITIONS / 2 ? 'low' : 'high')));
    t.is(halves.size, 2, 'the orders span both halves of the partitions');

    for (const query of ['', 'sort=createdAt', 'sort=total', 'sort=-total']) {
      const { ids, pages } = await walk(t, c, `/v1/orders?limit=7${query ? `&${query}` : ''}`, 7);
      t.deepEqual(
        pages.map((pg) => pg.data.length),
        [7, 7, 7, 4],
        query,
      );
      t.is(new Set(ids).size, ids.length, `no duplicates (${query})`);
      t.deepEqual(sorted(ids), all, `no gaps (${query})`);
      const single = (await listAll(t, c, query)).map((o) => o.id);
      t.deepEqual(ids, single, `pages concatenate to the one-page list (${query})`);
      for (const pg of pages) t.true(pg._links.self.href.includes('limit=7'));
    }

    // Pay ten of them and page through only those, three at a time.
    const toPay = made.filter((m) => m.body.total > 0).slice(0, 10);
    await Promise.all(toPay.map(async (m) => t.is((await c.post(`${m.href}/pay`)).status, 200)));
    const paid = await walk(t, c, '/v1/orders?status=paid&limit=3&sort=-total', 3);
    t.deepEqual(sorted(paid.ids), sorted(toPay.map((m) => m.id)));
    t.is(paid.ids.length, 10);
    t.true(paid.pages.every((pg) => pg.data.every((o) => o.status === 'paid')));
    t.true(paid.pages.every((pg) => pg._links.next === undefined || pg._links.next.href.includes('status=paid')), 'next keeps the filter');
  });

  test('lists: orders as large as the limits allow are listed whole and paged, and read together, in cluster mode too', async (t) => {
    // 50 metadata values of 500 four-byte characters: about 110 KB an order, more than the 64 KB
    // a command's answer was assumed to take; the twelve or so on each actor node are more than
    // the 1 MiB a NATS reply carries by default (the test server's).
    const c = await tenant(t, 'lbig');
    const metadata = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`key${i}`, '😀'.repeat(500)]));
    const made = await Promise.all(Array.from({ length: 24 }, () => createOrder(t, c, { metadata })));
    const all = sorted(made.map((m) => m.id));
    const whole = await listAll(t, c, '');
    t.deepEqual(sorted(whole.map((o) => o.id as string)), all);
    t.true(whole.every((o) => (o.metadata as Record<string, string>).key49 === '😀'.repeat(500)));
    const { ids, pages } = await walk(t, c, '/v1/orders?limit=5', 5);
    t.deepEqual(
      pages.map((pg) => pg.data.length),
      [5, 5, 5, 5, 4],
    );
    t.deepEqual(sorted(ids), all);
    const got = await Promise.all(made.map((m) => c.get(m.href)));
    t.deepEqual(
      got.map((g) => g.status),
      made.map(() => 200),
    );
    t.true(got.every((g) => g.json.metadata.key0 === '😀'.repeat(500)));
  });

  test('bodies: a Content-Encoding other than identity is 415 with Accept-Encoding, and a PATCH 415 names what it accepts (Accept-Patch)', async (t) => {
    const c = await tenant(t, 'coding');
    const json = JSON.stringify({ currency: 'EUR' });
    const send = (body: string | Buffer, coding: string): Promise<Reply> =>
      c.http.send('POST', '/v1/orders', { token: c.token, body, headers: { 'content-type': 'application/json', 'content-encoding': coding } });
    for (const [body, coding] of [[gzipSync(json), 'gzip'], [json, 'gzip'], [json, 'br']] as const) {
      const res = await send(body, coding);
      assertProblem(t, res, 415, 'unsupported-media-type');
      t.is(res.headers['accept-encoding'], 'identity', coding);
    }
    // No coding named: identity, an empty value, a list of them (repeated lines arrive joined).
    for (const coding of ['identity', 'IDENTITY', '', 'identity, identity', ' , identity']) t.is((await send(json, coding)).status, 201, `'${coding}'`);
    assertProblem(t, await send(json, 'identity, gzip'), 415, 'unsupported-media-type');
    t.is((await listAll(t, c, '')).length, 5, 'only those naming no coding were written');
    const order = await createOrder(t, c);
    const patched = await c.patch(order.href, { note: 'x' }, {}, 'text/plain');
    assertProblem(t, patched, 415, 'unsupported-media-type');
    t.regex(patched.headers['accept-patch'] ?? '', /application\/merge-patch\+json/);
  });

  test('fields may name _links, which stays anyway', async (t) => {
    const c = await tenant(t, 'flinks');
    const order = await createOrder(t, c, { note: 'n' });
    const links = await c.get(`${order.href}?fields=_links`);
    t.is(links.status, 200, links.text);
    t.deepEqual(Object.keys(links.json).sort(), ['_links', 'id']);
    const both = await c.get(`${order.href}?fields=note,_links`);
    t.deepEqual(Object.keys(both.json).sort(), ['_links', 'id', 'note']);
    t.is(both.headers.etag, (await c.get(`${order.href}?fields=note`)).headers.etag, 'the same representation, the same tag');
  });

  test('lists: bad limit, sort, status or cursor is 400 invalid-parameter naming the parameter', async (t) => {
    const c = await tenant(t, 'lbad');
    const cases: [string, string][] = [
      ['limit=0', 'limit'],
      ['limit=101', 'limit'],
      ['limit=abc', 'limit'],
      ['limit=-1', 'limit'],
      ['limit=2.5', 'limit'],
      ['sort=bogus', 'sort'],
      ['sort=note', 'sort'],
      ['sort=--total', 'sort'],
      ['status=shipped', 'status'],
      ['cursor=%25%25%25', 'cursor'],
      [`cursor=${Buffer.from('{"x":1}').toString('base64url')}`, 'cursor'],
      ['cursor=', 'cursor'],
      ['fields=status,colour', 'fields'],
      ['expand=customer', 'expand'],
    ];
    for (const [query, parameter] of cases) {
      const res = await c.get(`/v1/orders?${query}`);
      assertProblem(t, res, 400, 'invalid-parameter', { parameter });
    }
    // Every bad value at once (SPEC §7.1 rule 4), and every unknown name of one list in its entry.
    const all = await c.get('/v1/orders?limit=0&sort=nope&status=shipped&fields=foo,status,bar&expand=baz');
    assertProblem(t, all, 400, 'invalid-parameter');
    t.deepEqual(
      (all.json.errors as { parameter: string }[]).map((e) => e.parameter),
      ['status', 'sort', 'limit', 'fields', 'expand'],
    );
    t.regex((all.json.errors as { detail: string }[])[3]!.detail, /unknown fields 'foo', 'bar'/);
    const reader = await tenant(t, 'lbad-reader', 'articles:read users:read');
    const articles = await reader.get('/v1/articles?tag=NOT%20A%20TAG&limit=0');
    t.is(articles.status, 400, articles.text);
    t.deepEqual(
      (articles.json.errors as { parameter: string }[]).map((e) => e.parameter),
      ['tag', 'limit'],
    );
    const users = await reader.get('/v1/users?sort=nope&limit=999');
    t.is(users.status, 400, users.text);
    t.deepEqual(
      (users.json.errors as { parameter: string }[]).map((e) => e.parameter),
      ['sort', 'limit'],
    );
    // One order's GET names a bad fields list and a bad expansion together too.
    const order = await createOrder(t, c);
    const one = await c.get(`/v1/orders/${order.id}?fields=foo&expand=baz`);
    assertProblem(t, one, 400, 'invalid-parameter');
    t.deepEqual(
      (one.json.errors as { parameter: string }[]).map((e) => e.parameter),
      ['fields', 'expand'],
    );
  });

  test('lists: a cursor only works with the filter and sort that issued it', async (t) => {
    const c = await tenant(t, 'lcur');
    await Promise.all([1, 2, 3].map(() => createOrder(t, c)));
    const first = await c.get('/v1/orders?status=pending&limit=1');
    t.is(first.status, 200);
    const cursor = cursorOf(first.json._links.next.href);
    t.truthy(cursor);
    t.is((await c.get(`/v1/orders?status=pending&limit=1&cursor=${cursor}`)).status, 200);
    assertProblem(t, await c.get(`/v1/orders?status=paid&limit=1&cursor=${cursor}`), 400, 'invalid-parameter', { parameter: 'cursor' });
    assertProblem(t, await c.get(`/v1/orders?limit=1&cursor=${cursor}`), 400, 'invalid-parameter', { parameter: 'cursor' });
    assertProblem(t, await c.get(`/v1/orders?status=pending&sort=total&limit=1&cursor=${cursor}`), 400, 'invalid-parameter', { parameter: 'cursor' });
    // Cursors are not signed: a forged one whose value has the wrong type for the sort is refused.
    const forged = JSON.parse(Buffer.from(cursor!, 'base64url').toString()) as Record<string, unknown>;
    for (const v of ['a string', 1.5, 1e300]) {
      const bad = Buffer.from(JSON.stringify({ ...forged, v })).toString('base64url');
      assertProblem(t, await c.get(`/v1/orders?status=pending&limit=1&cursor=${bad}`), 400, 'invalid-parameter', { parameter: 'cursor' });
    }
  });

  test('lists: an unknown or repeated query parameter is 400', async (t) => {
    const c = await tenant(t, 'lunk');
    const o = await createOrder(t, c);
    assertProblem(t, await c.get('/v1/orders?colour=red'), 400, 'invalid-parameter', { parameter: 'colour' });
    assertProblem(t, await c.get('/v1/orders?limit=1&limit=2'), 400, 'invalid-parameter', { parameter: 'limit' });
    assertProblem(t, await c.get(`${o.href}?limit=5`), 400, 'invalid-parameter', { parameter: 'limit' });
    assertProblem(t, await c.get('/v1/products?status=pending'), 400, 'invalid-parameter', { parameter: 'status' });
  });

  // ---------------- fields and expand ----------------

  test('fields keeps only the named members, with id and _links; an unknown name is 400', async (t) => {
    const c = await tenant(t, 'fld');
    const o = await createOrder(t, c, { note: 'n', metadata: { a: 'b' } });
    const res = await c.get(`${o.href}?fields=status,total`);
    t.is(res.status, 200);
    t.deepEqual(res.json, { id: o.id, status: 'pending', total: 0, _links: o.body._links });

    const list = await c.get('/v1/orders?fields=note');
    t.deepEqual(list.json.data, [{ id: o.id, note: 'n', _links: o.body._links }]);

    const unknown = await c.get(`${o.href}?fields=status,colour`);
    assertProblem(t, unknown, 400, 'invalid-parameter', { parameter: 'fields', detail: /colour/ });
    t.regex(unknown.json.detail, /colour/);
    assertProblem(t, await c.get(`${o.href}?fields=items`), 400, 'invalid-parameter', { parameter: 'fields', detail: /items/ });
  });

  test('expand=items embeds the items, expand=items.product their products; an unknown path is 400', async (t) => {
    const c = await tenant(t, 'exp');
    const cup = await createProduct(t, c, { name: 'Cup', price: 500 });
    const pot = await createProduct(t, c, { name: 'Pot', price: 2000 });
    const o = await createOrder(t, c, { items: [{ productId: cup.id, quantity: 2 }, { productId: pot.id, quantity: 1 }] });

    const withItems = await c.get(`${o.href}?expand=items`);
    t.is(withItems.status, 200);
    const items = withItems.json.items;
    t.is(items.length, 2);
    t.like(items[0], { orderId: o.id, productId: cup.id, quantity: 2, unitPrice: 500 });
    t.is(items[0].product, undefined);
    t.deepEqual(items, (await c.get(`${o.href}/items`)).json.data, 'embedded items are the items collection');

    const withProducts = await c.get(`${o.href}?expand=items.product`);
    t.is(withProducts.status, 200);
    t.deepEqual(withProducts.json.items[0].product, (await c.get(`/v1/products/${cup.id}`)).json);
    t.deepEqual(withProducts.json.items[1].product, (await c.get(`/v1/products/${pot.id}`)).json);

    const trimmed = await c.get(`${o.href}?expand=items&fields=total`);
    t.deepEqual(Object.keys(trimmed.json).sort(), ['_links', 'id', 'items', 'total'], 'expanded members survive fields');

    const listed = await c.get('/v1/orders?expand=items.product');
    t.deepEqual(listed.json.data[0].items[1].product.name, 'Pot');
    const listedItems = await c.get('/v1/orders?expand=items');
    t.deepEqual(listedItems.json.data[0].items, items, 'lists embed items too');
    t.is((await c.get('/v1/orders')).json.data[0].items, undefined, 'and only when asked');

    // A product deleted after the order was placed: the item keeps its price, the embed is null.
    t.is((await c.delete(`/v1/products/${pot.id}`)).status, 204);
    const afterDelete = await c.get(`${o.href}?expand=items.product`);
    t.is(afterDelete.json.items[1].product, null);
    t.is(afterDelete.json.items[1].unitPrice, 2000);

    assertProblem(t, await c.get(`${o.href}?expand=customer`), 400, 'invalid-parameter', { parameter: 'expand', detail: /customer/ });
    assertProblem(t, await c.get(`${o.href}?expand=items.order`), 400, 'invalid-parameter', { parameter: 'expand' });
  });

  // ---------------- conditional requests and caching ----------------

  test('If-None-Match with the current tag is 304 with ETag, Cache-Control and Vary and no body', async (t) => {
    const c = await tenant(t, 'inm');
    const o = await createOrder(t, c);
    const first = await c.get(o.href);
    const tag = first.headers.etag!;
    t.regex(tag, STRONG_TAG);
    assertCacheHeaders(t, first);

    for (const header of [tag, `W/${tag}`, `"nope", ${tag}`, '*']) {
      const res = await c.get(o.href, { 'if-none-match': header });
      t.is(res.status, 304, header);
      t.is(res.raw.length, 0);
      t.is(res.headers.etag, tag);
      assertCacheHeaders(t, res);
      t.truthy(res.headers['trace-id']);
    }
    const miss = await c.get(o.href, { 'if-none-match': '"1-other"' });
    t.is(miss.status, 200);
    t.deepEqual(miss.json, first.json);

    // Collection pages carry a tag too, and revalidate the same way.
    const page = await c.get('/v1/orders');
    t.regex(page.headers.etag ?? '', STRONG_TAG);
    assertCacheHeaders(t, page);
    const again = await c.get('/v1/orders', { 'if-none-match': page.headers.etag! });
    t.is(again.status, 304);
    t.is(again.raw.length, 0);
    await createOrder(t, c);
    const changed = await c.get('/v1/orders', { 'if-none-match': page.headers.etag! });
    t.is(changed.status, 200);
    t.not(changed.headers.etag, page.headers.etag);
  });

  test('If-Match on a read: the current tag or * is answered; a stale or foreign tag is 412, before If-None-Match', async (t) => {
    const c = await tenant(t, 'im-read');
    const o = await createOrder(t, c);
    const first = await c.get(o.href);
    const tag = first.headers.etag!;
    for (const header of [tag, '*', `"nope", ${tag}`]) {
      const res = await c.get(o.href, { 'if-match': header });
      t.is(res.status, 200, header);
      t.deepEqual(res.json, first.json);
    }
    t.is((await c.get(o.href, { 'if-match': tag, 'if-none-match': tag })).status, 304, 'a passing If-Match leaves If-None-Match its 304');
    await c.patch(o.href, { note: 'moved on' });
    for (const header of [tag, `W/${tag}`, '"not-ours"']) {
      assertProblem(t, await c.get(o.href, { 'if-match': header }), 412, 'precondition-failed');
    }
    // If-Match comes first (RFC 9110 §13.2.2): a stale one is 412 even where If-None-Match would be 304.
    const now = (await c.get(o.href)).headers.etag!;
    assertProblem(t, await c.get(o.href, { 'if-match': tag, 'if-none-match': now }), 412, 'precondition-failed');

    // A page's tag is compared whole.
    const page = await c.get('/v1/orders');
    t.is((await c.get('/v1/orders', { 'if-match': page.headers.etag! })).status, 200);
    assertProblem(t, await c.get('/v1/orders', { 'if-match': `W/${page.headers.etag!}` }), 412, 'precondition-failed');
    assertProblem(t, await c.get('/v1/orders', { 'if-match': tag }), 412, 'precondition-failed');
    // What does not exist is 404 whatever the condition.
    const gone = await createOrder(t, c);
    t.is((await c.delete(gone.href)).status, 204);
    assertProblem(t, await c.get(gone.href, { 'if-match': '*' }), 404, 'not-found');
    // The document says so.
    const doc = (await c.get('/v1/openapi.json')).json as { paths: Record<string, { get: { responses: Record<string, unknown> } }> };
    t.truthy(doc.paths['/v1/orders/{orderId}']?.get.responses['412']);
    t.truthy(doc.paths['/v1/orders']?.get.responses['412']);
  });

  test('the ETag differs per fields, expand and content-coding, and changes after a write', async (t) => {
    const c = await tenant(t, 'etag');
    const p = await createProduct(t, c, { price: 100 });
    // Over 1 KiB, so br and gzip really compress.
    const metadata = { a: 'x'.repeat(400), b: 'y'.repeat(400), c: 'z'.repeat(400) };
    const o = await createOrder(t, c, { metadata, items: [{ productId: p.id, quantity: 1 }] });

    const plain = await c.get(o.href);
    const br = await c.get(o.href, { 'accept-encoding': 'br' });
    const gzip = await c.get(o.href, { 'accept-encoding': 'gzip' });
    const identity = await c.get(o.href, { 'accept-encoding': 'identity' });
    const preferGzip = await c.get(o.href, { 'accept-encoding': 'br;q=0.5, gzip' });
    t.is(br.headers['content-encoding'], 'br');
    t.is(gzip.headers['content-encoding'], 'gzip');
    t.is(preferGzip.headers['content-encoding'], 'gzip');
    t.is(identity.headers['content-encoding'], undefined);
    t.is(plain.headers['content-encoding'], undefined);
    t.true(br.raw.length < br.bytes.length && gzip.raw.length < gzip.bytes.length, 'compressed on the wire');
    for (const r of [br, gzip, identity]) t.deepEqual(r.json, plain.json);
    t.is(new Set([br.headers.etag, gzip.headers.etag, identity.headers.etag]).size, 3, 'one tag per content-coding');
    t.is(preferGzip.headers.etag, gzip.headers.etag, 'the same bytes carry the same tag');
    for (const r of [br, gzip, identity]) assertCacheHeaders(t, r);

    // A tag of one coding does not revalidate another.
    t.is((await c.get(o.href, { 'accept-encoding': 'gzip', 'if-none-match': br.headers.etag! })).status, 200);
    const brAgain = await c.get(o.href, { 'accept-encoding': 'br', 'if-none-match': br.headers.etag! });
    t.is(brAgain.status, 304);
    t.is(brAgain.headers.etag, br.headers.etag);

    const variants = ['', '?fields=status', '?fields=status,total', '?expand=items', '?expand=items.product', '?expand=items&fields=total'];
    const tags = new Map<string, string>();
    for (const v of variants) {
      const res = await c.get(`${o.href}${v}`);
      t.is(res.status, 200);
      tags.set(v, res.headers.etag!);
    }
    t.is(new Set(tags.values()).size, variants.length, 'one tag per fields/expand variant');

    const patched = await c.patch(o.href, { note: 'changed' });
    t.is(patched.status, 200);
    for (const [v, old] of tags) {
      const res = await c.get(`${o.href}${v}`, { 'if-none-match': old });
      t.is(res.status, 200, `the write invalidates the ${v || 'plain'} variant`);
      t.not(res.headers.etag, old);
    }
    t.is((await c.get(o.href, { 'accept-encoding': 'br', 'if-none-match': br.headers.etag! })).status, 200);
  });

  test('an embedded product changing changes the expand=items.product tag, and only that one', async (t) => {
    const c = await tenant(t, 'etagx');
    const p = await createProduct(t, c, { name: 'Old name', price: 100 });
    const o = await createOrder(t, c, { items: [{ productId: p.id, quantity: 1 }] });
    const plain = await c.get(o.href);
    const expanded = await c.get(`${o.href}?expand=items.product`);
    t.is((await c.patch(`/v1/products/${p.id}`, { name: 'New name' })).status, 200);

    t.is((await c.get(o.href, { 'if-none-match': plain.headers.etag! })).status, 304, 'the plain order did not change');
    const fresh = await c.get(`${o.href}?expand=items.product`, { 'if-none-match': expanded.headers.etag! });
    t.is(fresh.status, 200, 'the expanded order did change');
    t.is(fresh.json.items[0].product.name, 'New name');
    t.not(fresh.headers.etag, expanded.headers.etag);
  });

  test('If-Match: a stale tag is 412 and changes nothing; the current tag succeeds', async (t) => {
    const c = await tenant(t, 'ifm');
    const p = await createProduct(t, c, { price: 100 });
    const o = await orderWithTotal(t, c, p.id, 1);
    const stale = o.etag;
    const current = await c.patch(o.href, { note: 'v2' });
    t.is(current.status, 200);
    const tag = current.headers.etag!;

    const attempts: [string, () => Promise<Reply>][] = [
      ['PATCH', () => c.patch(o.href, { note: 'lost update' }, { 'if-match': stale })],
      ['PUT', () => c.put(o.href, { currency: 'EUR' }, { 'if-match': stale })],
      ['DELETE', () => c.delete(o.href, { 'if-match': stale })],
      ['pay', () => c.post(`${o.href}/pay`, undefined, { 'if-match': stale })],
      ['cancel', () => c.post(`${o.href}/cancel`, undefined, { 'if-match': stale })],
      ['add item', () => c.post(`${o.href}/items`, { productId: p.id, quantity: 1 }, { 'if-match': stale })],
      ['PATCH with a foreign tag', () => c.patch(o.href, { note: 'x' }, { 'if-match': '"not-ours"' })],
      // Never issued: the current version with a leading zero is not its tag.
      ['PATCH with the current tag spelt with a leading zero', () => c.patch(o.href, { note: 'x' }, { 'if-match': tag.replace('"', '"0') })],
    ];
    for (const [what, attempt] of attempts) {
      assertProblem(t, await attempt(), 412, 'precondition-failed');
      const now = await c.get(o.href);
      t.is(now.headers.etag, tag, `${what} with a stale tag changed nothing`);
      t.like(now.json, { note: 'v2', status: 'pending', total: 100 });
    }

    const ok = await c.patch(o.href, { note: 'v3' }, { 'if-match': tag });
    t.is(ok.status, 200, ok.text);
    t.is(ok.json.note, 'v3');
    // A tag of another variant of the current version names the same state.
    const fieldsTag = (await c.get(`${o.href}?fields=status`)).headers.etag!;
    const paid = await c.post(`${o.href}/pay`, undefined, { 'if-match': fieldsTag });
    t.is(paid.status, 200, paid.text);
    t.is((await c.delete(o.href, { 'if-match': '*' })).status, 409, 'If-Match: * passes; the paid order still cannot go');
  });

  test('If-None-Match on a write: `*` or the current tag (weak too) is 412 and changes nothing; another tag passes', async (t) => {
    const c = await tenant(t, 'inm');
    const p = await createProduct(t, c, { price: 100 });
    const o = await orderWithTotal(t, c, p.id, 1);
    const old = o.etag;
    const current = await c.patch(o.href, { note: 'v2' });
    const tag = current.headers.etag!;
    const attempts: [string, () => Promise<Reply>][] = [
      ['PUT with *', () => c.put(o.href, { currency: 'EUR', note: 'replaced' }, { 'if-none-match': '*' })],
      ['PATCH with the current tag', () => c.patch(o.href, { note: 'x' }, { 'if-none-match': tag })],
      ['PATCH with the current tag, weak, in a list', () => c.patch(o.href, { note: 'x' }, { 'if-none-match': `"not-ours", W/${tag}` })],
      ['DELETE with *', () => c.delete(o.href, { 'if-none-match': '*' })],
      ['pay with the current tag', () => c.post(`${o.href}/pay`, undefined, { 'if-none-match': tag })],
      ['add item with *', () => c.post(`${o.href}/items`, { productId: p.id, quantity: 1 }, { 'if-none-match': '*' })],
      ['PATCH with a current If-Match and If-None-Match: *', () => c.patch(o.href, { note: 'x' }, { 'if-match': tag, 'if-none-match': '*' })],
    ];
    for (const [what, attempt] of attempts) {
      assertProblem(t, await attempt(), 412, 'precondition-failed');
      const now = await c.get(o.href);
      t.is(now.headers.etag, tag, `${what} changed nothing`);
      t.like(now.json, { note: 'v2', status: 'pending', total: 100 });
    }
    // If-Match is evaluated first: a stale one is its own 412 whatever If-None-Match says.
    assertProblem(t, await c.patch(o.href, { note: 'x' }, { 'if-match': old, 'if-none-match': old }), 412, 'precondition-failed');
    const ok = await c.patch(o.href, { note: 'v3' }, { 'if-none-match': `${old}, "not-ours"` });
    t.is(ok.status, 200, ok.text);
    t.is(ok.json.note, 'v3');
    // A read still answers 304 from it.
    t.is((await c.get(o.href, { 'if-none-match': ok.headers.etag! })).status, 304);
  });

  // ---------------- tenancy and scopes ----------------

  test('tenancy: another tenant gets 404 for my order and product and never sees them in lists', async (t) => {
    const me = await tenant(t, 'ten-a');
    const them = await tenant(t, 'ten-b');
    const p = await createProduct(t, me, { price: 100 });
    const o = await orderWithTotal(t, me, p.id, 2);
    const theirs = await createProduct(t, them, { price: 100 });

    assertProblem(t, await them.get(o.href), 404, 'not-found');
    assertProblem(t, await them.get(`${o.href}?expand=items`), 404, 'not-found');
    assertProblem(t, await them.patch(o.href, { note: 'mine now' }), 404, 'not-found');
    assertProblem(t, await them.put(o.href, { currency: 'USD' }), 404, 'not-found');
    assertProblem(t, await them.post(`${o.href}/pay`), 404, 'not-found');
    assertProblem(t, await them.post(`${o.href}/cancel`), 404, 'not-found');
    assertProblem(t, await them.get(`${o.href}/items`), 404, 'not-found');
    assertProblem(t, await them.post(`${o.href}/items`, { productId: theirs.id, quantity: 1 }), 404, 'not-found');
    assertProblem(t, await them.delete(o.href), 404, 'not-found');
    assertProblem(t, await them.get(`/v1/products/${p.id}`), 404, 'not-found');
    assertProblem(t, await them.patch(`/v1/products/${p.id}`, { price: 1 }), 404, 'not-found');
    assertProblem(t, await them.delete(`/v1/products/${p.id}`), 404, 'not-found');

    for (const q of ['', '?status=pending', '?sort=total']) t.deepEqual((await them.get(`/v1/orders${q}`)).json.data, [], `their list${q}`);
    t.deepEqual(
      (await them.get('/v1/products')).json.data.map((d: { id: string }) => d.id),
      [theirs.id],
    );

    const mine = await me.get(o.href, { 'if-none-match': o.etag });
    t.is(mine.status, 304, 'my order is untouched');
    t.is((await me.get(`/v1/products/${p.id}`)).json.price, 100);
    t.deepEqual(
      (await me.get('/v1/orders')).json.data.map((d: { id: string }) => d.id),
      [o.id],
    );
  });

  test('scopes: a read-only token reads but gets 403 on writes', async (t) => {
    const writer = await tenant(t, 'scope');
    const reader = await t.context.api.as(writer.tenant, 'orders:read products:read');
    const p = await createProduct(t, writer, { price: 100 });
    const o = await orderWithTotal(t, writer, p.id, 1);

    t.is((await reader.get(o.href)).status, 200);
    t.is((await reader.get('/v1/orders')).status, 200);
    t.is((await reader.get(`/v1/products/${p.id}`)).status, 200);
    const writes: [string, Promise<Reply>][] = [
      ['orders:write', reader.post('/v1/orders', { currency: 'EUR' })],
      ['orders:write', reader.patch(o.href, { note: 'x' })],
      ['orders:write', reader.post(`${o.href}/pay`)],
      ['orders:write', reader.delete(o.href)],
      ['products:write', reader.post('/v1/products', { name: 'x', price: 1, currency: 'EUR' })],
    ];
    for (const [scope, pending] of writes) {
      const res = await pending;
      assertProblem(t, res, 403, 'forbidden');
      t.regex(res.json.detail, new RegExp(scope));
    }
    const ordersOnly = await t.context.api.as(writer.tenant, 'orders:read orders:write');
    assertProblem(t, await ordersOnly.get('/v1/products'), 403, 'forbidden');
    t.is((await writer.get(o.href, { 'if-none-match': o.etag })).status, 304, 'nothing changed');
    t.is((await writer.get('/v1/orders')).json.data.length, 1);
  });

  test('negotiation: hal+json is served with its own ETag, an unservable Accept is 406; a traceparent names the trace', async (t) => {
    const c = await tenant(t, 'negotiate');
    const order = await createOrder(t, c);
    const hal = await c.get(order.href, { accept: 'application/hal+json' });
    t.is(hal.status, 200, hal.text);
    t.is(hal.headers['content-type'], 'application/hal+json');
    t.deepEqual(hal.json, order.body);
    t.truthy(hal.headers.etag);
    t.not(hal.headers.etag, order.etag, 'one ETag per media type');
    t.true(vary(hal).includes('accept'));
    assertProblem(t, await c.get(order.href, { accept: 'text/html' }), 406, 'not-acceptable');
    const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const traced = await c.get(order.href, { traceparent: `00-${trace}-00f067aa0ba902b7-01` });
    t.is(traced.headers['trace-id'], trace);
    const missing = await c.get('/v1/orders/ord_nope', { traceparent: `00-${trace}-00f067aa0ba902b7-01` });
    assertProblem(t, missing, 404, 'not-found');
    t.is(missing.json.traceId, trace);
  });

  test('no token, or a bad one, is 401 with WWW-Authenticate: Bearer', async (t) => {
    const owner = await tenant(t, 'auth');
    const o = await createOrder(t, owner);
    const anonymous = t.context.api.anonymous();
    const { http } = t.context.api;
    const expired = await mintToken(t.context.service.secret, { sub: 'u', tenant: owner.tenant, scope: 'orders:read' }, Math.floor(Date.now() / 1000) - 60);
    const forged = await mintToken('not-the-secret-0123456789abcdef0123', { sub: 'u', tenant: owner.tenant, scope: 'orders:read' });
    const answers = [
      await anonymous.get('/v1/orders'),
      await anonymous.get(o.href),
      await anonymous.post('/v1/orders', { currency: 'EUR' }),
      await http.send('GET', o.href, { token: expired }),
      await http.send('GET', o.href, { token: forged }),
      await http.send('GET', o.href, { headers: { authorization: 'Basic dXNlcjpwYXNz' } }),
    ];
    for (const res of answers) {
      assertProblem(t, res, 401, 'unauthenticated');
      t.regex(res.headers['www-authenticate'] ?? '', /^Bearer\b/);
    }
    t.is((await owner.get('/v1/orders')).json.data.length, 1, 'the anonymous create wrote nothing');
  });
}
