// An HTTP fuzz run over real sockets (embedded service on port 0, and a cluster: gateway, two
// actor nodes, nats-server; undici): random methods
// (odd tokens too), paths (known routes, ids of every kind, random and percent-encoded
// segments, very long ones), query strings (known parameters with bad values, forged cursors,
// junk), headers (Accept, Content-Type, If-Match, If-None-Match, Accept-Encoding,
// Authorization with good, bad and missing tokens, traceparent, junk) and bodies (random JSON,
// random bytes, near-valid orders, items and patches). Whatever arrives:
//
//   - no answer is a 5xx, and every answer carries Trace-Id;
//   - every 4xx is application/problem+json whose `status` is the HTTP status and whose
//     `traceId` is the Trace-Id header (CONTRACT §4); a 405 names Allow, a 401 challenges Bearer;
//   - a valid traceparent sets the trace id (CONTRACT §2);
//   - a JSON success body decodes (per Content-Encoding) and parses;
//
// and afterwards the service still answers, and an order the fuzzer could reach but never
// legitimately change (another tenant's; its owner's token here can only read) is unchanged.
//
// Only values undici can send are generated; a sample undici refuses anyway is counted apart
// and never as a pass, and the run asserts how many requests really went out.
// Replay a failure with FC_SEED=… FC_PATH=… npx ava dist/test/fuzz.test.js.

import assert from 'node:assert/strict';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import fc from 'fast-check';
import { Agent, errors as undiciErrors } from 'undici';
import { newId } from '../common/ids.js';
import { ALL_SCOPES, Api, type Caller, mintToken } from './helpers/client.js';
import { assertProperty, checkProblem } from './helpers/property-kit.js';
import { rawExchange, rawRequest } from './helpers/raw-http.js';
import { startCluster, startEmbedded, type RunningService } from './helpers/service.js';
import { MAX_HEAD_BYTES } from '../gateway/http.js';

interface Fixtures {
  /** Ids the paths draw from, of every kind: the fuzzing tenant's, the guarded tenant's, absent ones. */
  orderIds: string[];
  itemIds: string[];
  productIds: string[];
  ids: string[];
  /** The fuzzing tenant's token, with every scope: most samples carry it. */
  usualAuthorization: string;
  /** Other tenants' and scopes' tokens, expired, forged and malformed ones, other schemes. */
  otherAuthorizations: string[];
  tags: string[];
  /** An order of another tenant, whose only token in the pool can read it but write nothing. */
  guarded: { href: string; etag: string; body: unknown; expanded: unknown };
  owner: Caller;
}

interface Context {
  service: RunningService;
  api: Api;
  agent: Agent;
  fixtures: Fixtures;
}

const test = anyTest as TestFn<Context>;

const NUM_RUNS = 5000;

function created(res: { status: number; text: string; json: { id: string } }): string {
  assert.equal(res.status, 201, res.text);
  return res.json.id;
}

async function itemIdsOf(c: Caller, orderId: string): Promise<string[]> {
  return (await c.get(`/v1/orders/${orderId}/items`)).json.data.map((i: { id: string }) => i.id);
}

test.before(async (t) => {
  const service = await startEmbedded();
  t.context = { service } as Context; // closed by after.always even if the world cannot be built
  t.context = await fuzzWorld(service);
});

test.after.always((t) => closeWorld(t.context as Partial<Context>));

