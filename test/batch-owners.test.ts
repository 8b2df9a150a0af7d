// A keyed batch whose operations belong to two owners, as in a cluster of two actor nodes: two
// actor hosts on LMDB, each owning half of the partitions, behind a bus that routes by partition
// and can take either node down; the gateway pipeline in process, with a clock the tests move.
// The key is taken by its home owner before anything else is sent (CONTRACT §7, SPEC §4.2).

import { join } from 'node:path';
import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import type { Bus } from '../common/bus.js';
import { loadConfig } from '../common/config.js';
import { ISO_4217 } from '../common/currencies.js';
import { partitionOf } from '../common/ids.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost } from '../actors/host.js';
import { allRoutes } from '../gateway/app.js';
import { Authenticator } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import { homePartition } from '../gateway/idempotency.js';
import { CURRENCY_FORMAT } from '../gateway/money.js';
import { patchSchema } from '../gateway/resources/orders.js';
import type { JsonSchema } from '../gateway/route.js';
import { createGateway, type Gateway } from '../gateway/pipeline.js';
import type { Command, Query, Result } from '../proto/messages.js';
import { type Answer, type Call, ALL_SCOPES, answerOf, removeDir, silentLog, tempDir, toRequest, token } from './helpers/edge-kit.js';

// A PATCH check this file can tighten between two attempts: `customerId` must be a code in
// ISO_4217 here (a mutable set), for operations on orders. Set before any request compiles it.
(patchSchema as { properties: Record<string, JsonSchema> }).properties.customerId = { type: 'string', format: CURRENCY_FORMAT };

const SECRET = 'batch-owners-secret-0123456789abcdef';
const HOUR = 3600_000;
const TENANT = 't1';

interface Node {
  host: ActorHost;
  bus: LocalBus;
  down: boolean;
}

interface Context {
  dir: string;
  nodes: [Node, Node];
  clock: { now: number };
  gateway: Gateway;
  auth: string;
  /** The kind of every command sent, in order. */
  sent: string[];
}

const test = anyTest as TestFn<Context>;
const LOW = new Set(Array.from({ length: 128 }, (_, p) => p));
const HIGH = new Set(Array.from({ length: 128 }, (_, p) => p + 128));

test.beforeEach(async (t) => {
  const dir = await tempDir('batch-owners');
  const clock = { now: Date.UTC(2026, 0, 1) };
  const log = silentLog();
  const node = (name: string, partitions: Set<number>): Node => {
    const host = new ActorHost({ dataDir: join(dir, name), partitions, mailboxLimit: 100, idempotencyTtlMs: 24 * HOUR, now: () => clock.now, log });
    return { host, bus: new LocalBus(host, 5000), down: false };
  };
  const nodes: [Node, Node] = [node('low', LOW), node('high', HIGH)];
  const owner = (partition: number): Node => nodes[partition < 128 ? 0 : 1];
  const unreachable: Result<never> = { ok: false, error: { code: 'unavailable', detail: 'The owner cannot be reached.' } };
  const sent: string[] = [];
  const bus: Bus = {
    send: (cmd: Command) => {
      sent.push(cmd.kind);
      return owner(cmd.partition).down ? Promise.resolve(unreachable) : owner(cmd.partition).bus.send(cmd);
    },
    keptApart: (home, partition) => owner(home) !== owner(partition),
    scatter: (q: Query) => Promise.all(nodes.map((n) => n.bus.scatter(q).then((r) => r[0]!))),
    close: async () => {},
  };
  const config = loadConfig({ DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, PORT: '0' });
  const gateway = createGateway({ routes: allRoutes(), auth: new Authenticator(SECRET), bus: new BusClient(bus), config, log });
  t.context = { dir, nodes, clock, gateway, auth: `Bearer ${await token(SECRET, ALL_SCOPES, { tenant: TENANT })}`, sent };
});

test.afterEach.always(async (t) => {
  t.context.gateway.close();
  for (const n of t.context.nodes) await n.host.close();
  await removeDir(t.context.dir);
});

