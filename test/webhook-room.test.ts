// Webhook deliveries while storage is short of room (storage/room.ts): nothing is sent, since an
// attempt whose outcome could not be stored would be sent again however the receiver answered;
// once there is room, each event is delivered once and stored as delivered. The room is injected;
// LMDB, the dispatcher and the receiver are real.

import test from 'ava';
import { ActorHost } from '../actors/host.js';
import { newId, partitionOf } from '../common/ids.js';
import { allPartitions } from '../common/partitions.js';
import type { EndpointRecord } from '../proto/webhooks.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { deliveries, endpointCreate, ok, startReceiver, until } from './helpers/webhook-kit.js';

const MB = 1024 * 1024;

test('short of room for deliveries, nothing is sent and clients are refused; with room again each event is delivered once', async (t) => {
  const dir = await tempDir('webhook-room');
  const r = await startReceiver();
  const free = { bytes: 1024 * MB };
  // Jobs held back until start(): the order's event waits in the outbox meanwhile.
  const host = new ActorHost({
    dataDir: dir,
    partitions: allPartitions(),
    mailboxLimit: 100,
    log: silentLog(),
    deferJobs: true,
    storageReserveBytes: 64 * MB,
    measureStorageRoom: () => free.bytes,
    webhooks: { retrySchedule: [1], timeoutMs: 5_000, disableAfterMs: 3_600_000, allowPrivateTargets: true, noRoomRetryMs: 500 },
  });
  t.teardown(async () => {
    await host.close();
    await r.close();
    await removeDir(dir);
  });
  const tenant = 'room-hooks';
  const e = await ok<EndpointRecord>(host.handle(endpointCreate(tenant, r.url)));
  const id = newId('order');
  const create = (orderId: string) => host.handle({ kind: 'order.create', tenant, partition: partitionOf(orderId), id: orderId, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] });
  t.true((await create(id)).ok);

  // 20 MB left: under half the 64 MB reserve, over a quarter. Seen at the next measure.
  free.bytes = 20 * MB;
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const refused = await create(newId('order'));
  t.false(refused.ok);
  if (!refused.ok) {
    t.is(refused.error.code, 'unavailable');
    t.is(refused.error.retryAfter, '30');
  }
  host.start();
  // Several rounds of the pump's and the workers' retries (500 ms here).
  await new Promise((resolve) => setTimeout(resolve, 2500));
  t.is(r.got.length, 0, 'nothing sent while short of room');

  free.bytes = 1024 * MB;
  await until('the delivery', () => r.got.length >= 1);
  await until('its outcome stored', async () => (await deliveries(host, tenant, e.id))[0]?.status === 'delivered');
  await new Promise((resolve) => setTimeout(resolve, 1500));
  t.is(r.got.length, 1, 'sent once');
  const [d] = await deliveries(host, tenant, e.id);
  t.is(d?.attempts.length, 1);
});
