// At least once across SIGKILL (issue 5, CONTRACT §10): the real process (`node
// dist/gateway/main.js`) fans 100 events out to 20 endpoints, is SIGKILLed in the middle of it,
// and restarts on the same DATA_DIR. Every (endpoint, event) pair must then arrive, each event
// with the id it was given when its write committed (the ids GET /v1/events lists).

import anyTest, { type TestFn } from 'ava';
import { HttpClient } from './helpers/client.js';
import { exited, startChild, useChildren, type ChildContext, type Running } from './helpers/child-service.js';
import { token } from './helpers/edge-kit.js';
import { startReceiver, until, WEBHOOK_SCOPES } from './helpers/webhook-kit.js';

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