async function call(t: { context: Context }, c: Call, key?: string): Promise<Answer> {
  const headers: Record<string, string> = { authorization: t.context.auth, ...c.headers };
  if (c.body !== undefined) headers['content-type'] = 'application/json';
  if (key !== undefined) headers['idempotency-key'] = key;
  return answerOf(await t.context.gateway.handle(toRequest({ ...c, headers })));
}

/** A key whose home partition is on the given node (0: partitions below 128, 1: the rest). */
function keyHomedOn(node: 0 | 1, label: string): string {
  for (let i = 0; ; i++) {
    const key = `${label}-${i}`;
    if (homePartition(TENANT, key) < 128 === (node === 0)) return key;
  }
}

/** An order created without a key until one lands on the given node. */
async function orderOn(t: { context: Context }, node: 0 | 1): Promise<string> {
  for (;;) {
    const id = (await call(t, { method: 'POST', path: '/v1/orders', body: { currency: 'EUR' } })).json<{ id: string }>().id;
    if (partitionOf(id) < 128 === (node === 0)) return id;
  }
}

const noteOf = async (t: { context: Context }, id: string): Promise<unknown> => (await call(t, { method: 'GET', path: `/v1/orders/${id}` })).json().note;
const countOrders = async (t: { context: Context }): Promise<number> => (await call(t, { method: 'GET', path: '/v1/orders', query: 'limit=100' })).json<{ data: unknown[] }>().data.length;

test('an atomic batch whose key cannot be taken (its home owner is down) answers 503 and writes nothing', async (t) => {
  const order = await orderOn(t, 0);
  const key = keyHomedOn(1, 'atomic');
  t.context.nodes[1].down = true;
  const r = await call(t, { method: 'POST', path: '/v1/orders/batch', body: { atomic: true, operations: [{ method: 'PATCH', id: order, body: { note: 'written' } }] } }, key);
  t.is(r.status, 503);
  t.truthy(r.headers['retry-after']);
  t.is(await noteOf(t, order), null);
});

test('a partial batch whose key cannot be taken answers 503 and writes nothing on the owners that are up', async (t) => {
  const order = await orderOn(t, 0);
  const key = keyHomedOn(1, 'partial');
  const before = await countOrders(t);
  t.context.nodes[1].down = true;
  const body = { operations: [{ method: 'PATCH', id: order, body: { note: 'written' } }, { method: 'POST', body: { currency: 'EUR' } }] };
  const r = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(r.status, 503);
  t.is(await noteOf(t, order), null);
  t.context.nodes[1].down = false;
  t.is(await countOrders(t), before);
  // Once the home owner is back, the retry runs it, once.
  const retry = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(retry.status, 207);
  t.deepEqual(retry.json<{ results: { status: number }[] }>().results.map((x) => x.status), [200, 201]);
  t.is(await noteOf(t, order), 'written');
  t.is(await countOrders(t), before + 1);
});

test('a retry is marked Idempotent-Replayed only when every group holding operations answered from before', async (t) => {
  const order = await orderOn(t, 0);
  const key = keyHomedOn(1, 'replayed');
  const body = { atomic: true, operations: [{ method: 'PATCH', id: order, body: { note: 'once' } }] };
  // The order's owner is down: the home group takes the key (with no operation), the batch 503s.
  t.context.nodes[0].down = true;
  t.is((await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key)).status, 503);
  t.context.nodes[0].down = false;
  const ran = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(ran.status, 200);
  t.is(ran.headers['idempotent-replayed'], undefined, 'the batch ran only now');
  t.is(await noteOf(t, order), 'once');
  const replayed = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(replayed.status, 200);
  t.is(replayed.headers['idempotent-replayed'], 'true');
  t.deepEqual(replayed.json(), ran.json());
});

