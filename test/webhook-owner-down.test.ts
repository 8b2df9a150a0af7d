// Cluster mode, one node's view: a tenant's endpoints live at another node (its partition), and
// that owner does not answer. The events of that tenant wait in the outbox, the scan goes past
// them so other tenants' events are delivered meanwhile, and once the owner answers again the
// waiting events go out with their original ids.

import anyTest, { type TestFn } from 'ava';
import { ActorHost } from '../actors/host.js';
import type { Bus } from '../common/bus.js';
import { newId, partitionFor } from '../common/ids.js';
import { newSigningSecret } from '../common/webhook-signature.js';
import type { EndpointRecord } from '../proto/webhooks.js';
import { capturingLog, removeDir, tempDir } from './helpers/edge-kit.js';
import { endpointCreate, ok, startReceiver, until } from './helpers/webhook-kit.js';
import { allPartitions } from '../common/partitions.js';

const test = anyTest as TestFn;
const LOCAL = 'owner-up';
const REMOTE = 'owner-down';

/** An endpoint of the REMOTE tenant, as its owner (another node) would list it. */
function remoteEndpointAt(endpointUrl: string): EndpointRecord {
  return {
    id: newId('webhookEndpoint', partitionFor(REMOTE)),
    tenant: REMOTE,
    version: 1,
    endpointUrl,
    eventTypes: ['order.created'],
    apiVersion: 'v1',
    status: 'enabled',
    description: null,
    disabledReason: null,
    secrets: [{ secret: newSigningSecret() }],
    createdAt: Date.now(),
    updatedAt: Date.now(),
  };
}