/** What the fuzzer needs to reach `service`, and the fixtures it draws ids and tokens from. */
async function fuzzWorld(service: RunningService): Promise<Context> {
  const api = new Api(service.url, service.secret);
  // A hung answer fails its sample rather than the whole file.
  const agent = new Agent({ connections: 4, headersTimeout: 10_000, bodyTimeout: 10_000 });

  const owner = await api.as('fuzz-owner');
  const ownerProduct = created(await owner.post('/v1/products', { name: 'Guarded', price: 700, currency: 'EUR' }));
  const guardedId = created(
    await owner.post('/v1/orders', { currency: 'EUR', note: 'do not touch', metadata: { a: '1' }, items: [{ productId: ownerProduct, quantity: 2 }] }),
  );
  const guarded = await owner.get(`/v1/orders/${guardedId}`);
  const guardedExpanded = await owner.get(`/v1/orders/${guardedId}?expand=items.product`);

  // The fuzzing tenant's orders: pending, paid, cancelled, deleted.
  const fuzzer = await api.as('fuzz-caller');
  const product = created(await fuzzer.post('/v1/products', { name: 'Fuzzed', price: 300, currency: 'EUR' }));
  const orders: string[] = [];
  for (let i = 0; i < 4; i++) orders.push(created(await fuzzer.post('/v1/orders', { currency: 'EUR', items: [{ productId: product, quantity: 1 }] })));
  const [pending, paid, cancelled, deleted] = orders as [string, string, string, string];
  assert.equal((await fuzzer.post(`/v1/orders/${paid}/pay`)).status, 200);
  assert.equal((await fuzzer.post(`/v1/orders/${cancelled}/cancel`)).status, 200);
  assert.equal((await fuzzer.delete(`/v1/orders/${deleted}`)).status, 204);

  const secret = service.secret;
  const bearer = (token: string): string => `Bearer ${token}`;
  const fuzzerToken = fuzzer.token!;
  const orderIds = [guardedId, ...orders, newId('order')];
  const itemIds = [...(await itemIdsOf(owner, guardedId)), ...(await itemIdsOf(fuzzer, pending)), newId('item')];
  const productIds = [product, ownerProduct, newId('product')];
  const fixtures: Fixtures = {
    orderIds,
    itemIds,
    productIds,
    ids: [...orderIds, ...itemIds, ...productIds],
    usualAuthorization: bearer(fuzzerToken),
    otherAuthorizations: [
      `bearer ${fuzzerToken}`,
      `Bearer   ${fuzzerToken}  `,
      // The guarded order's owner, reading only: its writes are 403.
      bearer(await mintToken(secret, { sub: 'fuzz-reader', tenant: 'fuzz-owner', scope: 'orders:read products:read' })),
      bearer(await mintToken(secret, { sub: 'fuzz-noscope', tenant: 'fuzz-caller', scope: '' })),
      bearer(await mintToken(secret, { sub: 'fuzz-products', tenant: 'fuzz-caller', scope: 'products:read products:write' })),
      bearer(await mintToken(secret, { sub: 'fuzz-old', tenant: 'fuzz-caller', scope: ALL_SCOPES }, Math.floor(Date.now() / 1000) - 60)),
      bearer(await mintToken('not-the-secret-0123456789abcdef0123', { sub: 'fuzz-forged', tenant: 'fuzz-owner', scope: ALL_SCOPES })),
      // alg: none, unsigned.
      bearer(`${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${Buffer.from('{"sub":"x","scope":"orders:write"}').toString('base64url')}.`),
      bearer(fuzzerToken.slice(0, -3)),
      'Bearer',
      'Bearer ',
      'Basic dXNlcjpwYXNz',
      'Token abc',
    ],
    tags: [guarded.headers.etag!, '"1-x"', '"2-abc"', '"999999999999999-x"', '"1234567890123456-x"', 'W/"1-x"', '*', '"x"', '""', '"', ''],
    guarded: { href: `/v1/orders/${guardedId}`, etag: guarded.headers.etag!, body: guarded.json, expanded: guardedExpanded.json },
    owner,
  };
  return { service, api, agent, fixtures };
}

async function closeWorld({ api, agent, service }: Partial<Context>): Promise<void> {
  await agent?.close();
  await api?.close();
  await service?.close();
}

// ---- what goes on the wire ----

/** Methods uWS parses; it closes the connection on any other token without answering. */
const UWS_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT']);

const TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const tokenArb = (max: number) => fc.string({ unit: fc.constantFrom(...TOKEN_CHARS), minLength: 1, maxLength: max });

// CONNECT is left out: undici treats it as a tunnel, not a request.
const methodArb = fc.oneof(
  { weight: 40, arbitrary: fc.constantFrom('GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE') },
  { weight: 3, arbitrary: fc.constantFrom('OPTIONS', 'TRACE') },
  { weight: 1, arbitrary: fc.constantFrom('get', 'Post', 'PURGE', 'PROPFIND', 'QUERY', 'M-SEARCH') },
  { weight: 1, arbitrary: tokenArb(12) },
);

/** Characters undici puts in a request target as they are (0x21-0xff). */
const targetChar = (exclude: string) =>
  fc
    .integer({ min: 0x21, max: 0xff })
    .map((c) => String.fromCharCode(c))
    .filter((c) => !exclude.includes(c));

const hex2 = fc.integer({ min: 0, max: 255 }).map((b) => `%${b.toString(16).padStart(2, '0').toUpperCase()}`);
const percentJunk = fc
  .array(fc.oneof(hex2, fc.constantFrom('%', '%G1', '%zz', '%2F', '%00', '%C3%28', '%ED%A0%80', '%F0%9F%98', '%E2%82%AC'), targetChar('/?#')), { minLength: 1, maxLength: 8 })
  .map((parts) => parts.join(''));

/** An id written with every character percent-encoded: the router decodes it back. */
const encodeAll = (s: string): string => [...Buffer.from(s)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');

function segmentArb(ids: string[]): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom(...ids) },
    { weight: 1, arbitrary: fc.constantFrom(...ids).map(encodeAll) },
    { weight: 1, arbitrary: fc.constantFrom(...ids).map((id) => id.toUpperCase()) },
    { weight: 1, arbitrary: fc.constantFrom(...ids).map((id) => id.slice(0, -1)) },
    { weight: 2, arbitrary: fc.webSegment() },
    { weight: 2, arbitrary: fc.string({ unit: targetChar('/?'), maxLength: 16 }) },
    { weight: 2, arbitrary: percentJunk },
    { weight: 1, arbitrary: fc.constantFrom('', '.', '..', '%2e%2e', 'ord_', 'batch', 'items', 'pay', 'cancel', 'v1', 'orders') },
    { weight: 1, arbitrary: fc.tuple(fc.integer({ min: 200, max: 20_000 }), targetChar('/?#')).map(([n, c]) => c.repeat(n)) },
  );
}

