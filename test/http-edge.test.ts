// The uWS edge over a real socket (embedded service on port 0, MAX_BODY_BYTES=4096): body limits
// with Content-Length and chunked bodies, HEAD, bodiless 204/304 answers byte for byte, and
// many concurrent requests on keep-alive connections.

import anyTest, { type TestFn } from 'ava';
import { Pool } from 'undici';
import { loadConfig } from '../common/config.js';
import { type Service, startService } from '../gateway/app.js';
import { ALL_SCOPES, assertProblem, freshTenant, removeDir, silentLog, tempDir, token } from './helpers/edge-kit.js';
import { afterResponses, asAnswer, chunked, only, parseResponses, rawExchange, rawHeader, rawRequest, type RawResponse } from './helpers/raw-http.js';

interface Context {
  dir: string;
  service: Service;
  secret: string;
}

const test = anyTest as TestFn<Context>;
const SECRET = 'http-edge-test-secret-0123456789abcdef';
const LIMIT = 4096;

test.before(async (t) => {
  const dir = await tempDir('http-edge');
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, MAX_BODY_BYTES: String(LIMIT) });
  t.context = { dir, service: await startService(config, silentLog()), secret: SECRET };
});

test.after.always(async (t) => {
  await t.context.service?.close();
  await removeDir(t.context.dir);
});

/** A valid order body of exactly `size` bytes: metadata values plus a note that tops it up. */
function orderBodyOfSize(size: number): string {
  const metadata: Record<string, string> = {};
  const render = (note: string): string => JSON.stringify({ currency: 'EUR', note, metadata });
  let i = 0;
  while (render('').length + 2000 < size) metadata[`k${i++}`] = 'x'.repeat(500);
  const body = render('y'.repeat(size - render('').length));
  if (Buffer.byteLength(body) !== size) throw new Error(`cannot build a body of ${size} bytes`);
  return body;
}

async function tenantToken(label: string): Promise<string> {
  return token(SECRET, ALL_SCOPES, { tenant: freshTenant(label) });
}

async function listIds(t: { context: Context }, tok: string): Promise<string[]> {
  const res = await fetch(`${t.context.service.url}/v1/orders?limit=100`, { headers: { authorization: `Bearer ${tok}` } });
  if (res.status !== 200) throw new Error(`list answered ${res.status}`);
  const body = (await res.json()) as { data: { id: string }[] };
  return body.data.map((o) => o.id);
}

test('a body exactly at the limit is accepted', async (t) => {
  const tok = await tenantToken('at-limit');
  const res = await fetch(`${t.context.service.url}/v1/orders`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
    body: orderBodyOfSize(LIMIT),
  });
  t.is(res.status, 201);
  t.is((await listIds(t, tok)).length, 1);
});

