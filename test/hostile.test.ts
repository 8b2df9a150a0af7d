// Hostile input over a real socket (embedded service on port 0): every case gets a problem+json
// answer, or, where uWS refuses before our code runs, a prompt close; none changes anything and
// none is a 500. Where uWS 20.30 acts by itself (answers nothing, closes), the test pins exactly
// what it does, so an upgrade that changes it is noticed. The README's "Hostile input" table
// lists the cases; body limits (413) are covered in http-edge.test.ts.

import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import { loadConfig } from '../common/config.js';
import { type Service, startService } from '../gateway/app.js';
import { MAX_JSON_DEPTH } from '../gateway/pipeline.js';
import { HttpClient } from './helpers/client.js';
import { ALL_SCOPES, assertProblem, freshTenant, removeDir, silentLog, tempDir, token } from './helpers/edge-kit.js';
import { asAnswer, only, parseResponses, rawExchange, rawRequest, type RawOptions } from './helpers/raw-http.js';

interface Context {
  dir: string;
  service: Service;
  http: HttpClient;
}

const test = anyTest as TestFn<Context>;
const SECRET = 'hostile-test-secret-0123456789abcdef';
/** What "promptly" means for a refusal: no timer is involved, only a round trip. */
const PROMPT_MS = 2_000;

test.before(async (t) => {
  const dir = await tempDir('hostile');
  // The default MAX_BODY_BYTES (1 MiB), so a megabyte of brackets reaches the parser's gate.
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: SECRET });
  const service = await startService(config, silentLog());
  t.context = { dir, service, http: new HttpClient(service.url) };
});

test.after.always(async (t) => {
  await t.context.http?.close();
  await t.context.service?.close();
  await removeDir(t.context.dir);
});

function tenantToken(label: string): Promise<string> {
  return token(SECRET, ALL_SCOPES, { tenant: freshTenant(label) });
}

/**
 * One request as bytes, with a bearer token and `Connection: close` so the answer ends the
 * exchange; a body gets `Content-Type: application/json` unless `headers` says otherwise (an
 * undefined value drops a header).
 */