const TEMPLATES = [
  '/',
  '/v1',
  '/v2',
  '/docs',
  '/problems',
  '/problems/{s}',
  '/v1/openapi.json',
  '/v1/orders',
  '/v1/orders/{s}',
  '/v1/orders/{s}/items',
  '/v1/orders/{s}/items/{s}',
  '/v1/orders/{s}/pay',
  '/v1/orders/{s}/cancel',
  '/v1/orders/{s}/{s}',
  '/v1/orders/batch',
  '/v1/products',
  '/v1/products/{s}',
  '/v1/{s}',
  '/v1/{s}/{s}',
  '/{s}',
  '/v1/orders/{s}/',
  '/v1//orders',
];

function pathArb(ids: string[]): fc.Arbitrary<string> {
  const seg = segmentArb(ids);
  const templated = fc.tuple(fc.constantFrom(...TEMPLATES), fc.array(seg, { minLength: 2, maxLength: 2 })).map(([tpl, [a, b]]) => tpl.replace('{s}', a!).replace('{s}', b!));
  const random = fc.array(seg, { minLength: 1, maxLength: 6 }).map((segs) => `/${segs.join('/')}`);
  return fc.oneof({ weight: 6, arbitrary: templated }, { weight: 1, arbitrary: random });
}

const FIELD_NAMES = ['id', 'status', 'currency', 'total', 'customerId', 'note', 'metadata', 'createdAt', 'updatedAt', 'items', 'name', 'price', ''];

/**
 * A cursor in the service's shape (base64url JSON of filter, sort, last value and id), mostly
 * aimed at a list's default filter and sort so that it gets past those checks, with a last
 * value and id of any type; or one with members missing, or none of its shape.
 */
function cursorArb(ids: string[]): fc.Arbitrary<string> {
  const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v) ?? 'null').toString('base64url');
  const members = {
    f: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('status=', '', ...ids) }, { weight: 1, arbitrary: fc.string() }),
    s: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('-createdAt', 'added') }, { weight: 1, arbitrary: fc.constantFrom('total', 'name', '-price') }, { weight: 1, arbitrary: fc.string() }),
    v: fc.oneof(fc.integer(), fc.double(), fc.string(), fc.jsonValue()),
    i: fc.oneof(fc.constantFrom(...ids), fc.string(), fc.jsonValue()),
  };
  return fc.oneof(
    { weight: 4, arbitrary: fc.record(members).map(b64) },
    { weight: 1, arbitrary: fc.record(members, { requiredKeys: [] }).map(b64) },
    { weight: 1, arbitrary: fc.jsonValue().map(b64) },
    { weight: 1, arbitrary: fc.string({ unit: targetChar('&#'), maxLength: 40 }) },
  );
}

function queryArb(ids: string[]): fc.Arbitrary<string> {
  const value = fc.oneof(
    fc.integer({ min: -5, max: 1_000_000 }).map(String),
    fc.constantFrom('', '0', '1', '100', '101', '2.5', '1e2', '0x10', 'abc', '-total', '--total', 'total', 'createdAt', 'name', 'pending', 'paid', 'shipped'),
    fc.constantFrom('items', 'items.product', 'items,items.product', 'items.product.x', 'customer', 'product'),
    fc.subarray(FIELD_NAMES, { minLength: 1 }).map((f) => f.join(',')),
    cursorArb(ids),
    percentJunk,
    fc.string({ unit: targetChar('&#'), maxLength: 30 }),
  );
  const known = fc.tuple(fc.constantFrom('limit', 'cursor', 'fields', 'expand', 'status', 'sort', 'orderId', 'tag'), value).map(([k, v]) => `${k}=${v}`);
  const junk = fc.string({ unit: targetChar('#'), maxLength: 30 });
  return fc.oneof(
    { weight: 12, arbitrary: fc.constant('') },
    { weight: 6, arbitrary: fc.array(fc.oneof({ weight: 4, arbitrary: known }, { weight: 1, arbitrary: junk }), { minLength: 1, maxLength: 4 }).map((ps) => `?${ps.join('&')}`) },
    { weight: 1, arbitrary: fc.webQueryParameters().map((q) => `?${q}`) },
  );
}

/** A header value undici sends as is: tab, visible ASCII, space and obs-text (0x80-0xff). */
const headerValueArb = (max: number) =>
  fc.string({
    unit: fc.oneof({ weight: 30, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) }, { weight: 3, arbitrary: fc.integer({ min: 0x80, max: 0xff }) }, { weight: 1, arbitrary: fc.constant(9) }).map((c) => String.fromCharCode(c)),
    maxLength: max,
  });

