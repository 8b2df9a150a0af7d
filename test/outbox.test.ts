// Which events are queued in the outbox (actors/host.ts `deliverable`): every event is stored,
// but only an event someone may be waiting for gets an outbox row. A tenant with no webhook
// endpoint has nobody; a tenant with one, a ping, and a tenant whose endpoints live at another
// node (cluster mode: this node cannot tell) all do. Read back from LMDB after the host closes,
// with no dispatcher running to take the rows.

import test from 'ava';
import { ActorHost } from '../actors/host.js';
import { EVENTS, OUTBOX } from '../actors/events.js';
import { newId, partitionFor } from '../common/ids.js';
import type { Command } from '../proto/messages.js';
import type { EndpointRecord, EventRecord, OutboxEntry } from '../proto/webhooks.js';
import { Store, type Table, type TableSpec } from '../storage/store.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { endpointCreate, ok } from './helpers/webhook-kit.js';
import { allPartitions } from '../common/partitions.js';

/**
 * Every event the closed host left in `dir`, and its outbox rows by event id: read back from
 * LMDB with no dispatcher running to take the rows.
 */
async function readBack(dir: string): Promise<{ events: EventRecord[]; queued: Map<string, OutboxEntry> }> {
  const store = Store.open(dir);
  try {
    const all = <T>(spec: TableSpec<T>): T[] => {
      const table = store.table(spec);
      return store.scan(table as Table<unknown>, { prefix: [], after: undefined, reverse: false, limit: 100 }).map((r) => table.get(r.id)!);
    };
    return { events: all(EVENTS), queued: new Map(all(OUTBOX).map((o) => [o.id, o])) };
  } finally {
    await store.close();
  }
}

test('an event is queued for delivery only when its tenant has a webhook endpoint, or this node cannot tell', async (t) => {
  const dir = await tempDir('outbox');
  t.teardown(() => removeDir(dir));
  const QUIET = 'no-hooks';
  const HOOKED = 'has-hooks';
  const ELSEWHERE = 'hooks-elsewhere';
  const elsewhere = partitionFor(ELSEWHERE);
  t.false([QUIET, HOOKED].map(partitionFor).includes(elsewhere));
  const host = new ActorHost({
    dataDir: dir,
    partitions: allPartitions(elsewhere),
    mailboxLimit: 1000,
    log: silentLog(),
  });
  try {
    const endpoint = await ok<EndpointRecord>(host.handle(endpointCreate(HOOKED, 'https://hooks.example.com/in')));
    for (const tenant of [QUIET, HOOKED, ELSEWHERE]) {
      // Orders live in a partition this node owns, whoever their tenant.
      const partition = partitionFor(QUIET);
      const id = newId('order', partition);
      await ok(host.handle({ kind: 'order.create', tenant, partition, id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
    }
    await ok(host.handle({ kind: 'webhook.test', tenant: HOOKED, partition: partitionFor(HOOKED), id: endpoint.id } as Command));
  } finally {
    await host.close();
  }

  const { events: stored, queued } = await readBack(dir);
  const byTenant = (tenant: string, type: string): EventRecord | undefined => stored.find((e) => e.tenant === tenant && e.type === type);
  // Every event is stored, for GET /v1/events.
  for (const tenant of [QUIET, HOOKED, ELSEWHERE]) t.truthy(byTenant(tenant, 'order.created'), `${tenant}'s order.created is stored`);
  t.false(queued.has(byTenant(QUIET, 'order.created')!.id), 'a tenant without endpoints queues nothing');
  t.true(queued.has(byTenant(HOOKED, 'order.created')!.id), 'a tenant with an endpoint queues its events');
  t.true(queued.has(byTenant(ELSEWHERE, 'order.created')!.id), 'a tenant whose endpoints this node does not own queues its events');
  t.true(queued.has(byTenant(HOOKED, 'ping')!.id), 'a ping is queued');
  t.is(queued.size, 3);
  t.truthy(queued.get(byTenant(HOOKED, 'order.created')!.id)?.created);
});

test('a tenant found without endpoints queues again from the moment it has one, and stops once it has none', async (t) => {
  const dir = await tempDir('outbox-change');
  t.teardown(() => removeDir(dir));
  const TENANT = 'comes-and-goes';
  const partition = partitionFor(TENANT);
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 1000, log: silentLog() });
  const created: string[] = [];
  const order = async (): Promise<void> => {
    const id = newId('order', partition);
    await ok(host.handle({ kind: 'order.create', tenant: TENANT, partition, id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
    created.push(id);
  };
  try {
    // Twice without an endpoint: the second is answered from what the first scan found.
    await order();
    await order();
    const endpoint = await ok<EndpointRecord>(host.handle(endpointCreate(TENANT, 'https://hooks.example.com/in')));
    await order();
    await ok(host.handle({ kind: 'webhook.delete', tenant: TENANT, partition, id: endpoint.id } as Command));
    await order();
    await order();
  } finally {
    await host.close();
  }

  const { events, queued } = await readBack(dir);
  const queuedFor = created.map((orderId) => {
    const event = events.find((e) => e.type === 'order.created' && (e.data as { id: string }).id === orderId);
    return queued.has(event!.id);
  });
  t.deepEqual(queuedFor, [false, false, true, false, false]);
});
