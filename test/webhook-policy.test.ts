// Delivery policy details measured on the actor host directly (ARCHITECTURE: the host does the
// transactions): an endpoint failing without a success for WEBHOOK_DISABLE_AFTER_HOURS is
// disabled (the window shrunk to 1.5 s here, which the environment variable cannot express),
// a receiver slower than WEBHOOK_TIMEOUT_MS is a timeout that is retried, and a Retry-After
// longer than the schedule's step is honoured.

import anyTest, { type TestFn } from 'ava';
import type { DispatchOptions } from '../actors/dispatcher.js';
import { ActorHost } from '../actors/host.js';
import { newId, partitionFor, partitionOf } from '../common/ids.js';
import { newSigningSecret, verifyWebhook } from '../common/webhook-signature.js';
import type { Command } from '../proto/messages.js';
import type { DeliveryRecord, EndpointRecord } from '../proto/webhooks.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { deliveries, endpointCreate, ok, startReceiver, until, type Receiver } from './helpers/webhook-kit.js';
import { allPartitions } from '../common/partitions.js';

const test = anyTest as TestFn<{ host: ActorHost; dir: string; r: Receiver }>;
const ALL = allPartitions();

test.beforeEach(async (t) => {
  const dir = await tempDir('webhook-policy');
  const host = new ActorHost({
    dataDir: dir,
    partitions: ALL,
    mailboxLimit: 100,
    log: silentLog(),
    webhooks: { retrySchedule: [1, 1, 1, 1, 1, 4], timeoutMs: 300, disableAfterMs: 1500, allowPrivateTargets: true },
  });
  t.context = { host, dir, r: await startReceiver() };
});

test.afterEach.always(async (t) => {
  await t.context.r.close();
  await t.context.host.close();
  await removeDir(t.context.dir);
});

async function setup(t: { context: { host: ActorHost; r: Receiver } }, tenant: string): Promise<EndpointRecord> {
  const partition = partitionFor(tenant);
  const cmd: Command = {
    kind: 'webhook.create',
    tenant,
    partition,
    id: newId('webhookEndpoint', partition),
    input: { endpointUrl: t.context.r.url, eventTypes: ['*'], apiVersion: 'v1', description: null },
    secret: newSigningSecret(),
  };
  return ok<EndpointRecord>(t.context.host.handle(cmd));
}

/** An actor host of its own over a fresh directory, for a test that needs other webhook settings; `close` removes both. */
async function ownHost(label: string, webhooks: DispatchOptions): Promise<{ host: ActorHost; close(): Promise<void> }> {
  const dir = await tempDir(label);
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: silentLog(), webhooks });
  return {
    host,
    async close() {
      await host.close();
      await removeDir(dir);
    },
  };
}