test("a group run on a later retry expires with the key's home record, not a full TTL after it ran", async (t) => {
  const order = await orderOn(t, 0);
  const key = keyHomedOn(1, 'expiry');
  const first = { operations: [{ method: 'POST', body: { currency: 'EUR' } }, { method: 'PATCH', id: order, body: { note: 'first' } }] };
  const statuses = (a: Answer): number[] => a.json<{ results: { status: number }[] }>().results.map((x) => x.status);
  t.context.nodes[0].down = true;
  const a = await call(t, { method: 'POST', path: '/v1/orders/batch', body: first }, key);
  t.deepEqual(statuses(a), [201, 503]);
  t.context.nodes[0].down = false;
  t.context.clock.now += 10 * HOUR;
  t.deepEqual(statuses(await call(t, { method: 'POST', path: '/v1/orders/batch', body: first }, key)), [201, 200]);
  // 25 hours after the first attempt the key has expired everywhere: another request under it
  // runs as a new one, rather than creating an order at home and then being refused (422).
  t.context.clock.now += 15 * HOUR;
  const before = await countOrders(t);
  const second = { operations: [{ method: 'POST', body: { currency: 'USD' } }, { method: 'PATCH', id: order, body: { note: 'second' } }] };
  const b = await call(t, { method: 'POST', path: '/v1/orders/batch', body: second }, key);
  t.is(b.status, 207, b.text);
  t.deepEqual(statuses(b), [201, 200]);
  t.is(await noteOf(t, order), 'second');
  t.is(await countOrders(t), before + 1);
});

/** A product created until one lands on the given node. */
async function productOn(t: { context: Context }, node: 0 | 1): Promise<string> {
  for (;;) {
    const id = (await call(t, { method: 'POST', path: '/v1/products', body: { name: 'Widget', price: 250, currency: 'EUR' } })).json<{ id: string }>().id;
    if (partitionOf(id) < 128 === (node === 0)) return id;
  }
}

