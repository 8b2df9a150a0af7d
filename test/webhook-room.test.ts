// Webhook deliveries while storage is short of room (storage/room.ts): nothing is sent, since an
// attempt whose outcome could not be stored would be sent again however the receiver answered;
// once there is room, each event is delivered once and stored as delivered. The room is injected;
// LMDB, the dispatcher and the receiver are real.

import test, { type ExecutionContext } from 'ava';
import { ActorHost } from '../actors/host.js';
import { newId, partitionFor, partitionOf } from '../common/ids.js';
import { allPartitions } from '../common/partitions.js';
import type { EndpointRecord } from '../proto/webhooks.js';
import { failCommits, removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { deliveries, endpointCreate, ok, startReceiver, until, type Receiver } from './helpers/webhook-kit.js';

const MB = 1024 * 1024;

/**
 * A host with a 64 MB reserve whose room is `free.bytes` (1 GB to begin with), its jobs held until
 * start() so events wait in the outbox, retrying sends every 500 ms; and a receiver. Both are
 * closed after the test.
 */
async function hostWithRoom(t: ExecutionContext, name: string): Promise<{ host: ActorHost; r: Receiver; free: { bytes: number } }> {
  const dir = await tempDir(name);
  const r = await startReceiver();
  const free = { bytes: 1024 * MB };
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
  return { host, r, free };
}

test('short of room for deliveries, nothing is sent and clients are refused; with room again each event is delivered once', async (t) => {
  const { host, r, free } = await hostWithRoom(t, 'webhook-room');
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

test("room for sends is held until their outcomes are stored: near the floor, an event to many endpoints waits whole instead of going out and being sent again, and a small event behind it goes out", async (t) => {
  const { host, r, free } = await hostWithRoom(t, 'webhook-room-hold');
  r.answer = () => ({ status: 200, delayMs: 300 });
  const tenant = 'room-hold';
  const ENDPOINTS = 200;
  for (let i = 0; i < ENDPOINTS; i++) await ok<EndpointRecord>(host.handle(endpointCreate(tenant, `${r.url}/${i}`)));
  const order = (of: string) => {
    const id = newId('order');
    return host.handle({ kind: 'order.create', tenant: of, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] });
  };
  t.true((await order(tenant)).ok);
  // Another tenant's event, behind it in the outbox, to one endpoint.
  await ok<EndpointRecord>(host.handle(endpointCreate('room-small', `${r.url}/small`)));
  t.true((await order('room-small')).ok);

  // 1.1 MB over the deliveries' floor (half the 64 MB reserve): room for a few sends' outcomes, not 200.
  free.bytes = 32 * MB + 1.1 * MB;
  await new Promise((resolve) => setTimeout(resolve, 1100));
  host.start();
  await new Promise((resolve) => setTimeout(resolve, 3000));
  t.deepEqual(
    r.got.map((g) => g.path),
    [`${new URL(r.url).pathname}/small`],
    'nothing of the large event sent, which could not be stored; the small one behind it was',
  );

  free.bytes = 1024 * MB;
  await until('every delivery', () => r.got.length >= ENDPOINTS + 1, 30_000);
  await new Promise((resolve) => setTimeout(resolve, 1500));
  t.is(r.got.length, ENDPOINTS + 1, 'each sent once');
  t.is(new Set(r.got.map((g) => g.path)).size, ENDPOINTS + 1);
});

test("a receiver's 410 disables its endpoint while clients' writes are refused but deliveries still go out", async (t) => {
  const { host, r, free } = await hostWithRoom(t, 'webhook-room-gone');
  r.answer = () => ({ status: 410 });
  const tenant = 'room-gone';
  const e = await ok<EndpointRecord>(host.handle(endpointCreate(tenant, r.url)));
  const id = newId('order');
  t.true((await host.handle({ kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] })).ok);

  // 40 MB left: under the 64 MB reserve, so clients are refused; over half of it, so deliveries go.
  free.bytes = 40 * MB;
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const other = newId('order');
  const refused = await host.handle({ kind: 'order.create', tenant, partition: partitionOf(other), id: other, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] });
  t.false(refused.ok, "a client's write is refused");
  host.start();
  await until('the delivery', () => r.got.length >= 1);
  const endpoint = async () => ok<EndpointRecord>(host.handle({ kind: 'webhook.get', tenant, partition: partitionFor(tenant), id: e.id }));
  await until('the endpoint disabled', async () => (await endpoint()).status === 'disabled', 5_000);
  t.is((await endpoint()).status, 'disabled');
  t.is(r.got.length, 1);
});

test("a worker's round that fails on one delivery waits for the others' outcomes: none still on its way is found pending and sent again", async (t) => {
  const dir = await tempDir('webhook-round');
  const r = await startReceiver();
  const clock = { now: Date.UTC(2026, 0, 1) };
  const host = new ActorHost({
    dataDir: dir,
    partitions: allPartitions(),
    mailboxLimit: 100,
    log: silentLog(),
    now: () => clock.now,
    webhooks: { retrySchedule: [1, 5], timeoutMs: 5_000, disableAfterMs: 3_600_000, allowPrivateTargets: true },
  });
  t.teardown(async () => {
    await host.close();
    await r.close();
    await removeDir(dir);
  });
  const tenant = 'round';
  const e = await ok<EndpointRecord>(host.handle(endpointCreate(tenant, r.url)));
  // First attempts: 500 with Retry-After: 3, so on the host's clock (which stands still) both
  // are due again at the same moment, and one round of the endpoint's worker takes both.
  let second = false;
  r.answer = () => (second ? { status: 200, delayMs: 1500 } : { status: 500, headers: { 'retry-after': '3' } });
  const ids = [newId('order'), newId('order')];
  const create = (id: string) => host.handle({ kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] });
  for (const id of ids) t.true((await create(id)).ok);
  await until('both first attempts stored', async () => (await deliveries(host, tenant, e.id)).filter((d) => d.status === 'pending' && d.attempts.length === 1).length === 2);
  // The outbox rows go after the outcomes: let those commits land.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const [first, other] = await deliveries(host, tenant, e.id);
  // One delivery's event is gone by its retry (swept), and its settling commit fails; the other
  // is sent, and its receiver takes 1.5 s to answer.
  const events = (host as unknown as { dispatcher: { events: { get(id: string): unknown } } }).dispatcher.events;
  const get = events.get.bind(events);
  events.get = (id: string) => (id === first!.eventId ? undefined : get(id));
  failCommits(host, 1);
  second = true;
  clock.now += 3_000;
  await until('the other delivered', async () => (await deliveries(host, tenant, e.id)).find((d) => d.id === other!.id)?.status === 'delivered', 10_000);
  // Past the worker's retry after the failed round (1 s), and the delay of a second send.
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const sentAgain = r.got.filter((g) => (g.json as { id?: string } | undefined)?.id === other!.eventId).length;
  t.is(sentAgain, 2, 'the first attempt and its retry, and no third send');
  t.is((await deliveries(host, tenant, e.id)).find((d) => d.id === first!.id)?.status, 'failed', 'the one whose event is gone settles on the next round');
});