// Names undici refuses or manages itself; the body's length is undici's to send.
const MANAGED = new Set(['host', 'content-length', 'transfer-encoding', 'keep-alive', 'upgrade', 'connection', 'expect']);

/**
 * Header names of letters, digits and '-' only. A field name may be any token (RFC 9110 §5.1),
 * but uWS neither answers nor closes when one holds another token character ('_', '.', '!'…):
 * the request hangs until uWS's idle timeout drops the connection some 10 s later. That is
 * pinned by a known failure at the end of this file; sending such names here would only make
 * every sample that does wait 10 s.
 */
const headerNameArb = fc
  .string({ unit: fc.constantFrom(...'-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'), minLength: 1, maxLength: 20 })
  .filter((n) => !MANAGED.has(n.toLowerCase()));

const hex = (n: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: n, maxLength: n });

interface Traceparent {
  value: string;
  /** The trace id the answer must carry, when the header is valid (W3C Trace Context §3.2). */
  traceId: string | undefined;
}

const traceparentArb: fc.Arbitrary<Traceparent> = fc.oneof(
  fc.tuple(hex(32), hex(16)).map(([trace, parent]) => ({
    value: `00-${trace}-${parent}-01`,
    traceId: /^0+$/.test(trace) || /^0+$/.test(parent) ? undefined : trace,
  })),
  fc.tuple(fc.constantFrom('ff', '00', 'zz'), hex(32), hex(16)).map(([v, trace, parent]) => ({ value: `${v}-${trace}-${parent}`, traceId: undefined })),
  fc.constantFrom('00-00000000000000000000000000000000-0000000000000000-01', '', 'junk').map((value) => ({ value, traceId: undefined })),
);

interface Sample {
  method: string;
  target: string;
  headers: [string, string][];
  traceparent: Traceparent | undefined;
  body: string | Buffer | undefined;
}

/** A header absent, usual or odd, in the proportions `[absent, usual, odd]`. */
function header(name: string, usual: fc.Arbitrary<string>, odd: fc.Arbitrary<string>, [absent, good, bad]: [number, number, number]): fc.Arbitrary<[string, string] | undefined> {
  return fc.oneof(
    { weight: absent, arbitrary: fc.constant(undefined) },
    { weight: good, arbitrary: usual.map((v): [string, string] => [name, v]) },
    { weight: bad, arbitrary: odd.map((v): [string, string] => [name, v]) },
  );
}

// Mostly usual requests, so that many get past authentication and validation into the
// handlers, with odd values mixed in a few at a time.
function headersArb(f: Fixtures): fc.Arbitrary<{ headers: [string, string][]; traceparent: Traceparent | undefined }> {
  const tags = fc.oneof(fc.constantFrom(...f.tags), headerValueArb(20), fc.array(fc.constantFrom(...f.tags), { minLength: 2, maxLength: 3 }).map((ts) => ts.join(', ')));
  return fc
    .record({
      authorization: header('authorization', fc.constant(f.usualAuthorization), fc.oneof(fc.constantFrom(...f.otherAuthorizations), headerValueArb(40)), [1, 20, 4]),
      accept: header(
        'accept',
        fc.constantFrom('application/json', 'application/hal+json', '*/*', 'application/*', 'application/json, text/html;q=0.5'),
        fc.oneof(fc.constantFrom('text/html', 'application/json;q=0', 'application/problem+json', 'text/markdown', ';;', '*/*;q=0.1, text/html', 'application/json;q=abc'), headerValueArb(30)),
        [10, 3, 1],
      ),
      contentType: header(
        'content-type',
        fc.constantFrom('application/json', 'application/merge-patch+json', 'application/json; charset=utf-8'),
        fc.oneof(
          fc.constantFrom('application/json;charset="UTF-8"', 'application/json; charset=latin1', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'APPLICATION/JSON', ''),
          headerValueArb(30),
        ),
        [1, 10, 1],
      ),
      ifMatch: header('if-match', fc.constant('*'), tags, [10, 1, 2]),
      ifNoneMatch: header('if-none-match', fc.constant('*'), tags, [8, 1, 2]),
      acceptEncoding: header(
        'accept-encoding',
        fc.constantFrom('br', 'gzip', 'br;q=0.5, gzip', 'identity', 'gzip, deflate, br'),
        fc.oneof(fc.constantFrom('identity;q=0', '*', '*;q=0', 'deflate', 'gzip;q=abc', ''), headerValueArb(20)),
        [4, 3, 1],
      ),
      idempotencyKey: header('idempotency-key', tokenArb(40), headerValueArb(300), [8, 1, 1]),
      junk: fc.array(fc.tuple(headerNameArb, headerValueArb(60)), { maxLength: 3 }),
      traceparent: fc.option(traceparentArb, { freq: 3, nil: undefined }),
    })
    .map(({ junk, traceparent, ...named }) => {
      const headers = [...Object.values(named).filter((h): h is [string, string] => h !== undefined), ...junk];
      if (traceparent) headers.push(['traceparent', traceparent.value]);
      return { headers, traceparent };
    });
}