async function order(host: ActorHost, tenant: string): Promise<void> {
  const id = newId('order');
  await ok(host.handle({ kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
}

test('no success for the disable window disables the endpoint as failing', async (t) => {
  const { host, r } = t.context;
  r.answer = () => ({ status: 503 });
  const e = await setup(t, 'policy-failing');
  await order(host, 'policy-failing');
  await until('disabled', async () => (await ok<EndpointRecord>(host.handle({ kind: 'webhook.get', tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id }))).status === 'disabled');
  const now = await ok<EndpointRecord>(host.handle({ kind: 'webhook.get', tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id }));
  t.is(now.disabledReason, 'failing');
  const [d] = await deliveries(host, e.tenant, e.id);
  t.is(d!.status, 'failed');
  t.is(d!.attempts.at(-1)!.outcome, 'disabled');
  // Retried before that: more than one attempt, all 503.
  t.true(d!.attempts.length >= 2);
  t.true(d!.attempts.every((a) => a.responseStatus === 503));
});

test('a re-enabled endpoint starts a new clock: one failure after it does not disable it again', async (t) => {
  const { host, r } = t.context;
  r.answer = () => ({ status: 503 });
  const e = await setup(t, 'policy-reenable');
  const target = { tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id };
  const get = async (): Promise<EndpointRecord> => ok<EndpointRecord>(host.handle({ kind: 'webhook.get', ...target }));
  await order(host, 'policy-reenable');
  await until('disabled', async () => (await get()).status === 'disabled');
  t.is((await get()).disabledReason, 'failing');
  // Back: one transient 503, then 2xx.
  let answered = 0;
  r.answer = () => ({ status: answered++ === 0 ? 503 : 200 });
  await ok(host.handle({ kind: 'webhook.patch', ...target, ifMatch: undefined, patch: { status: 'enabled' } }));
  await order(host, 'policy-reenable');
  await until('the retry after the re-enable is answered 200', () => answered >= 2, 10_000);
  await until('its outcome is committed', async () => (await deliveries(host, e.tenant, e.id)).some((d) => d.status === 'delivered'), 5_000);
  const now = await get();
  t.is(now.status, 'enabled', `disabled again: ${String(now.disabledReason)}`);
});

test('after a restart, a success the new process never saw still holds off the disable: the clock starts no earlier than the process', async (t) => {
  const { r } = t.context;
  // Event "bad" fails every time; every other event is delivered.
  r.answer = (g) => ({ status: g.json.data.note === 'bad' ? 503 : 200 });
  const opts = { dataDir: t.context.dir, partitions: ALL, mailboxLimit: 100, log: silentLog() };
  const webhooks = { retrySchedule: [2, 2], timeoutMs: 300, disableAfterMs: 1500, allowPrivateTargets: true };
  await t.context.host.close();
  let host = (t.context.host = new ActorHost({ ...opts, webhooks }));
  const e = await setup(t, 'policy-restart');
  const get = async (): Promise<EndpointRecord> => ok<EndpointRecord>(host.handle({ kind: 'webhook.get', tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id }));
  const note = async (text: string): Promise<void> => {
    const id = newId('order');
    await ok(host.handle({ kind: 'order.create', tenant: e.tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: text, metadata: {} }, items: [] }));
  };
  const started = Date.now();
  await note('bad'); // first attempt at about 0 s, retried 1.6-2.4 s later
  await until('the first attempt', () => r.got.length === 1);
  await new Promise((done) => setTimeout(done, 900));
  await note('good'); // a success at about 0.9 s
  await until('the success', () => r.got.length === 2);
  await until('its outcome stored', async () => (await deliveries(host, e.tenant, e.id)).some((d) => d.status === 'delivered'));
  await host.close();
  host = t.context.host = new ActorHost({ ...opts, webhooks });
  await until('the retry of the failing event', async () => (await deliveries(host, e.tenant, e.id)).some((d) => d.attempts.length === 2), 10_000);
  const retried = (await deliveries(host, e.tenant, e.id)).find((d) => d.attempts.length === 2)!;
  // 1.6 s or more after that delivery's first attempt, under 1.5 s after the success.
  t.true(retried.attempts[1]!.at - started >= 1600, `retried at ${retried.attempts[1]!.at - started} ms`);
  t.is(retried.attempts[1]!.outcome, 'retry');
  t.is((await get()).status, 'enabled');
});

test('the disable clock spans deliveries: an endpoint refusing every event (4xx, not retried) is disabled once the window passes', async (t) => {
  const { host, r } = t.context;
  r.answer = () => ({ status: 400 });
  const e = await setup(t, 'policy-spans');
  const get = async (): Promise<EndpointRecord> => ok<EndpointRecord>(host.handle({ kind: 'webhook.get', tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id }));
  for (let i = 0; i < 20 && (await get()).status === 'enabled'; i++) {
    await order(host, 'policy-spans');
    await new Promise((done) => setTimeout(done, 300));
  }
  const now = await get();
  t.is(now.status, 'disabled');
  t.is(now.disabledReason, 'failing');
  const log = await deliveries(host, e.tenant, e.id);
  // Each delivery was tried once (a 400 is not retried); several were needed to pass 1.5 s.
  t.true(log.length >= 5, `${log.length} deliveries`);
  t.true(log.every((d) => d.attempts.length === 1 && d.status === 'failed'));
});

test('a receiver slower than the timeout is a timeout, retried; Retry-After beyond the step is honoured', async (t) => {
  const { host, r } = t.context;
  r.answer = (_g, n) => (n === 1 ? { status: 200, delayMs: 1000 } : n === 2 ? { status: 429, headers: { 'retry-after': '2' } } : { status: 200 });
  const e = await setup(t, 'policy-timeout');
  await order(host, 'policy-timeout');
  let d: DeliveryRecord | undefined;
  await until('delivered', async () => {
    [d] = await deliveries(host, e.tenant, e.id);
    return d?.status === 'delivered';
  });
  const [first, second, third] = d!.attempts;
  t.is(first!.error, 'timeout');
  t.is(first!.outcome, 'retry');
  t.is(second!.responseStatus, 429);
  t.is(third!.outcome, 'delivered');
  // The schedule said ~1 s; Retry-After said 2 (within the longest step, 4 s, so honoured).
  t.true(third!.at - second!.at >= 2000, `${third!.at - second!.at} ms`);
  t.is(new Set(r.got.map((g) => g.json.id as string)).size, 1);
});

test('events and settled deliveries are swept after the retention; pending ones stay', async (t) => {
  const dir = await tempDir('webhook-retention');
  let clock = Date.now();
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: silentLog(), now: () => clock, eventRetentionMs: 60_000, webhooks: { retrySchedule: [3600], timeoutMs: 300, disableAfterMs: 3_600_000, allowPrivateTargets: true } });
  const r = t.context.r;
  try {
    const tenant = 'policy-retention';
    const partition = partitionFor(tenant);
    const e = await ok<EndpointRecord>(host.handle({ kind: 'webhook.create', tenant, partition, id: newId('webhookEndpoint', partition), input: { endpointUrl: r.url, eventTypes: ['*'], apiVersion: 'v1', description: null }, secret: newSigningSecret() }));
    await order(host, tenant);
    await until('delivered', async () => (await deliveries(host, tenant, e.id))[0]?.status === 'delivered');
    r.answer = () => ({ status: 500 });
    await order(host, tenant);
    await until('a retry pending', async () => (await deliveries(host, tenant, e.id)).some((d) => d.status === 'pending' && d.attempts.length === 1));
    const events = async (): Promise<number> =>
      (await ok<{ rows: unknown[] }>(host.query({ kind: 'event.list', query: { tenant, filter: undefined, sort: 'created', dir: 'desc', after: undefined, limit: 100, withChildren: true } }))).rows.length;
    t.is(await events(), 2);
    t.is(await host.sweepEvents(), 0);
    clock += 61_000;
    t.is(await host.sweepEvents(), 3); // two events, one delivered delivery
    t.is(await events(), 0);
    const left = await deliveries(host, tenant, e.id);
    t.is(left.length, 1);
    // Its last chance came before the sweep's cutoff (the dispatcher plans it so), so with the
    // clock moved on its worker may try it at any moment: still pending, or settled by that try.
    const [d] = left;
    t.true(d!.status === 'pending' ? d!.attempts.length === 1 : d!.attempts.length === 2, JSON.stringify(d));
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test.serial("a retry never waits past its event's retention: the largest jitter is cut short, so the last attempt still finds the event", async (t) => {
  const random = Math.random;
  Math.random = () => 0.999; // every wait 20 % longer than its step
  t.teardown(() => {
    Math.random = random;
  });
  const dir = await tempDir('webhook-retention-edge');
  // Steps adding up to the retention, as the configuration allows: with +20 % the fourth attempt
  // would come 3.6 s after the event, past its sweep at 3 s.
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: silentLog(), eventRetentionMs: 3000, webhooks: { retrySchedule: [1, 1, 1], timeoutMs: 300, disableAfterMs: 3_600_000, allowPrivateTargets: true } });
  const sweeping = setInterval(() => void host.sweepEvents(), 100);
  const r = t.context.r;
  r.answer = (_g, n) => ({ status: n <= 3 ? 503 : 200 });
  try {
    const tenant = 'policy-retention-edge';
    const partition = partitionFor(tenant);
    const e = await ok<EndpointRecord>(host.handle({ kind: 'webhook.create', tenant, partition, id: newId('webhookEndpoint', partition), input: { endpointUrl: r.url, eventTypes: ['*'], apiVersion: 'v1', description: null }, secret: newSigningSecret() }));
    await order(host, tenant);
    await until('four attempts, the last answered 200', () => r.got.length === 4, 10_000);
    t.is(new Set(r.got.map((g) => g.json.id as string)).size, 1);
    await until('the outcome stored', async () => (await deliveries(host, tenant, e.id)).some((d) => d.status === 'delivered'), 5_000);
  } finally {
    clearInterval(sweeping);
    await host.close();
    await removeDir(dir);
  }
});

test('a second rotation ends the first secret at once: only the newest and the one it replaced sign', async (t) => {
  const { host, r } = t.context;
  const e = await setup(t, 'policy-rotate-twice');
  const target = { tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id };
  const [first, second, third] = [e.secrets[0]!.secret, newSigningSecret(), newSigningSecret()];
  await ok(host.handle({ kind: 'webhook.rotate', ...target, ifMatch: undefined, secret: second, keepOldMs: 60_000 }));
  const rotated = await ok<EndpointRecord>(host.handle({ kind: 'webhook.rotate', ...target, ifMatch: undefined, secret: third, keepOldMs: 60_000 }));
  t.deepEqual(
    rotated.secrets.map((s) => s.secret),
    [third, second],
  );
  await order(host, 'policy-rotate-twice');
  await until('a delivery', () => r.got.length >= 1);
  const got = r.got[0]!;
  const v1 = String(got.headers['service-signature']).split(',').filter((p) => p.startsWith('v1='));
  t.is(v1.length, 2, 'two secrets sign');
  const headers = new Headers(Object.entries(got.headers).map(([k, v]) => [k, String(v)] as [string, string]));
  t.notThrows(() => verifyWebhook(got.raw, headers, third));
  t.notThrows(() => verifyWebhook(got.raw, headers, second));
  t.throws(() => verifyWebhook(got.raw, headers, first));
});

test('after a rotation the old secret signs until its overlap ends, then only the new one does', async (t) => {
  const { host, r } = t.context;
  const e = await setup(t, 'policy-rotate');
  const target = { tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id };
  const fresh = newSigningSecret();
  // The API keeps the old secret 24 h; the command takes the overlap, shortened here.
  await ok(host.handle({ kind: 'webhook.rotate', ...target, ifMatch: undefined, secret: fresh, keepOldMs: 1500 }));
  const v1Count = (i: number): number => String(r.got[i]!.headers['service-signature']).split(',').filter((p) => p.startsWith('v1=')).length;
  await order(host, 'policy-rotate');
  await until('a delivery during the overlap', () => r.got.length >= 1);
  t.is(v1Count(0), 2, 'both secrets sign during the overlap');
  await new Promise((done) => setTimeout(done, 1600));
  await order(host, 'policy-rotate');
  await until('a delivery after the overlap', () => r.got.length >= 2);
  t.is(v1Count(1), 1, 'only the new secret signs after it');
  t.is(String(r.got[1]!.headers['webhook-signature']).split(' ').length, 1);
});

test('deliveries held in memory for busy endpoints stay within the bound for all of them; the rest wait in LMDB and all are delivered', async (t) => {
  // One in flight per endpoint, at most three held for all endpoints together.
  const own = await ownHost('webhook-held', { retrySchedule: [1], timeoutMs: 2000, disableAfterMs: 3_600_000, allowPrivateTargets: true, perEndpoint: 1, maxHandedOver: 3 });
  const host = own.host;
  const r = t.context.r;
  r.answer = () => ({ status: 200, delayMs: 40 });
  let most = 0;
  const sampling = setInterval(() => (most = Math.max(most, host.heldDeliveries)), 2);
  try {
    const tenant = 'policy-held';
    const endpoints = await Promise.all([1, 2, 3, 4].map((n) => ok<EndpointRecord>(host.handle(endpointCreate(tenant, `${r.url}/e${n}`)))));
    // Eight events at once: each endpoint's first delivery goes out, the other seven wait for it.
    await Promise.all(Array.from({ length: 8 }, () => order(host, tenant)));
    await until('32 deliveries received', () => r.got.length >= 32, 20_000);
    for (const e of endpoints) {
      await until(`every delivery to ${e.id} stored as delivered`, async () => (await deliveries(host, tenant, e.id)).filter((d) => d.status === 'delivered').length === 8, 10_000);
    }
    t.is(new Set(r.got.map((g) => `${g.path} ${String(g.json.id)}`)).size, 32, 'each event reached each endpoint once');
    t.true(most > 0, 'some deliveries were held');
    t.true(most <= 3, `at most 3 held at once, saw ${most}`);
    t.is(host.heldDeliveries, 0);
  } finally {
    clearInterval(sampling);
    await own.close();
  }
});

test('many endpoints on one slow but healthy receiver: waiting for a connection is not the receiver\'s time; each delivery is made once, none times out', async (t) => {
  // Two connections to the origin, 24 deliveries answered in 250 ms each: the last would wait
  // about 3 s for a connection, twice the timeout.
  const own = await ownHost('webhook-origin-queue', { retrySchedule: [1, 1], timeoutMs: 1500, disableAfterMs: 3_600_000, allowPrivateTargets: true, socketsPerOrigin: 2 });
  const host = own.host;
  const r = t.context.r;
  r.answer = () => ({ status: 200, delayMs: 250 });
  try {
    const tenant = 'policy-origin-queue';
    const endpoints = await Promise.all([1, 2, 3, 4].map((n) => ok<EndpointRecord>(host.handle(endpointCreate(tenant, `${r.url}/e${n}`)))));
    await Promise.all(Array.from({ length: 6 }, () => order(host, tenant)));
    for (const e of endpoints) {
      await until(`every delivery to ${e.id} settled`, async () => (await deliveries(host, tenant, e.id)).filter((d) => d.status !== 'pending').length === 6, 20_000);
    }
    const attempts = (await Promise.all(endpoints.map((e) => deliveries(host, tenant, e.id)))).flat().flatMap((d) => d.attempts);
    t.deepEqual(
      attempts.filter((a) => a.outcome !== 'delivered').map((a) => a.error),
      [],
      'attempts charged with the wait for a connection',
    );
    t.is(attempts.length, 24);
    t.is(r.got.length, 24, 'deliveries sent more than once');
  } finally {
    await own.close();
  }
});

test('an endpoint re-enabled while a failing delivery is in flight stays enabled: the verdict on the endpoint as it was does not disable it as it is', async (t) => {
  const own = await ownHost('webhook-reenable-race', { retrySchedule: [1, 1, 1, 1], timeoutMs: 5000, disableAfterMs: 2000, allowPrivateTargets: true });
  const host = own.host;
  const r = t.context.r;
  // Two quick 503s, a third held 1.5 s (its answer comes past the disable window), then 200s.
  r.answer = (_g, n) => (n <= 2 ? { status: 503 } : n === 3 ? { status: 503, delayMs: 1500 } : { status: 200 });
  try {
    const tenant = 'policy-reenable-race';
    const e = await ok<EndpointRecord>(host.handle(endpointCreate(tenant, r.url)));
    const target = { tenant, partition: partitionFor(tenant), id: e.id };
    await order(host, tenant);
    await until('the third attempt under way', () => r.got.length === 3, 10_000);
    // Meanwhile the tenant turns the endpoint off and on again.
    await ok(host.handle({ kind: 'webhook.patch', ...target, ifMatch: undefined, patch: { status: 'disabled' } }));
    await ok(host.handle({ kind: 'webhook.patch', ...target, ifMatch: undefined, patch: { status: 'enabled' } }));
    await order(host, tenant);
    // The endpoint's worker takes the next event only once the held attempt is settled, its
    // verdict included.
    await until('the next event delivered', () => r.got.length === 4, 10_000);
    const now = await ok<EndpointRecord>(host.handle({ kind: 'webhook.get', ...target }));
    t.is(now.status, 'enabled', `disabled again: ${String(now.disabledReason)}`);
  } finally {
    await own.close();
  }
});

test('a pending delivery closed because its endpoint was disabled records its next attempt number', async (t) => {
  const { host, r } = t.context;
  r.answer = () => ({ status: 503 });
  const e = await setup(t, 'policy-closed-number');
  const target = { tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id };
  await order(host, e.tenant);
  await until('a retry pending', async () => (await deliveries(host, e.tenant, e.id)).some((d) => d.status === 'pending' && d.attempts.length === 1));
  await ok(host.handle({ kind: 'webhook.patch', ...target, ifMatch: undefined, patch: { status: 'disabled' } }));
  let d: DeliveryRecord | undefined;
  await until('the delivery closed', async () => {
    [d] = await deliveries(host, e.tenant, e.id);
    return d?.status === 'failed';
  });
  t.deepEqual(
    d!.attempts.map((a) => [a.attempt, a.outcome, a.error]),
    [
      [1, 'retry', null],
      [2, 'failed', 'endpoint disabled'],
    ],
  );
});

test('a disable without a version (from a node not yet upgraded) disables the endpoint; one judged on an older version does not', async (t) => {
  const { host } = t.context;
  const e = await setup(t, 'policy-unversioned');
  const at = { tenant: e.tenant, partition: partitionFor(e.tenant), id: e.id };
  const stale = await ok<EndpointRecord>(host.handle({ kind: 'webhook.disable', ...at, reason: 'failing', version: e.version - 1 }));
  t.is(stale.status, 'enabled', 'a verdict on the endpoint as it was disabled it as it is');
  const old = await ok<EndpointRecord>(host.handle({ kind: 'webhook.disable', ...at, reason: 'failing' }));
  t.is(old.status, 'disabled', 'a disable without a version was ignored');
  t.is(old.disabledReason, 'failing');
  t.is((await ok<EndpointRecord>(host.handle({ kind: 'webhook.get', ...at }))).status, 'disabled');
});