/** Deletes the product, then finds the batch's retry answered exactly as `first`, creating nothing. */
async function replaysAfterDeleting(t: ExecutionContext<Context>, product: string, body: object, key: string, first: Answer): Promise<void> {
  t.is((await call(t, { method: 'DELETE', path: `/v1/products/${product}` })).status, 204);
  const before = await countOrders(t);
  const retry = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(retry.status, first.status, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.deepEqual(retry.json(), first.json());
  t.is(await countOrders(t), before);
}

const withItem = (product: string): { currency: string; items: { productId: string; quantity: number }[] } => ({ currency: 'EUR', items: [{ productId: product, quantity: 2 }] });

test('an atomic batch retried after its product was deleted replays its 200, not a 422 from pricing again', async (t) => {
  const product = await productOn(t, 0);
  const body = { atomic: true, operations: [{ method: 'POST', body: withItem(product) }] };
  const key = keyHomedOn(1, 'priced');
  const first = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(first.status, 200, first.text);
  await replaysAfterDeleting(t, product, body, key, first);
});

test("a batch retry replays while its products' owner is down: nothing is priced again", async (t) => {
  const product = await productOn(t, 0);
  const body = { operations: [{ method: 'POST', body: withItem(product) }] };
  const key = keyHomedOn(1, 'owner-down');
  const first = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(first.status, 207, first.text);
  t.context.nodes[0].down = true;
  const retry = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(retry.status, 207, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.deepEqual(retry.json(), first.json());
});

test('an atomic batch that creates beside an order stored apart from its key replays after its product was deleted', async (t) => {
  // The batch commits in the order's partition (node 0); its key's home is on node 1, so the
  // creates are kept under the group's own sub-key.
  const order = await orderOn(t, 0);
  const product = await productOn(t, 1);
  const key = keyHomedOn(1, 'apart');
  const body = { atomic: true, operations: [{ method: 'PATCH', id: order, body: { note: 'beside' } }, { method: 'POST', body: withItem(product) }] };
  const first = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(first.status, 200, first.text);
  const created = first.json<{ results: { id: string }[] }>().results[1]!.id;
  t.true(partitionOf(created) < 128, 'created beside the order');
  await replaysAfterDeleting(t, product, body, key, first);
});

test("a keyed action on an order stored apart from its key's home takes the key there first: reuse is 422, and nothing runs while home is down", async (t) => {
  const a = await orderOn(t, 0);
  const b = await orderOn(t, 1);
  const key = keyHomedOn(1, 'take');
  const statusOf = async (id: string): Promise<unknown> => (await call(t, { method: 'GET', path: `/v1/orders/${id}` })).json().status;
  t.context.nodes[1].down = true;
  const down = await call(t, { method: 'POST', path: `/v1/orders/${a}/cancel` }, key);
  t.is(down.status, 503, down.text);
  t.truthy(down.headers['retry-after']);
  t.is(await statusOf(a), 'pending', 'the cancel did not run');
  t.context.nodes[1].down = false;
  const sent = t.context.sent.length;
  const first = await call(t, { method: 'POST', path: `/v1/orders/${a}/cancel` }, key);
  t.is(first.status, 200, first.text);
  t.deepEqual(t.context.sent.slice(sent), ['idem.peek', 'idem.take', 'order.cancel']);
  // On the key's home node, the other request meets the key taken there.
  const reused = await call(t, { method: 'POST', path: `/v1/orders/${b}/cancel` }, key);
  t.is(reused.status, 422, reused.text);
  t.is(await statusOf(b), 'pending');
  const retry = await call(t, { method: 'POST', path: `/v1/orders/${a}/cancel` }, key);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.is(retry.text, first.text);
  // A key whose home is on the order's own node is not taken apart: one store holds both, and
  // the cancel is sent without a look first, its owner answering any kept answer itself.
  const near = keyHomedOn(1, 'near');
  const before = t.context.sent.length;
  const nearFirst = await call(t, { method: 'POST', path: `/v1/orders/${b}/cancel` }, near);
  t.is(nearFirst.status, 200, nearFirst.text);
  t.deepEqual(t.context.sent.slice(before), ['order.cancel']);
  // Its retry is sent the same way, and answered from the owner's kept answer, before its queue.
  const again = t.context.sent.length;
  const nearRetry = await call(t, { method: 'POST', path: `/v1/orders/${b}/cancel` }, near);
  t.is(nearRetry.headers['idempotent-replayed'], 'true');
  t.is(nearRetry.text, nearFirst.text);
  t.deepEqual(t.context.sent.slice(again), ['order.cancel']);
});

test('a key first used at its home (a create) refuses an action on another node under it: the take meets the create', async (t) => {
  const order = await orderOn(t, 0);
  const key = keyHomedOn(1, 'home-first');
  const created = await call(t, { method: 'POST', path: '/v1/orders', body: { currency: 'EUR' } }, key);
  t.is(created.status, 201, created.text);
  const sent = t.context.sent.length;
  const reused = await call(t, { method: 'POST', path: `/v1/orders/${order}/cancel` }, key);
  t.is(reused.status, 422, reused.text);
  t.deepEqual(t.context.sent.slice(sent), ['idem.peek', 'idem.take'], 'refused by the take; the cancel was never sent');
  t.is((await call(t, { method: 'GET', path: `/v1/orders/${order}` })).json().status, 'pending');
});

test("an atomic batch the gateway refuses part of names every failing operation, the owner's too, with the first one's status, and writes nothing", async (t) => {
  const order = await orderOn(t, 0);
  const before = await countOrders(t);
  t.context.sent.length = 0;
  const operations = [
    // The owner's refusal: a stale tag.
    { method: 'PATCH', id: order, ifMatch: '"9-x"', body: { note: 'stale' } },
    // The gateway's: an invalid body, and a product that does not exist.
    { method: 'PATCH', id: order, body: { currency: 'bad' } },
    { method: 'POST', body: { currency: 'EUR', items: [{ productId: 'prd_0000000000000000000000', quantity: 1 }] } },
    // Would succeed.
    { method: 'DELETE', id: order },
    { method: 'POST', body: { currency: 'EUR' } },
  ];
  const r = await call(t, { method: 'POST', path: '/v1/orders/batch', body: { atomic: true, operations } });
  t.is(r.status, 412, r.text);
  const p = r.json<{ type: string; detail: string; errors: { index: number; status: number }[] }>();
  t.is(p.type, '/problems/precondition-failed');
  t.regex(p.detail, /3 operations failed, the first at index 0/);
  t.deepEqual([...new Set(p.errors.map((e) => `${e.index}:${e.status}`))], ['0:412', '1:422', '2:422']);
  t.true(t.context.sent.includes('order.batchCheck'));
  t.false(t.context.sent.includes('order.batch'), 'nothing sent to be written');
  t.is(await noteOf(t, order), null);
  t.is(await countOrders(t), before);

  // Its owner down (or of an earlier release): the gateway's own refusals alone, not a 503.
  t.context.nodes[0].down = true;
  const alone = await call(t, { method: 'POST', path: '/v1/orders/batch', body: { atomic: true, operations: operations.slice(0, 2) } });
  t.is(alone.status, 422, alone.text);
  t.deepEqual(alone.json<{ errors: { index: number }[] }>().errors.map((e) => e.index), [1]);
  t.context.nodes[0].down = false;
  t.is(await noteOf(t, order), null);
});

/** A batch sent while the code QZQ is taken, as a build that checked less took it; refused after. */
async function beforeTightening(t: { context: Context }, body: object, key: string): Promise<Answer> {
  const codes = ISO_4217 as Set<string>;
  codes.add('QZQ');
  try {
    return await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  } finally {
    codes.delete('QZQ');
  }
}

test('a keyed batch that ran answers its retry as it did, though a check tightened since would refuse one of its operations now', async (t) => {
  for (const atomic of [true, false]) {
    const key = keyHomedOn(atomic ? 0 : 1, `tightened-${atomic}`);
    const body = { atomic, operations: [{ method: 'POST', body: { currency: 'QZQ' } }, { method: 'POST', body: { currency: 'EUR' } }] };
    const first = await beforeTightening(t, body, key);
    t.is(first.status, atomic ? 200 : 207, first.text);
    const before = await countOrders(t);
    const retry = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
    t.is(retry.status, first.status, retry.text);
    t.is(retry.headers['idempotent-replayed'], 'true');
    t.deepEqual(retry.json(), first.json(), 'the first answer, each result with its status');
    t.is(await countOrders(t), before, 'nothing ran again');
    // Without the key the same batch is refused now.
    t.is((await call(t, { method: 'POST', path: '/v1/orders/batch', body })).status, atomic ? 422 : 207);
  }
});

test("an atomic batch's retry whose operation that placed it is refused now answers from where the group ran: the first answer, never a 200 holding a failure", async (t) => {
  // The order on one node, the key's home on the other: the key's home keeps an empty group.
  const order = await orderOn(t, 0);
  const key = keyHomedOn(1, 'placed');
  const body = { atomic: true, operations: [{ method: 'PATCH', id: order, body: { customerId: 'QZQ', note: 'placed' } }] };
  const first = await beforeTightening(t, body, key);
  t.is(first.status, 200, first.text);
  const retry = await call(t, { method: 'POST', path: '/v1/orders/batch', body }, key);
  t.is(retry.status, 200, retry.text);
  t.is(retry.headers['idempotent-replayed'], 'true');
  t.deepEqual(retry.json(), first.json());
  // Without the key the same batch is refused now, and nothing is written.
  const fresh = await call(t, { method: 'POST', path: '/v1/orders/batch', body: { ...body, operations: [{ ...body.operations[0]!, body: { customerId: 'QZQ', note: 'not written' } }] } });
  t.is(fresh.status, 422, fresh.text);
  t.is(await noteOf(t, order), 'placed');
});