function request(method: string, path: string, tok: string | undefined, body?: string | Buffer | object, headers: Record<string, string | undefined> = {}): Buffer {
  const h: Record<string, string> = { Connection: 'close' };
  if (tok !== undefined) h.Authorization = `Bearer ${tok}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) delete h[k];
    else h[k] = v;
  }
  const raw = body === undefined || typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  return rawRequest(method, path, h, raw);
}

interface Asked {
  status: number;
  headers: Record<string, string>;
  text: string;
  closed: boolean;
  closedAfterMs: number | undefined;
}

/** Sends on a fresh connection and reads the one answer (stray bytes after it fail the test). */
async function ask(t: { context: Context }, send: Buffer | RawOptions['send'], timeoutMs = 5000): Promise<Asked> {
  const ex = await rawExchange(t.context.service.port, { send: Buffer.isBuffer(send) ? [send] : send, timeoutMs });
  return { ...asAnswer(only(parseResponses(ex.bytes, ['POST']))), closed: ex.closed, closedAfterMs: ex.closedAfterMs };
}

/** Sends on a fresh connection and expects uWS to drop it without a byte, at once. */
async function assertDropped(t: ExecutionContext<Context>, send: Buffer | RawOptions['send'], why: string): Promise<void> {
  const ex = await rawExchange(t.context.service.port, { send: Buffer.isBuffer(send) ? [send] : send, timeoutMs: 4000 });
  t.is(ex.bytes.length, 0, `${why}: uWS answered ${JSON.stringify(ex.bytes.toString('latin1').slice(0, 80))}`);
  t.true(ex.closed, `${why}: the connection stays open`);
  t.true((ex.closedAfterMs ?? Infinity) < PROMPT_MS, `${why}: closed after ${ex.closedAfterMs} ms`);
}

async function listIds(t: { context: Context }, tok: string, collection = '/v1/orders'): Promise<string[]> {
  const r = await t.context.http.send('GET', `${collection}?limit=100`, { token: tok });
  if (r.status !== 200) throw new Error(`list answered ${r.status}: ${r.text}`);
  return (r.json as { data: { id: string }[] }).data.map((o) => o.id);
}

async function create(t: { context: Context }, tok: string, collection: string, json: object): Promise<{ id: string; path: string; etag: string }> {
  const r = await t.context.http.send('POST', collection, { token: tok, json });
  if (r.status !== 201) throw new Error(`create answered ${r.status}: ${r.text}`);
  return { id: (r.json as { id: string }).id, path: r.headers.location ?? '', etag: r.headers.etag ?? '' };
}

async function current(t: { context: Context }, tok: string, path: string): Promise<{ etag: string; json: unknown }> {
  const r = await t.context.http.send('GET', path, { token: tok });
  if (r.status !== 200) throw new Error(`GET ${path} answered ${r.status}: ${r.text}`);
  return { etag: r.headers.etag ?? '', json: r.json as unknown };
}

// ---- syntax and encoding ----

test('malformed JSON and invalid UTF-8 are 400 malformed-request, and nothing is created', async (t) => {
  const tok = await tenantToken('malformed');
  const note = (bytes: number[]): Buffer => Buffer.concat([Buffer.from('{"currency":"EUR","note":"'), Buffer.from(bytes), Buffer.from('"}')]);
  const cases: [string | Buffer, RegExp][] = [
    ['{', /JSON/],
    ['{"currency":"EUR",}', /JSON/],
    ["{'currency':'EUR'}", /JSON/],
    ['{"currency":"EUR"} trailing', /JSON/],
    [note([0xc3, 0x28]), /UTF-8/], // a lead byte without its continuation
    [note([0xc0, 0xaf]), /UTF-8/], // an overlong encoding of '/'
    [note([0xed, 0xa0, 0x80]), /UTF-8/], // an encoded UTF-16 surrogate
    [note([0xff]), /UTF-8/],
  ];
  for (const [body, detail] of cases) {
    const a = await ask(t, request('POST', '/v1/orders', tok, body));
    t.regex(assertProblem(t, a, 400, 'malformed-request').detail, detail);
  }
  t.deepEqual(await listIds(t, tok), []);
});

// ---- prototype members ----

test('__proto__ and constructor.prototype members are 400 wherever they stand, and change nothing', async (t) => {
  const tok = await tenantToken('proto');
  const order = await create(t, tok, '/v1/orders', { currency: 'EUR', metadata: { a: '1' } });
  const before = await current(t, tok, order.path);
  const polluted = '{"x":"y"}';
  const cases: [string, string, string][] = [
    ['PATCH', order.path, `{"metadata":{"__proto__":${polluted}}}`],
    ['POST', '/v1/orders', `{"currency":"EUR","metadata":{"__proto__":${polluted}}}`],
    ['PUT', order.path, `{"currency":"EUR","metadata":{"__proto__":${polluted}}}`],
    ['PATCH', order.path, `{"__proto__":{"note":"x"}}`],
    ['PATCH', order.path, `{"metadata":{"\\u005f_proto__":${polluted}}}`],
    ['PATCH', order.path, `{"constructor":{"prototype":${polluted}}}`],
    ['PATCH', order.path, `{"metadata":{"constructor":{"prototype":${polluted}}}}`],
    ['POST', '/v1/orders', `{"currency":"EUR","items":[{"productId":"prd_x","quantity":1,"__proto__":${polluted}}]}`],
    ['POST', `${order.path}/items`, `{"productId":"prd_x","quantity":1,"__proto__":${polluted}}`],
    ['POST', '/v1/products', `{"name":"n","price":1,"currency":"EUR","__proto__":${polluted}}`],
  ];
  for (const [method, path, body] of cases) {
    const a = await ask(t, request(method, path, tok, body, method === 'PATCH' ? { 'Content-Type': 'application/merge-patch+json' } : {}));
    t.regex(assertProblem(t, a, 400, 'malformed-request').detail, /__proto__.*constructor.*prototype/, `${method} ${body}`);
  }
  t.deepEqual(await current(t, tok, order.path), before, 'the order is unchanged');
  t.deepEqual(await listIds(t, tok), [order.id]);
  t.deepEqual(await listIds(t, tok, '/v1/products'), []);
  t.is((Object.prototype as Record<string, unknown>).x, undefined, 'no prototype was touched');
});

// ---- nesting ----

test(`nesting deeper than ${MAX_JSON_DEPTH} is 400 before parsing; brackets inside strings do not count`, async (t) => {
  const tok = await tenantToken('depth');
  const tooDeep = new RegExp(`more than ${MAX_JSON_DEPTH} levels`);
  // A megabyte of '[' (the body limit). The parser would call it unterminated JSON; the depth
  // scan, which runs first, names the depth.
  const flood = await ask(t, request('POST', '/v1/orders', tok, '['.repeat(1024 * 1024)));
  t.regex(assertProblem(t, flood, 400, 'malformed-request').detail, tooDeep);

  const nested = (depth: number): string => `{"currency":"EUR","x":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;
  const atLimit = await ask(t, request('POST', '/v1/orders', tok, nested(MAX_JSON_DEPTH)));
  // Parsed and validated: the schema, not the depth scan, refuses it.
  t.deepEqual(assertProblem(t, atLimit, 422, 'validation-failed').errors?.map((e) => e.pointer), ['/x']);
  const over = await ask(t, request('POST', '/v1/orders', tok, nested(MAX_JSON_DEPTH + 1)));
  t.regex(assertProblem(t, over, 400, 'malformed-request').detail, tooDeep);

  // A backslash escapes the next character only: the quote after an escaped backslash ends the
  // string, and the brackets after it count.
  const afterBackslash = `{"currency":"EUR","note":"ends in a backslash \\\\","x":${'['.repeat(40)}${']'.repeat(40)}}`;
  t.regex(assertProblem(t, await ask(t, request('POST', '/v1/orders', tok, afterBackslash)), 400, 'malformed-request').detail, tooDeep);

  const inString = JSON.stringify({ currency: 'EUR', note: `${'[{'.repeat(100)} \\" ${'['.repeat(50)}` });
  const created = await ask(t, request('POST', '/v1/orders', tok, inString));
  t.is(created.status, 201, created.text);
  t.deepEqual(await listIds(t, tok), [(JSON.parse(created.text) as { id: string }).id]);
});

