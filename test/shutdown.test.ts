// A graceful stop over real sockets (embedded service on port 0): a request under way when the
// stop begins is answered and its write kept, a request arriving meanwhile on a connection kept
// open is told 503 with Retry-After and closed, and what the bus or the host is asked once
// closed is a 503 too, never a failure against a closed store.

import { connect } from 'node:net';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { loadConfig } from '../common/config.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost } from '../actors/host.js';
import { allPartitions } from '../common/partitions.js';
import { newId, partitionOf } from '../common/ids.js';
import { startService } from '../gateway/app.js';
import { ALL_SCOPES, freshTenant, removeDir, silentLog, tempDir, token } from './helpers/edge-kit.js';
import { afterResponses, parseResponses, rawExchange, rawHeader, rawRequest, type RawStep } from './helpers/raw-http.js';

const SECRET = 'shutdown-test-secret-0123456789abcdef';

test('a stop answers the requests under way, refuses new ones 503 and closes their connections', async (t) => {
  const dir = await tempDir('shutdown');
  t.teardown(() => removeDir(dir));
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: SECRET });
  const service = await startService(config, silentLog());
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('shutdown') });
  const auth = { Authorization: `Bearer ${tok}` };

  let stopping!: () => void;
  const stopped = new Promise<void>((resolve) => (stopping = resolve));
  const untilStopping = async (): Promise<void> => {
    await stopped;
    // The stop has begun; give the server a moment to take it in before the next bytes.
    await new Promise((r) => setTimeout(r, 50));
  };
  // Under way: the head and part of the body are in when the stop begins, the rest after.
  const body = JSON.stringify({ currency: 'EUR', note: 'written while stopping' });
  const head = rawRequest('POST', '/v1/orders', { ...auth, 'Content-Type': 'application/json', 'Content-Length': String(body.length) });
  let headSent!: () => void;
  const headIsOut = new Promise<void>((resolve) => (headSent = resolve));
  const signal = async (): Promise<void> => headSent();
  const underWay = rawExchange(service.port, { send: [head, body.slice(0, 5), signal, untilStopping, body.slice(5)], timeoutMs: 8000 });
  // Kept open after one answer, then a second request once the stop has begun.
  const get = rawRequest('GET', '/v1/orders?limit=1', auth);
  let firstAnswered!: () => void;
  const answeredOnce = new Promise<void>((resolve) => (firstAnswered = resolve));
  const afterFirst: RawStep = async (received) => {
    await afterResponses(['GET'])(received);
    firstAnswered();
  };
  const keptOpen = rawExchange(service.port, { send: [get, afterFirst, untilStopping, get], timeoutMs: 8000 });
  // Both connections are open, the first has sent its head and the second has its answer before
  // the stop; the server (in this process) is given a moment to read the head.
  await Promise.all([headIsOut, answeredOnce]);
  await new Promise((r) => setTimeout(r, 100));
  const closing = service.close();
  stopping();

  const [answered, refused] = await Promise.all([underWay, keptOpen]);
  await closing;
  const created = parseResponses(answered.bytes, ['POST']);
  t.is(created.length, 1);
  t.is(created[0]!.status, 201, created[0]!.body.toString());
  t.is(rawHeader(created[0]!, 'connection'), 'close', 'the answer under way closes its connection');
  t.is(rawHeader(created[0]!, 'keep-alive'), undefined);
  t.true(answered.closed, 'closed by the server');
  const [first, second] = parseResponses(refused.bytes, ['GET', 'GET']);
  t.is(first!.status, 200);
  t.is(second!.status, 503, second!.body.toString());
  t.is((JSON.parse(second!.body.toString()) as { type: string }).type, '/problems/unavailable');
  t.is(rawHeader(second!, 'retry-after'), '1');
  t.true(refused.closed, 'the refused request closed its connection');

  // The write answered 201 while stopping is on disk.
  const again = await startService(loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: SECRET }), silentLog());
  t.teardown(() => again.close());
  const id = (JSON.parse(created[0]!.body.toString()) as { id: string }).id;
  const read = await fetch(`${again.url}/v1/orders/${id}`, { headers: { authorization: `Bearer ${tok}` } });
  t.is(read.status, 200);
  t.is(((await read.json()) as { note: string }).note, 'written while stopping');
});

for (const connection of [undefined, 'close', 'keep-alive, close']) {
  // One at a time: each builds a 6 MB page, and the stop must find its answer under way.
  test.serial(`a stop waits for the last byte of a large answer its client reads slowly${connection ? ` (Connection: ${connection})` : ''}`, (t) => stopWaitsForSlowReader(t, connection));
}

async function stopWaitsForSlowReader(t: ExecutionContext, connection: string | undefined): Promise<void> {
  const dir = await tempDir('shutdown-paced');
  t.teardown(() => removeDir(dir));
  const service = await startService(loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: SECRET }), silentLog());
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('paced') });
  // 60 orders at the schemas' limits (50 metadata values of 500 four-byte characters): a page of
  // about 6 MB, more than the socket buffers hold for a client that does not read.
  const metadata = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, '\u{1F600}'.repeat(500)]));
  for (let i = 0; i < 60; i += 10) {
    await Promise.all(
      Array.from({ length: 10 }, async () => {
        const r = await fetch(`${service.url}/v1/orders`, { method: 'POST', headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' }, body: JSON.stringify({ currency: 'EUR', metadata }) });
        if (r.status !== 201) throw new Error(`create: ${r.status}`);
      }),
    );
  }
  const socket = connect(service.port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const chunks: Buffer[] = [];
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.pause();
  socket.write(rawRequest('GET', '/v1/orders?limit=100', { Authorization: `Bearer ${tok}`, ...(connection ? { Connection: connection } : {}) }));
  await new Promise((r) => setTimeout(r, 300));
  let closed = false;
  const closing = service.close().then(() => (closed = true));
  await new Promise((r) => setTimeout(r, 1000));
  t.false(closed, 'the stop waits while the answer is still being written');
  socket.resume();
  await closing;
  await new Promise((r) => setTimeout(r, 100));
  socket.destroy();
  const [page] = parseResponses(Buffer.concat(chunks), ['GET']);
  t.is(page?.status, 200);
  t.is(page?.body.length, Number(rawHeader(page!, 'content-length')), 'the whole body arrived');
  t.is((JSON.parse(page!.body.toString()) as { data: unknown[] }).data.length, 60);
}

test('once closed, the in-process bus and the host answer 503, not a failure of the store', async (t) => {
  const dir = await tempDir('shutdown-bus');
  t.teardown(() => removeDir(dir));
  const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 100, log: silentLog() });
  await host.ready;
  const bus = new LocalBus(host, 5000);
  const partition = partitionOf(newId('order'));
  const create = { kind: 'order.create' as const, tenant: 't1', partition, id: newId('order', partition), input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] };
  const get = { kind: 'order.get' as const, tenant: 't1', partition, id: create.id };
  t.true((await bus.send(create)).ok);
  await bus.close();
  for (const answer of [await bus.send(create), bus.read(get), (await bus.scatter({ kind: 'order.list', tenant: 't1', query: { tenant: 't1', sort: 'createdAt', dir: 'asc', limit: 10 } } as never))[0]]) {
    t.deepEqual(answer, { ok: false, error: { code: 'unavailable', detail: 'The service is shutting down.' } });
  }
  await host.close();
  for (const answer of [await host.handle(create), host.read(get), await host.query({ kind: 'order.list' } as never)]) {
    t.deepEqual(answer, { ok: false, error: { code: 'unavailable', detail: 'The service is shutting down.' } });
  }
});