test('a Content-Length over the limit is refused with 413 before the body arrives, and the connection closes', async (t) => {
  const tok = await tenantToken('cl-over');
  const body = orderBodyOfSize(LIMIT + 1);
  const head = rawRequest('POST', '/v1/orders', { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json', 'Content-Length': String(body.length) });
  // Send the head and a sliver of the body, then stall: the answer must not wait for the rest.
  const ex = await rawExchange(t.context.service.port, { send: [head, body.slice(0, 100)], timeoutMs: 3000 });
  t.true(ex.closed, 'the server closes the connection');
  t.true((ex.closedAfterMs ?? Infinity) < 2000, `closed after ${ex.closedAfterMs} ms`);
  const r = only(parseResponses(ex.bytes, ['POST']));
  const p = assertProblem(t, asAnswer(r), 413, 'payload-too-large');
  t.true(p.detail.includes(String(LIMIT)));
  t.is(rawHeader(r, 'cache-control'), 'no-store');

  // A client that sends the whole oversized body gets the same answer.
  const whole = await rawExchange(t.context.service.port, { send: [head, body], timeoutMs: 3000 });
  t.true(whole.closed);
  assertProblem(t, asAnswer(only(parseResponses(whole.bytes, ['POST']))), 413, 'payload-too-large');

  // A declared length past 2^31 is refused too. uWS's own parser drops that connection
  // before our handler runs, so there may be no answer at all; never a success.
  const huge = rawRequest('POST', '/v1/orders', { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json', 'Content-Length': '10000000000' });
  const hugeEx = await rawExchange(t.context.service.port, { send: [huge, body], timeoutMs: 3000 });
  t.true(hugeEx.closed);
  t.true((hugeEx.closedAfterMs ?? Infinity) < 2000);
  for (const r of parseResponses(hugeEx.bytes, ['POST'])) t.true(r.status >= 400, `answered ${r.status}`);

  t.deepEqual(await listIds(t, tok), [], 'nothing was created');
});

test('a traceparent on a refused body sets the 413 trace id', async (t) => {
  const trace = '0af7651916cd43dd8448eb211c80319c';
  const req = rawRequest('POST', '/v1/orders', { 'Content-Type': 'application/json', 'Content-Length': String(LIMIT * 2), traceparent: `00-${trace}-b7ad6b7169203331-01` });
  const ex = await rawExchange(t.context.service.port, { send: [req], timeoutMs: 3000 });
  const r = only(parseResponses(ex.bytes, ['POST']));
  t.is(assertProblem(t, asAnswer(r), 413, 'payload-too-large').traceId, trace);
});

test('a chunked body is refused 411 from its head and closed, at once, whatever follows it; nothing runs', async (t) => {
  const tok = await tenantToken('chunked');
  const auth = { Authorization: `Bearer ${tok}` };
  const chunkedPost = (path: string, body: Buffer | string): Buffer =>
    rawRequest('POST', path, { ...auth, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' }, Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1'));
  const victim = await createOrder(t, tok);
  const deleteVictim = `DELETE /v1/orders/${victim.id} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${tok}\r\n\r\n`;
  const cases: [string, Buffer][] = [
    ['a well-formed chunked body', chunkedPost('/v1/orders', chunked(orderBodyOfSize(3000), 257))],
    ['a chunked body over the limit', chunkedPost('/v1/orders', chunked(orderBodyOfSize(LIMIT * 2), 1000))],
    ['a chunked body cut short, the client waiting', chunkedPost('/v1/orders', chunked(orderBodyOfSize(LIMIT * 2), 1000).subarray(0, LIMIT + 200))],
    // uWS 20.30 reads a size line's leading space as the end of a size of 0, the last chunk: the
    // chunk's data would then be a request of its own, here one deleting an order.
    ['a size line with a leading space and a request in its data', chunkedPost('/v1/products', ` ${(deleteVictim.length + 2).toString(16)}\r\nXX${deleteVictim}`)],
    // A chunk extension RFC 9112 §7.1.1 allows, whose characters uWS reads as hex digits.
    ['a chunk extension of hex-like characters', chunkedPost('/v1/orders', '12;e=1\r\n{"currency":"EUR"}\r\n0\r\n\r\n')],
    // A trailer field RFC 9112 §7.1.2 allows, which uWS reads as the next request's start.
    ['a trailer field, then a GET', chunkedPost('/v1/orders', `12\r\n{"currency":"EUR"}\r\n0\r\nX-T: 1\r\n\r\nGET /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)],
  ];
  for (const [why, bytes] of cases) {
    const ex = await rawExchange(t.context.service.port, { send: [bytes], timeoutMs: 4000 });
    t.true(ex.closed && (ex.closedAfterMs ?? Infinity) < 2000, `${why}: closed after ${ex.closedAfterMs} ms`);
    // Refused before a byte of the body is read; where uWS meets a request in what follows before
    // the refusal is out, it drops the connection unanswered. Never a second answer.
    const answers = parseResponses(ex.bytes, ['POST']);
    t.true(answers.length <= 1, `${why}: ${answers.length} answers`);
    for (const r of answers) t.regex(String(assertProblem(t, asAnswer(r), 411, 'length-required').detail), /Content-Length/, why);
  }
  // The well-formed one is answered whole.
  const plain = await rawExchange(t.context.service.port, { send: [cases[0]![1]], timeoutMs: 4000 });
  assertProblem(t, asAnswer(only(parseResponses(plain.bytes, ['POST']))), 411, 'length-required');
  t.deepEqual(await listIds(t, tok), [victim.id], 'nothing was created, and the order is still there');
});

async function createOrder(t: { context: Context }, tok: string, body: object = { currency: 'EUR' }): Promise<{ id: string; etag: string; text: string }> {
  const res = await fetch(`${t.context.service.url}/v1/orders`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`create answered ${res.status}: ${text}`);
  return { id: (JSON.parse(text) as { id: string }).id, etag: res.headers.get('etag') ?? '', text };
}

test('repeated header lines reach the gateway joined, whatever the case of their names', async (t) => {
  const tok = await tenantToken('repeated');
  const order = await createOrder(t, tok);
  const path = `/v1/orders/${order.id}`;
  const get = async (headers: Record<string, string>): Promise<RawResponse> =>
    only(parseResponses((await rawExchange(t.context.service.port, { send: [rawRequest('GET', path, { Authorization: `Bearer ${tok}`, ...headers, Connection: 'close' })] })).bytes, ['GET']));
  const first = await get({});
  t.is(first.status, 200);
  const etag = rawHeader(first, 'etag') ?? '';
  t.regex(etag, /^"/);
  // Two If-None-Match lines, the match on either: a 304 only if both reached the comparison.
  for (const [one, two] of [[etag, '"not-it"'], ['"not-it"', etag]] as const) {
    const matched = await get({ 'If-None-Match': one, 'if-none-match': two, 'X-Unread': 'not kept' });
    t.is(matched.status, 304, `If-None-Match: ${one} then ${two}`);
    t.is(rawHeader(matched, 'etag'), etag);
  }
  // Neither line matching: the full answer.
  const neither = await get({ 'If-None-Match': '"not-it"', 'if-none-match': '"nor-this"' });
  t.is(neither.status, 200);
  t.is(neither.body.toString(), order.text);
});

test('two Idempotency-Key lines are 400 and nothing runs; one line holding a comma is a key', async (t) => {
  const tok = await tenantToken('two-keys');
  const body = JSON.stringify({ currency: 'EUR' });
  const post = async (headers: Record<string, string>): Promise<RawResponse> =>
    only(
      parseResponses(
        (await rawExchange(t.context.service.port, { send: [rawRequest('POST', '/v1/orders', { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json', ...headers, Connection: 'close' }, body)] })).bytes,
        ['POST'],
      ),
    );
  const twice = await post({ 'Idempotency-Key': 'a', 'idempotency-key': 'b' });
  t.is(twice.status, 400, twice.body.toString());
  const problem = JSON.parse(twice.body.toString()) as { type: string; errors: { header: string; detail: string }[] };
  t.is(problem.type, '/problems/malformed-request');
  t.deepEqual(problem.errors, [{ header: 'Idempotency-Key', detail: 'must be sent once' }]);
  // Nothing ran under either key, or under the two read as one.
  for (const key of ['a', 'b', 'a, b']) {
    const first = await post({ 'Idempotency-Key': key });
    t.is(first.status, 201, key);
    t.is(rawHeader(first, 'idempotent-replayed'), undefined, key);
  }
  const again = await post({ 'Idempotency-Key': 'a, b' });
  t.is(again.status, 201);
  t.is(rawHeader(again, 'idempotent-replayed'), 'true');
});

test('HEAD answers the GET headers and Content-Length with no body', async (t) => {
  const tok = await tenantToken('head');
  const order = await createOrder(t, tok, { currency: 'EUR', note: 'héad ✓' });
  const auth = { Authorization: `Bearer ${tok}` };
  const path = `/v1/orders/${order.id}`;
  // HEAD then GET on one connection: a stray HEAD body would be read as the next status line.
  const ex = await rawExchange(t.context.service.port, {
    send: [rawRequest('HEAD', path, auth), afterResponses(['HEAD']), rawRequest('GET', path, { ...auth, Connection: 'close' })],
    timeoutMs: 5000,
  });
  const [head, get] = parseResponses(ex.bytes, ['HEAD', 'GET']);
  t.truthy(head && get);
  t.is(head!.status, 200);
  t.is(get!.status, 200);
  t.is(head!.body.length, 0);
  t.is(Number(rawHeader(head!, 'content-length')), get!.body.length);
  t.is(head!.headers['content-length']?.length, 1, 'exactly one Content-Length');
  t.is(get!.body.toString(), order.text);
  for (const h of ['etag', 'content-type', 'cache-control', 'vary']) t.is(rawHeader(head!, h), rawHeader(get!, h), h);
  t.truthy(rawHeader(head!, 'trace-id'));

  // A HEAD that fails is a problem without a body, too.
  const missing = await rawExchange(t.context.service.port, {
    send: [rawRequest('HEAD', '/v1/orders/ord_ff00000000000000000000', auth), afterResponses(['HEAD']), rawRequest('GET', '/v1', { Connection: 'close' })],
    timeoutMs: 5000,
  });
  const [miss, root] = parseResponses(missing.bytes, ['HEAD', 'GET']);
  t.is(miss!.status, 404);
  t.is(miss!.body.length, 0);
  t.is(root!.status, 200);
});

test('304 and 204 carry no body and no bogus Content-Length', async (t) => {
  const tok = await tenantToken('bodiless');
  const order = await createOrder(t, tok);
  const auth = { Authorization: `Bearer ${tok}` };
  const path = `/v1/orders/${order.id}`;
  // The tag of the identity representation, which is what these raw requests ask for.
  const first = only(parseResponses((await rawExchange(t.context.service.port, { send: [rawRequest('GET', path, { ...auth, Connection: 'close' })] })).bytes, ['GET']));
  const etag = rawHeader(first, 'etag') ?? '';
  t.regex(etag, /^"[^"]+"$/);
  const ex = await rawExchange(t.context.service.port, {
    send: [
      rawRequest('GET', path, { ...auth, 'If-None-Match': etag }),
      afterResponses(['GET']),
      rawRequest('GET', path, { ...auth, 'If-None-Match': `"nope", W/${etag}` }),
      afterResponses(['GET', 'GET']),
      rawRequest('DELETE', path, auth),
      afterResponses(['GET', 'GET', 'DELETE']),
      rawRequest('GET', '/v1', { Connection: 'close' }),
    ],
    timeoutMs: 5000,
  });
  // parseResponses reads no body after a 304 or 204: any stray byte breaks the next status line.
  const [notModified, weak, deleted, root] = parseResponses(ex.bytes, ['GET', 'GET', 'DELETE', 'GET']);
  t.truthy(root, 'all four answered on one connection');
  t.is(notModified!.status, 304);
  t.is(rawHeader(notModified!, 'etag'), etag);
  t.truthy(rawHeader(notModified!, 'cache-control'));
  t.truthy(rawHeader(notModified!, 'vary'));
  t.is(rawHeader(notModified!, 'transfer-encoding'), undefined);
  // RFC 9110 §8.6: a 304 may only repeat the length the 200 would have had.
  const cl304 = rawHeader(notModified!, 'content-length');
  t.true(cl304 === undefined || Number(cl304) === first.body.length, `304 Content-Length ${cl304}`);
  t.is(weak!.status, 304, 'If-None-Match uses weak comparison');
  t.is(deleted!.status, 204);
  t.is(rawHeader(deleted!, 'content-length'), undefined, 'RFC 9110 §8.6: no Content-Length on a 204');
  t.is(rawHeader(deleted!, 'transfer-encoding'), undefined);
  t.is(root!.status, 200);
  t.true(ex.closed);
});

test('many concurrent requests on keep-alive connections are all answered', async (t) => {
  const tok = await tenantToken('keepalive');
  const auth = { authorization: `Bearer ${tok}` };
  // Keep-alive without pipelining: uWS refuses a request pipelined behind one still pending on
  // I/O (it supports only synchronous pipelining), and common clients do not pipeline.
  const pool = new Pool(t.context.service.url, { connections: 8, pipelining: 1 });
  let opened = 0;
  pool.on('connect', () => opened++);
  const creates = 200;
  try {
    const jobs = Array.from({ length: creates * 3 }, async (_, i) => {
      if (i % 3 === 0) {
        const res = await pool.request({
          path: '/v1/orders',
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ currency: 'EUR', note: `n-${i}` }),
        });
        const body = (await res.body.json()) as { note: string };
        return res.statusCode === 201 && body.note === `n-${i}`;
      }
      const path = i % 3 === 1 ? '/v1/orders?limit=5' : '/v1';
      const res = await pool.request({ path, method: 'GET', headers: auth });
      await res.body.json();
      return res.statusCode === 200;
    });
    const results = await Promise.all(jobs);
    t.is(results.filter(Boolean).length, results.length);
  } finally {
    await pool.close();
  }
  // Connections were reused, not one per request.
  t.true(opened >= 1 && opened <= 8, `${opened} connections`);
  const all: string[] = [];
  let next: string | undefined = '/v1/orders?limit=100';
  while (next) {
    const res = await fetch(`${t.context.service.url}${next}`, { headers: auth });
    const page = (await res.json()) as { data: { id: string }[]; _links: { next?: { href: string } } };
    all.push(...page.data.map((o) => o.id));
    next = page._links.next?.href;
  }
  t.is(all.length, creates);
  t.is(new Set(all).size, creates, 'every create landed exactly once');
});

test('an answer on a connection kept open says for how long; one that closes it does not', async (t) => {
  const tok = await tenantToken('keep-alive-hint');
  const auth = { Authorization: `Bearer ${tok}` };
  const ex = await rawExchange(t.context.service.port, {
    send: [
      rawRequest('GET', '/v1/orders', auth),
      afterResponses(['GET']),
      // 404, answered by the pipeline: every kept-open answer carries it, not only successes.
      rawRequest('GET', '/v1/nowhere', auth),
      afterResponses(['GET', 'GET']),
      rawRequest('GET', '/v1', { Connection: 'close' }),
    ],
    timeoutMs: 5000,
  });
  const [list, missing, last] = parseResponses(ex.bytes, ['GET', 'GET', 'GET']);
  t.is(list!.status, 200);
  t.deepEqual(list!.headers['keep-alive'], ['timeout=5']);
  t.is(missing!.status, 404);
  t.deepEqual(missing!.headers['keep-alive'], ['timeout=5']);
  t.is(last!.status, 200);
  t.is(rawHeader(last!, 'keep-alive'), undefined, 'the client asked to close');
  t.true(ex.closed);

  // A refusal that closes the connection says so, and promises nothing.
  const body = orderBodyOfSize(LIMIT + 1);
  const head = rawRequest('POST', '/v1/orders', { ...auth, 'Content-Type': 'application/json', 'Content-Length': String(body.length) });
  const refused = only(parseResponses((await rawExchange(t.context.service.port, { send: [head], timeoutMs: 3000 })).bytes, ['POST']));
  t.is(refused.status, 413);
  t.is(rawHeader(refused, 'keep-alive'), undefined);
  t.is(rawHeader(refused, 'connection'), 'close');
});

test('Connection: close is honoured however it is spelt, and answered even to a client that half-closes after its request', async (t) => {
  const tok = await tenantToken('connection-close');
  const auth = `Authorization: Bearer ${tok}\r\n`;
  const spellings: [string, string][] = [
    ['the option among others', 'Connection: keep-alive, close\r\n'],
    ['the option first of two', 'Connection: close, TE\r\nTE: trailers\r\n'],
    ['in capitals', 'Connection: CLOSE\r\n'],
    ['on a second line', 'Connection: keep-alive\r\nConnection: close\r\n'],
  ];
  // A page (answered after its read) and a 404 (answered at once).
  for (const [why, lines, path, status] of spellings.flatMap(([w, l]) => [[`${w}, a page`, l, '/v1/orders', 200], [`${w}, a 404`, l, '/v1/nowhere', 404]] as const)) {
    const ex = await rawExchange(t.context.service.port, { send: [`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}${lines}\r\n`], timeoutMs: 4000 });
    const answer = only(parseResponses(ex.bytes, ['GET']));
    t.is(answer.status, status, why);
    t.is(rawHeader(answer, 'keep-alive'), undefined, `${why}: no keep-alive promised`);
    t.true(ex.closed && (ex.closedAfterMs ?? Infinity) < 2000, `${why}: closed after ${ex.closedAfterMs} ms`);
  }
  // As `nc -N` or a health check sends it: the request, then the client's FIN. uWS closes on the
  // FIN, so an answer held back for a later turn would be lost; one ready at once is not.
  const order = await createOrder(t, tok);
  for (const [why, bytes] of [
    ['the root document', 'GET /v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'],
    ['an order', `GET /v1/orders/${order.id} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Connection: close\r\n\r\n`],
    ['an order, close among other options', `GET /v1/orders/${order.id} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Connection: keep-alive, close\r\n\r\n`],
  ]) {
    const ex = await rawExchange(t.context.service.port, { send: [bytes!], halfClose: true, timeoutMs: 4000 });
    t.is(parseResponses(ex.bytes, ['GET'])[0]?.status, 200, `${why}: ${JSON.stringify(ex.bytes.toString('latin1').slice(0, 200))}`);
  }
});

test('reads may be pipelined: three GETs of one order in one write get three answers, in order', async (t) => {
  const tok = await tenantToken('pipelined-reads');
  const auth = { Authorization: `Bearer ${tok}` };
  const order = await createOrder(t, tok);
  const get = rawRequest('GET', `/v1/orders/${order.id}`, auth);
  const once = rawRequest('GET', `/v1/orders/${order.id}`, { ...auth, Connection: 'close' });
  const warm = only(parseResponses((await rawExchange(t.context.service.port, { send: [once], timeoutMs: 5000 })).bytes, ['GET']));
  t.is(warm.status, 200);
  // The tag of this request's variant: fetch's Accept-Encoding named another.
  const etag = rawHeader(warm, 'etag')!;
  const conditional = rawRequest('GET', `/v1/orders/${order.id}`, { ...auth, 'If-None-Match': etag });
  const ex = await rawExchange(t.context.service.port, {
    send: [Buffer.concat([get, conditional, rawRequest('GET', `/v1/orders/${order.id}`, { ...auth, Connection: 'close' })])],
    timeoutMs: 5000,
  });
  const answers = parseResponses(ex.bytes, ['GET', 'GET', 'GET']);
  t.deepEqual(
    answers.map((a) => a.status),
    [200, 304, 200],
  );
  t.is(asAnswer(answers[0]!).text, order.text);
  t.is(rawHeader(answers[1]!, 'etag'), etag);
  t.is(asAnswer(answers[2]!).text, order.text);
  t.true(ex.closed);
});

test('a client that reads the keep-alive hint closes an idle connection before the server does', async (t) => {
  // undici keeps an idle connection for the hint less its keepAliveTimeoutThreshold (2 s in
  // undici 7): 3 s here.
  // Without the hint it would keep it for its own keepAliveTimeout (60 s below), and uWS would
  // close it first, after 8 to 12 s: the race that resets a request sent just then.
  const pool = new Pool(t.context.service.url, { connections: 1, keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000 });
  const started = Date.now();
  const gone = new Promise<{ err: Error; ms: number }>((resolve) => {
    pool.on('disconnect', (_origin, _targets, err) => resolve({ err, ms: Date.now() - started }));
  });
  try {
    const res = await pool.request({ path: '/v1', method: 'GET' });
    await res.body.text();
    t.is(res.headers['keep-alive'], 'timeout=5');
    const timeout = new Promise<undefined>((resolve) => setTimeout(resolve, 15_000, undefined).unref());
    const closed = await Promise.race([gone, timeout]);
    if (!closed) return t.fail('the idle connection was still open after 15 s');
    // undici names who closed: its own idle timer, or "other side closed" when the server did.
    t.regex(closed.err.message, /idle timeout/i, `closed by: ${closed.err.message}`);
    t.true(closed.ms < 7_000, `closed after ${closed.ms} ms`);
  } finally {
    await pool.close();
  }
});
