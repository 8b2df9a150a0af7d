// gateway/http.ts around a stub pipeline, over real sockets: an answer given at once and one
// given later reach the client alike, and an answer that cannot be written (a bug of ours) is
// logged and closes its connection, at once or later alike, while the server goes on serving.

import anyTest, { type TestFn } from 'ava';
import type { GatewayRequest, GatewayResponse } from '../gateway/http-types.js';
import { type HttpServer, listen } from '../gateway/http.js';
import { capturingLog } from './helpers/edge-kit.js';
import { parseResponses, rawExchange, rawRequest } from './helpers/raw-http.js';

interface Context {
  server: HttpServer;
  logged: string[];
}

const test = anyTest as TestFn<Context>;

function answerFor(req: GatewayRequest): GatewayResponse {
  // A header value that is not a string: writing it throws.
  if (req.path.endsWith('/broken')) return { status: 200, headers: { 'x-count': 5 as unknown as string }, body: '{}' };
  return { status: 200, headers: { 'content-type': 'application/json', 'x-path': req.path }, body: JSON.stringify({ path: req.path }) };
}

test.before(async (t) => {
  const logged: string[] = [];
  const server = await listen((req) => (req.path === '/later/rejects' ? Promise.reject(new Error('a bug in the pipeline')) : req.path.startsWith('/later') ? new Promise((resolve) => setImmediate(() => resolve(answerFor(req)))) : answerFor(req)), {
    host: '127.0.0.1',
    port: 0,
    maxBodyBytes: 1024,
    log: capturingLog(logged),
    refuse: (_req, err) => ({ status: err.status, headers: {}, body: undefined }),
    needsAddress: () => false,
  });
  t.context = { server, logged };
});

test.after.always((t) => t.context.server?.close());

for (const when of ['now', 'later']) {
  test.serial(`an answer given ${when} is written whole, with its headers`, async (t) => {
    const ex = await rawExchange(t.context.server.port, { send: [rawRequest('GET', `/${when}/ok`, { Connection: 'close' })], timeoutMs: 3000 });
    const [r] = parseResponses(ex.bytes, ['GET']);
    t.is(r?.status, 200);
    t.deepEqual(r?.headers['x-path'], [`/${when}/ok`]);
    t.deepEqual(r?.headers['content-type'], ['application/json']);
    t.is(r?.body.toString(), JSON.stringify({ path: `/${when}/ok` }));
  });

  test.serial(`an answer given ${when} that cannot be written is logged and its connection closed; the next is served`, async (t) => {
    const before = t.context.logged.length;
    // Kept alive by the client: only the server's close ends the exchange before the deadline.
    const ex = await rawExchange(t.context.server.port, { send: [rawRequest('GET', `/${when}/broken`)], timeoutMs: 3000 });
    t.true(ex.closed, 'closed by the server');
    t.true(ex.closedAfterMs! < 2000, `closed after ${ex.closedAfterMs} ms`);
    t.false(ex.bytes.toString('latin1').includes('HTTP/1.1 200'), 'no answer claims success');
    t.true(t.context.logged.slice(before).some((l) => l.includes('writing a response failed')));
    const next = await rawExchange(t.context.server.port, { send: [rawRequest('GET', `/${when}/ok`, { Connection: 'close' })], timeoutMs: 3000 });
    t.is(parseResponses(next.bytes, ['GET'])[0]?.status, 200);
  });
}

test.serial('a pipeline whose promise rejects gets a bare 500 with a trace id, logged; the connection serves the next request', async (t) => {
  const before = t.context.logged.length;
  const ex = await rawExchange(t.context.server.port, {
    send: [rawRequest('GET', '/later/rejects'), rawRequest('GET', '/later/ok', { Connection: 'close' })],
    timeoutMs: 3000,
  });
  const [failed, next] = parseResponses(ex.bytes, ['GET', 'GET']);
  t.is(failed?.status, 500);
  t.deepEqual(failed?.headers['content-type'], ['application/problem+json']);
  const problem = JSON.parse(failed!.body.toString()) as { status: number; traceId: string; detail?: string };
  t.is(problem.status, 500);
  t.deepEqual(failed?.headers['trace-id'], [problem.traceId]);
  t.false(failed!.body.toString().includes('a bug in the pipeline'), 'no internal message in the body');
  t.true(t.context.logged.slice(before).some((l) => l.includes('a bug in the pipeline')));
  t.is(next?.status, 200);
  t.is(next?.body.toString(), JSON.stringify({ path: '/later/ok' }));
});
