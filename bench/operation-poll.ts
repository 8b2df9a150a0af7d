// Scenario: polling GET /v1/operations/{id} against GET /v1/orders/{id} (issue 3 target: polling
// at least 0.8x the order read's rate). An operation lives in its order's partition and is read
// from committed state like an order, so a poll is one hop to one owner. The operations are
// started with a long processing time, so every poll sees a running one (with Retry-After).
import { call, closeHttp } from './lib/http.js';
import { createOrder } from './lib/orders.js';
import { compare, finish, only, printRun, settings } from './lib/scenario.js';
import { startService } from './lib/servers.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'operation-poll';
const KEYS = 64;
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();
const auth = { authorization: `Bearer ${token}` };
const json = { ...auth, 'content-type': 'application/json' };

async function post(url: string, body: unknown, status: number): Promise<{ body: string; location?: string }> {
  const r = await call(url, { method: 'POST', headers: json, body: JSON.stringify(body) });
  if (r.status !== status) throw new Error(`POST ${url} answered ${r.status}: ${r.body.slice(0, 200)}`);
  return { body: r.body, location: r.headers.location };
}

const rows = await compare(
  only([{ kind: 'service', start: () => startService({ env: { REFUND_PROCESSING_MS: '600000' } }) }]),
  async (subject) => {
    const product = JSON.parse((await post(`${subject.url}/v1/products`, { name: 'Widget', price: 1000, currency: 'EUR' }, 201)).body) as { id: string };
    const orders: string[] = [];
    const operations: string[] = [];
    for (let i = 0; i < KEYS; i++) {
      const order = await createOrder(subject.url, token, JSON.stringify({ currency: 'EUR', items: [{ productId: product.id, quantity: 2 }] }));
      await post(`${subject.url}${order.path}/pay`, {}, 200);
      const started = await post(`${subject.url}/v1/refunds`, { orderId: order.id, amount: 1000 }, 202);
      orders.push(order.path);
      operations.push(started.location!);
    }
    return [
      { scenario: 'get order', request: { method: 'GET', paths: orders, headers: auth, expectStatus: 200 } },
      { scenario: 'poll operation', request: { method: 'GET', paths: operations, headers: auth, expectStatus: 200 } },
    ];
  },
  s,
  SCENARIO,
);

finish(SCENARIO, s, rows, [
  { label: 'operation polling >= 0.8x single-order GET rps', server: 'service', scenario: 'poll operation', metric: 'ratioVsScenario', baseline: 'get order', op: '>=', value: 0.8 },
]);
await closeHttp();