type BodyKind = 'order' | 'item' | 'patch' | 'product';

/** A valid body of the kind, as it is or with a few members set to anything, or removed. */
function nearValidArb(f: Fixtures, kind: BodyKind | undefined): fc.Arbitrary<string> {
  const bases: Record<BodyKind, Record<string, unknown>[]> = {
    order: [{ currency: 'EUR', note: 'n', customerId: 'c', metadata: { a: 'b' }, items: [{ productId: f.productIds[0], quantity: 1 }] }, { currency: 'EUR' }],
    item: [{ productId: f.productIds[0], quantity: 2, unitPrice: 5 }, { productId: f.productIds[1], quantity: 1 }],
    patch: [{ note: 'patched', metadata: { a: null, b: 'c' } }, { currency: 'USD' }, { customerId: null }],
    product: [{ name: 'Thing', price: 10, currency: 'EUR' }, { price: 0 }],
  };
  const base = kind ? fc.constantFrom(...bases[kind]) : fc.constantFrom(...Object.values(bases).flat(), { ids: [f.productIds[0]] }, { atomic: true, operations: [{ method: 'POST', body: { currency: 'EUR' } }] });
  const paths = ['currency', 'note', 'customerId', 'metadata', 'items', 'productId', 'quantity', 'unitPrice', 'name', 'price', 'status', 'total', 'id', '_links', '__proto__', 'constructor', 'metadata.__proto__', 'metadata.k', 'metadata.constructor', 'metadata.__keys__', 'items.0', 'items.0.quantity', 'items.0.productId', 'items.0.unitPrice', 'items.1'];
  const mutation = fc.tuple(fc.constantFrom(...paths), fc.option(fc.oneof(fc.jsonValue(), fc.constantFrom(...f.productIds), fc.integer()), { freq: 4, nil: undefined }));
  const mutations = fc.oneof(fc.constant([]), fc.array(mutation, { minLength: 1, maxLength: 3 }));
  return fc.tuple(base, mutations).map(([b, ms]) => {
    const body = structuredClone(b);
    for (const [path, value] of ms) setPath(body, path.split('.'), value);
    return JSON.stringify(body);
  });
}

/** Sets (or, with undefined, deletes) a member; defineProperty makes even `__proto__` an own, serialized member. */
function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  let at: unknown = target;
  for (const key of path.slice(0, -1)) {
    const next = (at as Record<string, unknown>)[key];
    if (typeof next !== 'object' || next === null) return;
    at = next;
  }
  const last = path[path.length - 1]!;
  if (value === undefined) delete (at as Record<string, unknown>)[last];
  else Object.defineProperty(at, last, { value, enumerable: true, writable: true, configurable: true });
}

/** A body for a route that takes `kind` ('none': takes no body, so mostly none is sent), or for any route. */
function bodyArb(f: Fixtures, kind: BodyKind | 'none' | undefined): fc.Arbitrary<string | Buffer | undefined> {
  if (kind === 'none') return fc.oneof({ weight: 12, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: bodyArb(f, undefined) });
  return fc.oneof(
    { weight: kind ? 1 : 4, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
    { weight: kind ? 20 : 4, arbitrary: nearValidArb(f, kind) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 100 }) },
    { weight: 1, arbitrary: fc.constantFrom('', '{', '{"currency":', 'null', '[]', '"\\ud800"', '{"a":1,"a":2}', '\uFEFF{"currency":"EUR"}', '{"currency":"EUR"}  x') },
  );
}

/** The query parameters a route takes: a list's filters, sorts and cursor, or an order's fields and expand. */
type QueryKind = 'orders' | 'products' | 'items' | 'order' | 'item' | 'product';

/** The service's routes, with the body and the query each takes: most samples are requests a client could mean. */
const ROUTES: [string, string, BodyKind | undefined, QueryKind | undefined][] = [
  ['GET', '/v1/orders', undefined, 'orders'],
  ['POST', '/v1/orders', 'order', undefined],
  ['GET', '/v1/orders/{order}', undefined, 'order'],
  ['PUT', '/v1/orders/{order}', 'order', undefined],
  ['PATCH', '/v1/orders/{order}', 'patch', undefined],
  ['DELETE', '/v1/orders/{order}', undefined, undefined],
  ['POST', '/v1/orders/{order}/pay', undefined, undefined],
  ['POST', '/v1/orders/{order}/cancel', undefined, undefined],
  ['GET', '/v1/orders/{order}/items', undefined, 'items'],
  ['POST', '/v1/orders/{order}/items', 'item', undefined],
  ['GET', '/v1/orders/{order}/items/{item}', undefined, 'item'],
  ['GET', '/v1/products', undefined, 'products'],
  ['POST', '/v1/products', 'product', undefined],
  ['GET', '/v1/products/{product}', undefined, 'product'],
  ['PATCH', '/v1/products/{product}', 'product', undefined],
  ['DELETE', '/v1/products/{product}', undefined, undefined],
  ['GET', '/', undefined, undefined],
  ['GET', '/v1', undefined, undefined],
  ['GET', '/v1/openapi.json', undefined, undefined],
  ['GET', '/docs', undefined, undefined],
  ['GET', '/problems', undefined, undefined],
  ['GET', '/problems/{slug}', undefined, undefined],
];