// ---- numbers ----

test('numbers outside the safe ranges are 422 with a pointer, and change nothing', async (t) => {
  const tok = await tenantToken('numbers');
  const product = await create(t, tok, '/v1/products', { name: 'p', price: 100, currency: 'EUR' });
  const before = await current(t, tok, product.path);
  const pointers = (a: Asked): string[] => [...new Set(assertProblem(t, a, 422, 'validation-failed').errors?.map((e) => e.pointer ?? ''))];
  for (const n of ['1e400', '-1e400', '9007199254740993', '-9007199254740993', '1e21', '1000000001', '-1', '1.5']) {
    const created = await ask(t, request('POST', '/v1/products', tok, `{"name":"n","price":${n},"currency":"EUR"}`));
    t.deepEqual(pointers(created), ['/price'], `POST price ${n}`);
    const patched = await ask(t, request('PATCH', product.path, tok, `{"price":${n}}`));
    t.deepEqual(pointers(patched), ['/price'], `PATCH price ${n}`);
  }
  const items = `{"currency":"EUR","items":[{"productId":"${product.id}","quantity":1e400,"unitPrice":9007199254740993}]}`;
  t.deepEqual(pointers(await ask(t, request('POST', '/v1/orders', tok, items))).sort(), ['/items/0/quantity', '/items/0/unitPrice']);
  const zero = `{"currency":"EUR","items":[{"productId":"${product.id}","quantity":0,"unitPrice":-1}]}`;
  t.deepEqual(pointers(await ask(t, request('POST', '/v1/orders', tok, zero))).sort(), ['/items/0/quantity', '/items/0/unitPrice']);

  t.deepEqual(await current(t, tok, product.path), before, 'the product is unchanged');
  t.deepEqual(await listIds(t, tok, '/v1/products'), [product.id]);
  t.deepEqual(await listIds(t, tok), []);
});

// ---- strings ----

test('strings over their length limits are 422 with a pointer (400 for query parameters), and change nothing', async (t) => {
  const tok = await tenantToken('strings');
  const x = (n: number): string => 'x'.repeat(n);
  const cases: [string, object, string][] = [
    ['/v1/orders', { currency: 'EUR', note: x(2001) }, '/note'],
    ['/v1/orders', { currency: 'EUR', customerId: x(256) }, '/customerId'],
    ['/v1/orders', { currency: 'EUR', metadata: { k: x(501) } }, '/metadata/k'],
    ['/v1/orders', { currency: 'EUR', metadata: { [x(41)]: 'v' } }, `/metadata/${x(41)}`],
    ['/v1/orders', { currency: 'EURO' }, '/currency'],
    ['/v1/orders', { currency: 'EUR', items: [{ productId: x(65), quantity: 1 }] }, '/items/0/productId'],
    ['/v1/products', { name: x(201), price: 1, currency: 'EUR' }, '/name'],
  ];
  for (const [path, body, pointer] of cases) {
    const a = await ask(t, request('POST', path, tok, body));
    t.deepEqual(assertProblem(t, a, 422, 'validation-failed').errors?.map((e) => e.pointer), [pointer]);
  }
  const atLimits = await ask(t, request('POST', '/v1/orders', tok, { currency: 'EUR', note: x(2000), customerId: x(255), metadata: { [x(40)]: x(500) } }));
  t.is(atLimits.status, 201, atLimits.text);

  const query: [string, string][] = [
    ['fields', `fields=${'id,'.repeat(40)}id`],
    ['expand', `expand=${'items,'.repeat(10)}items`],
    ['cursor', `cursor=${'A'.repeat(2049)}`],
  ];
  for (const [parameter, q] of query) {
    const a = await ask(t, request('GET', `/v1/orders?${q}`, tok));
    t.is(assertProblem(t, a, 400, 'invalid-parameter').errors?.[0]?.parameter, parameter);
  }
  t.deepEqual(await listIds(t, tok), [(JSON.parse(atLimits.text) as { id: string }).id]);
  t.deepEqual(await listIds(t, tok, '/v1/products'), []);
});

