// At least once across SIGKILL (issue 5, CONTRACT §10): the real process (`node
// dist/gateway/main.js`) fans 100 events out to 20 endpoints, is SIGKILLed in the middle of it,
// and restarts on the same DATA_DIR. Every (endpoint, event) pair must then arrive, each event
// with the id it was given when its write committed (the ids GET /v1/events lists). And across
// a clean shutdown: a delivery to a receiver that never answers does not hold it up, and is made
// after the restart.

import anyTest, { type TestFn } from 'ava';
import { ActorHost } from '../actors/host.js';
import { newId, partitionOf } from '../common/ids.js';
import { allPartitions } from '../common/partitions.js';
import type { EndpointRecord } from '../proto/webhooks.js';
import { HttpClient } from './helpers/client.js';
import { exited, startChild, useChildren, type ChildContext, type Running } from './helpers/child-service.js';
import { removeDir, silentLog, tempDir, token } from './helpers/edge-kit.js';
import { deliveries, endpointCreate, ok, startReceiver, until, WEBHOOK_SCOPES } from './helpers/webhook-kit.js';

const test = anyTest as TestFn<ChildContext>;
const SECRET = 'webhook-durability-secret-0123456789abcdef';
const ENDPOINTS = 20;
const ORDERS = 100;

useChildren(test, 'webhook-durability');

function start(t: { context: ChildContext }): Promise<Running> {
  return startChild(t.context.children, t.context.dir, SECRET, { LOG_LEVEL: 'error', WEBHOOK_ALLOW_PRIVATE_TARGETS: '1', WEBHOOK_RETRY_SCHEDULE: '1,1,1,1,1' });
}

test.serial('SIGKILL mid-fan-out: after a restart every event reaches every endpoint with its original id', async (t) => {
  const tok = await token(SECRET, WEBHOOK_SCOPES, { tenant: 'durable-hooks' });
  const r = await startReceiver();
  // Slow answers keep the fan-out in flight long enough to be cut.
  r.answer = () => ({ status: 200, delayMs: 40 });
  let run = await start(t);
  let http = new HttpClient(run.url);
  try {
    const auth = { authorization: `Bearer ${tok}` };
    for (let i = 0; i < ENDPOINTS; i++) {
      const e = await http.send('POST', '/v1/webhook-endpoints', { headers: auth, json: { endpointUrl: `http://127.0.0.1:${r.port}/hook/${i}`, eventTypes: ['order.created'] } });
      t.is(e.status, 201);
    }
    await Promise.all(
      Array.from({ length: ORDERS }, async (_, i) => {
        const o = await http.send('POST', '/v1/orders', { headers: auth, json: { currency: 'EUR', note: `o${i}` } });
        t.is(o.status, 201);
      }),
    );
    await until('the fan-out to start', () => r.got.length >= 100, 30_000);
    run.child.kill('SIGKILL');
    await exited(run.child);
    const before = new Set(r.got.map((g) => `${g.path} ${g.json.id as string}`)).size;
    t.log(`${before} of ${ENDPOINTS * ORDERS} deliveries had arrived at the kill`);
    t.true(before < ENDPOINTS * ORDERS, 'the kill came while deliveries were still pending, so the restart has work to resume');
    await http.close();

    run = await start(t);
    http = new HttpClient(run.url);
    const ids: string[] = [];
    let path: string | undefined = '/v1/events?type=order.created&limit=100';
    for (let i = 0; path && i < 5; i++) {
      const page = await http.send('GET', path, { headers: auth });
      t.is(page.status, 200);
      ids.push(...(page.json.data as { id: string }[]).map((e) => e.id));
      path = page.json._links.next?.href as string | undefined;
    }
    t.is(ids.length, ORDERS);
    const want = new Set<string>();
    for (let i = 0; i < ENDPOINTS; i++) for (const id of ids) want.add(`/hook/${i} ${id}`);
    r.answer = () => ({ status: 200 });
    await until('every delivery', () => new Set(r.got.map((g) => `${g.path} ${g.json.id as string}`)).size >= want.size, 60_000);
    const got = new Set(r.got.map((g) => `${g.path} ${g.json.id as string}`));
    t.deepEqual([...got].sort(), [...want].sort());
  } finally {
    await http.close();
    run.child.kill('SIGKILL');
    await r.close();
  }
});

test.serial('a clean shutdown cuts off a delivery whose receiver never answers; it stays pending, counted as no attempt, and is made after the restart', async (t) => {
  const dir = await tempDir('webhook-shutdown');
  const r = await startReceiver();
  // The first request is never answered (within the test); the next ones at once.
  r.answer = (_g, n) => (n === 1 ? { status: 200, delayMs: 120_000 } : { status: 200 });
  const open = (deferJobs = false): ActorHost =>
    new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: silentLog(), deferJobs, webhooks: { retrySchedule: [1], timeoutMs: 30_000, disableAfterMs: 3_600_000, allowPrivateTargets: true } });
  let host = open();
  try {
    const tenant = 'durable-shutdown';
    const e = await ok<EndpointRecord>(host.handle(endpointCreate(tenant, r.url)));
    const id = newId('order');
    await ok(host.handle({ kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
    await until('the delivery under way', () => r.got.length === 1);
    const closing = Date.now();
    await host.close();
    const took = Date.now() - closing;
    // WEBHOOK_TIMEOUT_MS is 30 s: far from it, whatever the machine's load.
    t.true(took < 10_000, `close took ${took} ms`);

    // Opened with its jobs held back (as an actor node holds them until its partitions are
    // claimed), the host sends nothing; started, it makes the delivery.
    host = open(true);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    t.is(r.got.length, 1, 'nothing sent before start()');
    host.start();
    await until('the delivery made after the restart', () => r.got.length === 2);
    t.is(r.got[1]!.json.id, r.got[0]!.json.id, 'the same event, with its id');
    let d: Awaited<ReturnType<typeof deliveries>>[number] | undefined;
    await until('its outcome stored', async () => {
      [d] = await deliveries(host, tenant, e.id);
      return d?.status === 'delivered';
    });
    t.deepEqual(
      d!.attempts.map((a) => [a.attempt, a.outcome]),
      [[1, 'delivered']],
      'the attempt cut off by the shutdown was counted',
    );
  } finally {
    await host.close();
    await r.close();
    await removeDir(dir);
  }
});