const FIELDS: Record<'orders' | 'products' | 'items', string[]> = {
  orders: ['id', 'status', 'currency', 'total', 'customerId', 'note', 'metadata', 'createdAt', 'updatedAt'],
  products: ['id', 'name', 'price', 'currency', 'createdAt', 'updatedAt'],
  items: ['id', 'orderId', 'productId', 'quantity', 'unitPrice', 'createdAt', 'updatedAt'],
};
const FIELDS_OF: Record<QueryKind, keyof typeof FIELDS> = { orders: 'orders', order: 'orders', items: 'items', item: 'items', products: 'products', product: 'products' };
const SORTS: Record<'orders' | 'products', string[]> = { orders: ['createdAt', 'total'], products: ['createdAt', 'price', 'name'] };

/** A value of a parameter: mostly one the route takes, sometimes anything. */
const param = (usual: fc.Arbitrary<string>, odd: fc.Arbitrary<string> = percentJunk) =>
  fc.option(fc.oneof({ weight: 6, arbitrary: usual }, { weight: 1, arbitrary: odd }), { freq: 2, nil: undefined });

/**
 * The route's own parameters, mostly valid. A list's cursor is forged for the very filter and
 * sort of the request, so that it passes those checks and its last value and id (of any type)
 * reach the store's range query.
 */
function routeQueryArb(kind: QueryKind | undefined, orderId: string, ids: string[]): fc.Arbitrary<string> {
  if (kind === undefined) return fc.oneof({ weight: 6, arbitrary: fc.constant('') }, { weight: 1, arbitrary: queryArb(ids) });
  const list = (names: string[]) => fc.subarray(names, { minLength: 1 }).map((ns) => ns.join(','));
  const common = {
    fields: param(list(FIELDS[FIELDS_OF[kind]])),
    expand: kind === 'orders' || kind === 'order' ? param(fc.constantFrom('items', 'items.product', 'items,items.product')) : fc.constant(undefined),
    limit: kind === 'orders' || kind === 'products' || kind === 'items' ? param(fc.integer({ min: 1, max: 100 }).map(String), fc.constantFrom('0', '101', '-1', '2.5', 'x', '')) : fc.constant(undefined),
    status: kind === 'orders' ? param(fc.constantFrom('pending', 'paid', 'cancelled', 'refunded')) : fc.constant(undefined),
    sort: kind === 'orders' || kind === 'products' ? param(fc.constantFrom(...SORTS[kind]).chain((n) => fc.constantFrom(n, `-${n}`))) : fc.constant(undefined),
    forge: kind === 'orders' || kind === 'products' || kind === 'items' ? fc.option(fc.tuple(fc.oneof(fc.integer(), fc.double(), fc.string(), fc.jsonValue()), fc.oneof(fc.constantFrom(...ids), fc.string(), fc.jsonValue())), { freq: 3, nil: undefined }) : fc.constant(undefined),
  };
  return fc.record(common).map(({ forge, ...params }) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, v);
    if (forge) {
      const [v, i] = forge;
      const filter = kind === 'orders' ? `status=${params.status ?? ''}` : kind === 'items' ? orderId : '';
      const sort = kind === 'items' ? 'added' : (params.sort ?? '-createdAt');
      q.set('cursor', Buffer.from(JSON.stringify({ f: filter, s: sort, v, i })).toString('base64url'));
    }
    const text = q.toString();
    return text ? `?${text}` : '';
  });
}

/** A route's path with ids of the right kind mostly, and anything else now and then. */
function routeSampleArb(f: Fixtures): fc.Arbitrary<{ method: string; target: string; body: string | Buffer | undefined }> {
  const any = segmentArb(f.ids);
  const fill = (pool: string[]) => fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...pool) }, { weight: 1, arbitrary: any });
  const slots = fc.record({
    order: fill(f.orderIds),
    item: fill(f.itemIds),
    product: fill(f.productIds),
    slug: fill(['not-found', 'validation-failed', 'internal', 'nope']),
  });
  // Routes that take a body or a query weigh more: they have the most to get wrong.
  const route = fc.oneof(...ROUTES.map((r) => ({ weight: r[2] || r[3] ? 3 : 1, arbitrary: fc.constant(r) })));
  return fc.tuple(route, slots).chain(([[method, template, bodyKind, queryKind], ids]) =>
    fc.record({
      // HEAD stands in for GET now and then.
      method: method === 'GET' ? fc.constantFrom('GET', 'GET', 'GET', 'HEAD') : fc.constant(method),
      target: routeQueryArb(queryKind, ids.order, f.ids).map((query) => template.replace(/\{(\w+)\}/g, (_, slot: keyof typeof ids) => ids[slot]) + query),
      body: bodyArb(f, bodyKind ?? 'none'),
    }),
  );
}