test('events of a tenant whose endpoints cannot be read wait, without holding up other tenants', async (t) => {
  const remotePartition = partitionFor(REMOTE);
  t.not(remotePartition, partitionFor(LOCAL));
  const owned = allPartitions(remotePartition);
  const receiver = await startReceiver();
  const remoteEndpoint = remoteEndpointAt(`${receiver.url}/remote`);
  let ownerUp = false;
  let asked = 0;
  const remote: Bus = {
    send: () => Promise.resolve({ ok: false, error: { code: 'unavailable', detail: 'not used' } }),
    scatter: () => {
      asked++;
      return Promise.resolve(
        ownerUp ? [{ ok: true, value: { rows: [{ v: 0, record: remoteEndpoint }] } }] : [{ ok: false, error: { code: 'unavailable', detail: 'No node is serving this data right now.' } }],
      );
    },
    close: () => Promise.resolve(),
  };
  const lines: string[] = [];
  const dir = await tempDir('webhook-owner-down');
  const host = new ActorHost({
    dataDir: dir,
    partitions: owned,
    mailboxLimit: 1000,
    log: capturingLog(lines),
    webhooks: { retrySchedule: [1, 1], timeoutMs: 2000, disableAfterMs: 3600_000, allowPrivateTargets: true, remote },
  });
  try {
    const local = await ok<EndpointRecord>(host.handle(endpointCreate(LOCAL, `${receiver.url}/local`)));
    t.truthy(local.id);
    const create = (tenant: string): Promise<unknown> => {
      const partition = partitionFor(LOCAL); // owned by this node, whatever the tenant
      const id = newId('order', partition);
      return ok(host.handle({ kind: 'order.create', tenant, partition, id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
    };
    // More waiting events than one fan-out chunk, then one that must not wait behind them.
    for (let i = 0; i < 70; i++) await create(REMOTE);
    await create(LOCAL);
    await until('the other tenant is delivered to', () => receiver.got.some((g) => g.path === '/hook/local'), 10_000);
    t.is(receiver.got.filter((g) => g.path === '/hook/remote').length, 0);
    t.true(asked > 0);
    // A fan-out pass a second while the owner stays down, each a failure, logged once a minute.
    const passes = asked;
    await until('three more passes', () => asked >= passes + 3, 10_000);
    const logged = (msg: string): { level: number; repeated: number }[] => lines.map((l) => JSON.parse(l) as { msg: string; level: number; repeated: number }).filter((l) => l.msg === msg);
    const waiting = logged("webhook events wait for their endpoints' owner; retrying");
    t.is(waiting.length, 1, `${waiting.length} lines for ${asked} passes`);
    t.is(waiting[0]!.level, 40, 'a warning: the outage is elsewhere');
    t.is(logged('webhook fan-out failed; retrying').length, 0);
    t.is(logged('webhook endpoints unreadable; the events wait').length, 1);

    ownerUp = true;
    await until('every waiting event is delivered', () => new Set(receiver.got.filter((g) => g.path === '/hook/remote').map((g) => g.json.id as string)).size === 70, 15_000);
    t.pass();
  } finally {
    await host.close();
    await receiver.close();
    await removeDir(dir);
  }
});

test("deliveries waiting on their endpoints' owner are a warning, once a minute, however many workers meet it", async (t) => {
  const remotePartition = partitionFor(REMOTE);
  const receiver = await startReceiver();
  // Every delivery fails and is retried a second later.
  receiver.answer = () => ({ status: 500 });
  const endpoints = Array.from({ length: 5 }, (_, i) => remoteEndpointAt(`${receiver.url}/remote-${i}`));
  let ownerUp = true;
  let refused = 0;
  const remote: Bus = {
    send: () => Promise.resolve({ ok: false, error: { code: 'unavailable', detail: 'not used' } }),
    scatter: () => {
      if (ownerUp) return Promise.resolve([{ ok: true, value: { rows: endpoints.map((e) => ({ v: 0, record: e })) } }]);
      refused++;
      return Promise.resolve([{ ok: false, error: { code: 'unavailable', detail: 'No node is serving this data right now.' } }]);
    },
    close: () => Promise.resolve(),
  };
  const lines: string[] = [];
  const dir = await tempDir('webhook-owner-down-workers');
  const host = new ActorHost({
    dataDir: dir,
    partitions: allPartitions(remotePartition),
    mailboxLimit: 1000,
    log: capturingLog(lines),
    webhooks: { retrySchedule: [1, 1, 1, 1, 1, 1, 1, 1], timeoutMs: 2000, disableAfterMs: 3600_000, allowPrivateTargets: true, remote },
  });
  try {
    const partition = partitionFor(LOCAL);
    await ok(host.handle({ kind: 'order.create', tenant: REMOTE, partition, id: newId('order', partition), input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
    await until('a first attempt at every endpoint', () => new Set(receiver.got.map((g) => g.path)).size === endpoints.length, 10_000);
    // The owner goes away; once the endpoints kept from it are too old, each endpoint's worker
    // fails to read its endpoint at every retry.
    ownerUp = false;
    await until('the workers fail on the owner a few times', () => refused >= 3 * endpoints.length, 15_000);
    const logged = lines.map((l) => JSON.parse(l) as { msg: string; level: number; tenant?: string }).filter((l) => l.msg.startsWith('webhook'));
    t.deepEqual(
      logged.filter((l) => l.level >= 50).map((l) => l.msg),
      [],
      'no error: the outage is elsewhere',
    );
    const waiting = logged.filter((l) => l.msg === 'webhook endpoints unreadable; the deliveries wait');
    t.is(waiting.length, 1, `${waiting.length} lines for ${refused} failed reads`);
    t.like(waiting[0], { level: 40, tenant: REMOTE });
  } finally {
    await host.close();
    await receiver.close();
    await removeDir(dir);
  }
});

test('repeated failures are logged once a minute each, told apart by tenant and kind of error', async (t) => {
  const lines: string[] = [];
  const dir = await tempDir('webhook-log-repeats');
  const host = new ActorHost({
    dataDir: dir,
    partitions: allPartitions(),
    mailboxLimit: 100,
    log: capturingLog(lines),
    webhooks: { retrySchedule: [1], timeoutMs: 2000, disableAfterMs: 3600_000, allowPrivateTargets: true },
  });
  try {
    // The dispatcher's own logging, driven directly: its callers are the fan-out's failure paths.
    const dispatcher = (host as unknown as { dispatcher: { logRepeated(level: 'warn' | 'error', fields: { err?: unknown; tenant?: string }, msg: string): void } }).dispatcher;
    const unreadable = 'webhook endpoints unreadable; the events wait';
    const failed = 'webhook fan-out failed; retrying';
    for (let i = 0; i < 3; i++) {
      dispatcher.logRepeated('warn', { tenant: 'tenant-a' }, unreadable);
      dispatcher.logRepeated('warn', { tenant: 'tenant-b' }, unreadable);
      dispatcher.logRepeated('error', { err: new Error('MDB_MAP_FULL') }, failed);
    }
    dispatcher.logRepeated('error', { err: new TypeError('x is undefined') }, failed);
    const logged = lines.map((l) => JSON.parse(l) as { msg: string; tenant?: string; err?: { type: string } }).filter((l) => l.msg === unreadable || l.msg === failed);
    t.deepEqual(
      logged.map((l) => `${l.msg} ${l.tenant ?? l.err?.type ?? ''}`),
      [`${unreadable} tenant-a`, `${unreadable} tenant-b`, `${failed} Error`, `${failed} TypeError`],
    );
  } finally {
    await host.close();
    await removeDir(dir);
  }
});
