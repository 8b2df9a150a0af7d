// Webhooks in cluster mode (README "Webhooks"): two actor nodes each dispatch the events their
// own partitions emitted; the tenant's endpoints live on one of them, and the other reads them
// over NATS. Every event reaches the receiver once per endpoint, the delivery log merges both
// nodes, and a 410 disables the endpoint through its owner.

import anyTest, { type TestFn } from 'ava';
import { Api } from './helpers/client.js';
import { startCluster, type RunningService } from './helpers/service.js';
import { startReceiver, until, WEBHOOK_SCOPES } from './helpers/webhook-kit.js';

const test = anyTest as TestFn<{ service: RunningService; api: Api }>;

test.before(async (t) => {
  const service = await startCluster({ WEBHOOK_ALLOW_PRIVATE_TARGETS: '1', WEBHOOK_RETRY_SCHEDULE: '1,1,1' });
  t.context = { service, api: new Api(service.url, service.secret) };
});

test.after.always(async (t) => {
  await t.context?.api.close();
  await t.context?.service.close();
});

test('both actor nodes deliver their events to the tenant endpoint; the log merges them; 410 disables via the owner', async (t) => {
  const c = await t.context.api.as('cluster-hooks', WEBHOOK_SCOPES);
  const r = await startReceiver();
  try {
    const e = await c.post('/v1/webhook-endpoints', { endpointUrl: r.url, eventTypes: ['order.created'] });
    t.is(e.status, 201);
    const ids = new Set<string>();
    const partitions = new Set<number>();
    for (let i = 0; i < 24; i++) {
      const o = await c.post('/v1/orders', { currency: 'EUR', note: `c${i}` });
      t.is(o.status, 201);
      ids.add(o.json.id as string);
      partitions.add(parseInt((o.json.id as string).slice(13, 15), 16) < 128 ? 0 : 1);
    }
    // Random partitions: both nodes hold orders (1 in 2^23 that they do not).
    t.is(partitions.size, 2);
    await until('every event', () => new Set(r.got.map((g) => g.json.data.id as string)).size === ids.size, 30_000);
    t.deepEqual([...new Set(r.got.map((g) => g.json.data.id as string))].sort(), [...ids].sort());

    let log: { status: string }[] = [];
    await until('the merged log', async () => {
      log = (await c.get(`/v1/webhook-endpoints/${e.json.id as string}/deliveries?limit=100`)).json.data;
      return log.length === ids.size && log.every((d) => d.status === 'delivered');
    });
    t.is(log.length, ids.size);

    r.answer = () => ({ status: 410 });
    for (let i = 0; i < 4; i++) await c.post('/v1/orders', { currency: 'EUR' });
    await until('disabled', async () => (await c.get(`/v1/webhook-endpoints/${e.json.id as string}`)).json.status === 'disabled', 30_000);
    t.is((await c.get(`/v1/webhook-endpoints/${e.json.id as string}`)).json.disabledReason, 'gone');
  } finally {
    await r.close();
  }
});