function sampleArb(f: Fixtures): fc.Arbitrary<Sample> {
  const wild = fc.record({ method: methodArb, target: fc.tuple(pathArb(f.ids), queryArb(f.ids)).map(([p, q]) => p + q), body: bodyArb(f, undefined) });
  return fc
    .record({ request: fc.oneof({ weight: 3, arbitrary: routeSampleArb(f) }, { weight: 2, arbitrary: wild }), h: headersArb(f) })
    .map(({ request, h }) => ({ ...request, headers: h.headers, traceparent: h.traceparent }));
}

// ---- what comes back ----

interface Answer {
  status: number;
  headers: Record<string, string>;
  text: string;
}

type Outcome = { kind: 'answered'; answer: Answer } | { kind: 'closed'; error: string } | { kind: 'refused'; error: string };

function decodeBody(raw: Buffer, coding: string | undefined): Buffer {
  if (coding === 'br') return brotliDecompressSync(raw);
  if (coding === 'gzip') return gunzipSync(raw);
  assert.ok(coding === undefined, `unexpected Content-Encoding ${coding}`);
  return raw;
}

async function send(world: Context, s: Sample): Promise<Outcome> {
  const flat = s.headers.flat();
  try {
    const res = await world.agent.request({ origin: world.service.url, path: s.target, method: s.method as 'GET', headers: flat, body: s.body });
    const raw = Buffer.from(await res.body.arrayBuffer());
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
    // A HEAD answer has the GET's headers, Content-Encoding included, and no body to decode.
    const text = s.method === 'HEAD' ? raw.toString('utf8') : decodeBody(raw, headers['content-encoding']).toString('utf8');
    return { kind: 'answered', answer: { status: res.statusCode, headers, text } };
  } catch (err) {
    // undici's own checks of what it is asked to send: the request never left.
    if (err instanceof undiciErrors.InvalidArgumentError || err instanceof undiciErrors.NotSupportedError) return { kind: 'refused', error: String(err) };
    const code = (err as { code?: string }).code;
    if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET') return { kind: 'closed', error: String(err) };
    throw err;
  }
}

/**
 * The bytes of the request line and of the sample's own header lines: undici writes both as
 * latin1 and adds its own (Host, Connection, ...), so the head it sends is at least this long.
 */
function headBytesAtLeast(s: Sample): number {
  let n = `${s.method} ${s.target} HTTP/1.1\r\n\r\n`.length;
  for (const [name, value] of s.headers) n += `${name}: ${value}\r\n`.length;
  return n;
}

function checkAnswer(s: Sample, a: Answer): void {
  const context = `${s.method} ${s.target.slice(0, 200)}`;
  assert.ok(a.status < 500, `${context}: answered ${a.status}: ${a.text.slice(0, 300)}`);
  assert.ok(a.headers['trace-id'], `${context}: no Trace-Id on a ${a.status}`);
  // CONTRACT §8: both fields on every answer, refusals of the edge and 429s included.
  assert.match(a.headers['ratelimit-policy'] ?? '', /^"default";q=\d+;w=\d+$/, `${context}: RateLimit-Policy on a ${a.status}`);
  assert.match(a.headers.ratelimit ?? '', /^"default";r=\d+;t=\d+$/, `${context}: RateLimit on a ${a.status}`);
  if (s.traceparent && s.headers.filter(([n]) => n.toLowerCase() === 'traceparent').length === 1) {
    if (s.traceparent.traceId) assert.equal(a.headers['trace-id'], s.traceparent.traceId, `${context}: the traceparent did not set the trace id`);
  }
  if (a.status >= 400) {
    if (s.method === 'HEAD') {
      assert.match(a.headers['content-type'] ?? '', /^application\/problem\+json\b/, `${context}: a HEAD ${a.status} is not problem+json`);
      assert.equal(a.text, '', `${context}: a HEAD answer with a body`);
    } else {
      checkProblem(a, context);
    }
    if (a.status === 405) assert.ok(a.headers.allow, `${context}: 405 without Allow`);
    if (a.status === 401) assert.match(a.headers['www-authenticate'] ?? '', /^Bearer\b/, `${context}: 401 without a Bearer challenge`);
    return;
  }
  if (s.method !== 'HEAD' && /^application\/(hal\+)?json\b/.test(a.headers['content-type'] ?? '')) {
    assert.doesNotThrow(() => JSON.parse(a.text), `${context}: a ${a.status} JSON body that does not parse`);
  }
}