// ---- media type ----

test('a body without Content-Type or of another media type is 415, and nothing is created', async (t) => {
  const tok = await tenantToken('media');
  for (const ctype of ['text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=latin1', undefined]) {
    const a = await ask(t, request('POST', '/v1/orders', tok, { currency: 'EUR' }, { 'Content-Type': ctype }));
    assertProblem(t, a, 415, 'unsupported-media-type');
  }
  t.deepEqual(await listIds(t, tok), []);
});

// ---- methods ----

test('TRACE and other unsupported methods are 405 with Allow over a socket; methods uWS does not know are dropped', async (t) => {
  const tok = await tenantToken('methods');
  const order = '/v1/orders/ord_ff00000000000000000000';
  const cases: [string, string, string[]][] = [
    ['TRACE', '/v1/orders', ['GET', 'HEAD', 'POST']],
    ['TRACE', '/v1', ['GET', 'HEAD']],
    ['TRACE', order, ['DELETE', 'GET', 'HEAD', 'PATCH', 'PUT']],
    ['OPTIONS', '/v1/orders', ['GET', 'HEAD', 'POST']],
    ['CONNECT', '/v1', ['GET', 'HEAD']],
    ['DELETE', '/v1/orders', ['GET', 'HEAD', 'POST']],
    ['POST', order, ['DELETE', 'GET', 'HEAD', 'PATCH', 'PUT']],
  ];
  for (const [method, path, allow] of cases) {
    const a = await ask(t, request(method, path, tok));
    assertProblem(t, a, 405, 'method-not-allowed');
    t.deepEqual((a.headers.allow ?? '').split(', ').sort(), allow, `${method} ${path}`);
  }
  // uWS 20.30 hands `any` only the nine methods it knows (GET … PATCH, TRACE, CONNECT) and
  // closes the connection on any other before our code runs: no answer is possible.
  for (const method of ['PROPFIND', 'PURGE', 'FOO', 'get']) await assertDropped(t, request(method, '/v1', tok), method);
});

// ---- tokens and tenancy ----

function b64url(x: object): string {
  return Buffer.from(JSON.stringify(x)).toString('base64url');
}

test("bad tokens are 401 and another tenant's ids are 404 over a socket; nothing changes", async (t) => {
  const owner = await tenantToken('owner');
  const order = await create(t, owner, '/v1/orders', { currency: 'EUR' });
  const before = await current(t, owner, order.path);
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub: 'u1', tenant: 'x', scope: ALL_SCOPES, iat: now, exp: now + 3600 };
  const bad: [string, string][] = [
    ['not a JWT', 'abc'],
    ['expired', await token(SECRET, ALL_SCOPES, { expiresIn: now - 60 })],
    ['alg none', `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url(claims)}.`],
    ['another secret', await token('another-secret-entirely-0123456789', ALL_SCOPES)],
  ];
  for (const [why, tok] of bad) {
    for (const [method, path, body] of [['GET', order.path, undefined], ['PATCH', order.path, { note: 'x' }], ['POST', '/v1/orders', { currency: 'EUR' }]] as const) {
      const a = await ask(t, request(method, path, tok, body));
      assertProblem(t, a, 401, 'unauthenticated');
      t.regex(a.headers['www-authenticate'] ?? '', /^Bearer\b/, `${why}: ${method}`);
    }
  }
  const other = await tenantToken('other');
  for (const [method, path, body] of [
    ['GET', order.path, undefined],
    ['PATCH', order.path, { note: 'x' }],
    ['PUT', order.path, { currency: 'EUR' }],
    ['DELETE', order.path, undefined],
    ['POST', `${order.path}/cancel`, undefined],
  ] as const) {
    assertProblem(t, await ask(t, request(method, path, other, body)), 404, 'not-found');
  }
  t.deepEqual(await current(t, owner, order.path), before, 'the order is unchanged');
  t.deepEqual(await listIds(t, owner), [order.id]);
});