test('no request, however odd, gets a 5xx or a malformed problem, and the service is unharmed', (t) => fuzzHolds(t, t.context, NUM_RUNS));

// Cluster mode: a gateway and two actor nodes over a nats-server of the test's own (a missing
// nats-server fails this test, never skips it), for what only the bus between them could get
// wrong: an error crossing NATS, a command the nodes decode otherwise.
test('no request, however odd, gets a 5xx or a malformed problem in cluster mode either', async (t) => {
  const cluster = await startCluster();
  t.teardown(() => cluster.close());
  const world = await fuzzWorld(cluster);
  t.teardown(() => closeWorld({ api: world.api, agent: world.agent }));
  await fuzzHolds(t, world, NUM_RUNS);
});

/** The fuzz run against a world, with how many samples. */
async function fuzzHolds(t: ExecutionContext, world: Context, numRuns: number): Promise<void> {
  const f = world.fixtures;
  const counts = { answered: 0, closed: 0, refused: 0 };
  let closedOverLimit = 0;
  const statuses = new Map<number, number>();
  await assertProperty(
    t,
    fc.asyncProperty(sampleArb(f), async (s) => {
      const outcome = await send(world, s);
      counts[outcome.kind]++;
      if (outcome.kind === 'refused') return;
      if (outcome.kind === 'closed') {
        // uWS drops the connection, without a word, on a method it does not know: the only
        // close allowed here (see the known failures at the end of this file).
        // Or on a head over MAX_HEAD_BYTES that uWS happened to read in more than one piece
        // (hostile.test.ts holds uWS to that; in one read it is answered 431).
        if (headBytesAtLeast(s) > MAX_HEAD_BYTES) {
          closedOverLimit++;
          return;
        }
        assert.ok(!UWS_METHODS.has(s.method), `${s.method} ${s.target.slice(0, 200)}: the connection closed without an answer (${outcome.error})`);
        return;
      }
      statuses.set(outcome.answer.status, (statuses.get(outcome.answer.status) ?? 0) + 1);
      checkAnswer(s, outcome.answer);
    }),
    { numRuns },
  );
  t.log(`answered ${counts.answered}, closed ${counts.closed} (${closedOverLimit} of them heads over ${MAX_HEAD_BYTES} bytes, the rest unknown methods), refused by undici ${counts.refused}`);
  t.log([...statuses].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`).join(', '));

  // Most samples really went out, and reached more than the error paths.
  const runs = counts.answered + counts.closed + counts.refused;
  t.true(counts.refused <= runs * 0.02, `undici refused ${counts.refused} of ${runs} samples`);
  t.true(counts.answered >= runs * 0.9, `only ${counts.answered} of ${runs} samples were answered`);
  for (const status of [200, 201, 400, 401, 404, 405, 406, 415, 422]) t.true((statuses.get(status) ?? 0) > 0, `no answer was ${status}`);

  // Afterwards: the service still answers, and the guarded order is exactly as it was.
  const root = await f.owner.get('/v1');
  t.is(root.status, 200);
  const guarded = await f.owner.get(f.guarded.href);
  t.is(guarded.status, 200);
  t.is(guarded.headers.etag, f.guarded.etag, 'the guarded order has its first version still');
  t.deepEqual(guarded.json, f.guarded.body);
  t.deepEqual((await f.owner.get(`${f.guarded.href}?expand=items.product`)).json, f.guarded.expanded);
  t.is((await f.owner.post('/v1/orders', { currency: 'EUR' })).status, 201, 'writes still work');
}

// Found by this fuzz run, and outside the gateway's reach: uWS parses the request line and
// headers before any of our code runs, and gives up on two kinds of valid requests without a
// word (README "Hostile input"). These tests hold uWS to what it does today, so an upgrade
// that starts answering them fails here and the README table gets updated.
//   - A method that is a token but not one uWS knows (PURGE, QUERY, lower-case get…): the
//     connection is closed at once. RFC 9110 §9.1 would have 501 Not Implemented.
//   - A header field name holding a token character other than a letter, digit or '-'
//     (x_request_id, a.b): no answer, and the connection stays open until uWS's idle timeout
//     drops it some 10 s later. RFC 9110 §5.1 allows any token.
async function firstBytes(t: { context: Context }, request: Buffer): Promise<string> {
  const port = Number(new URL(t.context.service.url).port);
  const exchange = await rawExchange(port, { send: [request], timeoutMs: 3000 });
  return exchange.bytes.toString('latin1');
}

test('uWS closes a method it does not know without an answer', async (t) => {
  t.is(await firstBytes(t, rawRequest('PURGE', '/v1/orders')), '');
});

test('uWS leaves a header name with "_" unanswered (until its idle timeout)', async (t) => {
  t.is(await firstBytes(t, rawRequest('GET', '/v1', { x_request_id: '1' })), '');
});
