// The actor host's mailboxes, against a real host on LMDB: turns that share a key run one after
// the other however they take it (alone, as a keyed write's pair, all at once or one by one),
// a turn holding thousands of keys starts and ends, and every mailbox is given back.

import { setTimeout as delay } from 'node:timers/promises';
import anyTest, { type TestFn } from 'ava';
import { newId, partitionOf } from '../common/ids.js';
import { ActorHost } from '../actors/host.js';
import type { BatchOp, BatchOutcome, Command, OrderRecord, Result } from '../proto/messages.js';
import { allPartitions } from '../common/partitions.js';
import { failCommits, holdNextCommit, removeDir, silentLog, tempDir } from './helpers/edge-kit.js';

interface Context {
  dir: string;
  host: ActorHost;
}

const test = anyTest as TestFn<Context>;
const PARTITION = 11;

test.beforeEach(async (t) => {
  const dir = await tempDir('mailboxes');
  t.context = { dir, host: new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: silentLog() }) };
});

test.afterEach.always(async (t) => {
  await t.context.host.close();
  await removeDir(t.context.dir);
});

const input = { currency: 'EUR', customerId: null, note: null, metadata: {} };
const create = (id: string): Command => ({ kind: 'order.create', tenant: 't1', partition: partitionOf(id), id, input, items: [] });
const patch = (id: string, metadata: Record<string, string>, key?: string): Command => ({
  kind: 'order.patch',
  tenant: 't1',
  partition: partitionOf(id),
  id,
  ifMatch: undefined,
  patch: { metadata },
  ...(key ? { idem: { key, fingerprint: `fp-${key}` } } : {}),
});
const valueOf = <T>(r: Result<unknown>): T => {
  if (!r.ok) throw new Error(`${r.error.code}: ${r.error.detail}`);
  return r.value as T;
};

test('a keyed write and plain writes to one order, sent in one turn of the event loop, run one after the other', async (t) => {
  const { host } = t.context;
  const id = newId('order', PARTITION);
  valueOf(await host.handle(create(id)));
  // The keyed patch takes its key's mailbox and the order's together (neither held); the plain
  // ones queue behind it on the order's. Run side by side, they would each patch version 1, and
  // all but one change would be lost.
  const sent = [host.handle(patch(id, { a: '1' }, 'pair')), host.handle(patch(id, { b: '2' })), host.handle(patch(id, { c: '3' }, 'pair-2'))];
  const versions = (await Promise.all(sent)).map((r) => valueOf<OrderRecord>(r).version);
  t.deepEqual(versions, [2, 3, 4]);
  const order = valueOf<OrderRecord>(await host.handle({ kind: 'order.get', tenant: 't1', partition: partitionOf(id), id }));
  t.is(order.version, 4);
  t.deepEqual(order.metadata, { a: '1', b: '2', c: '3' });
});

test('a batch holding thousands of keys runs, whether they are all free or one of them is held', async (t) => {
  const { host } = t.context;
  const N = 5_000;
  const batch = (ops: BatchOp[]): Command => ({ kind: 'order.batch', tenant: 't1', partition: PARTITION, atomic: false, ops });
  const creates = (n: number, from = 0): BatchOp[] => Array.from({ length: n }, (_, i) => ({ index: from + i, op: 'create', id: newId('order', PARTITION), input, items: [] }));

  // Every key free: taken at once.
  const free = valueOf<BatchOutcome[]>(await host.handle(batch(creates(N))));
  t.is(free.length, N);
  t.true(free.every((o) => o.ok));

  // One key held by a write still running: the batch takes its keys one by one, and waits.
  const held = newId('order', PARTITION);
  const first = host.handle(create(held));
  const ops: BatchOp[] = [{ index: 0, op: 'patch', id: held, ifMatch: undefined, patch: { note: 'after' } }, ...creates(N, 1)];
  const [created, outcomes] = await Promise.all([first, host.handle(batch(ops))]);
  valueOf(created);
  const done = valueOf<BatchOutcome[]>(outcomes);
  t.is(done.length, N + 1);
  t.true(done.every((o) => o.ok), JSON.stringify(done.find((o) => !o.ok)));
  t.like(done[0], { ok: true, id: held, version: 2 }, 'the patch ran after the create it queued behind');
});

test('a key holds MAILBOX_LIMIT commands, the running one included: the next is refused unavailable (503), and a later one runs', async (t) => {
  const dir = await tempDir('mailboxes-limit');
  const LIMIT = 5;
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: LIMIT, log: silentLog() });
  try {
    const id = newId('order', PARTITION);
    valueOf(await host.handle(create(id)));
    const release = holdNextCommit(host);
    const sent = Array.from({ length: LIMIT + 3 }, (_, i) => host.handle(patch(id, { [`k${i}`]: 'v' })));
    await delay(50);
    release();
    const results = await Promise.all(sent);
    t.is(results.filter((r) => r.ok).length, LIMIT);
    const refused = results.filter((r) => !r.ok);
    t.is(refused.length, 3);
    for (const r of refused) t.like(r, { ok: false, error: { code: 'unavailable' } });
    // The ones admitted are the first LIMIT sent, applied in order; the rest changed nothing.
    const order = valueOf<OrderRecord>(await host.handle({ kind: 'order.get', tenant: 't1', partition: partitionOf(id), id }));
    t.deepEqual(Object.keys(order.metadata).sort(), Array.from({ length: LIMIT }, (_, i) => `k${i}`).sort());
    t.is(order.version, 1 + LIMIT);
    t.true((await host.handle(patch(id, { again: 'v' }))).ok);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('every mailbox is given back: with room for one turn per key, the writes after a keyed write and after a batch get in', async (t) => {
  const dir = await tempDir('mailboxes-one');
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 1, log: silentLog() });
  try {
    const id = newId('order', PARTITION);
    valueOf(await host.handle(create(id)));
    t.is(valueOf<OrderRecord>(await host.handle(patch(id, { a: '1' }, 'one'))).version, 2);
    // A mailbox kept after its turn would refuse these (503), and answer the retry 409 in flight.
    t.like(await host.handle(patch(id, { a: '1' }, 'one')), { ok: true, replayed: true });
    t.is(valueOf<OrderRecord>(await host.handle(patch(id, { b: '2' }))).version, 3);
    const ids = [id, ...Array.from({ length: 3 }, () => newId('order', PARTITION))];
    const ops: BatchOp[] = ids.map((o, index) => (index === 0 ? { index, op: 'patch', id: o, ifMatch: undefined, patch: { note: 'n' } } : { index, op: 'create', id: o, input, items: [] }));
    t.true(valueOf<BatchOutcome[]>(await host.handle({ kind: 'order.batch', tenant: 't1', partition: PARTITION, atomic: true, ops })).every((o) => o.ok));
    for (const o of ids) t.true((await host.handle(patch(o, { c: '3' }))).ok, o);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('a retry queued behind the sweep of its expired key runs when the sweep fails to commit', async (t) => {
  // The sweep deleting a key's expired record holds the key's mailbox; a request under the key
  // waits there (keyBusy) rather than being told 409. When the sweep's commit fails (a full
  // disk), that request must still run, not be rejected unrun.
  let clock = 1_000_000;
  const dir = await tempDir('mailboxes-sweep');
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: silentLog(), now: () => clock, idempotencyTtlMs: 1000 });
  try {
    const id = newId('order', PARTITION);
    valueOf(await host.handle(create(id)));
    t.is(valueOf<OrderRecord>(await host.handle(patch(id, { v: '1' }, 'swept'))).version, 2);
    clock += 5000; // the key's record has expired
    failCommits(host, 1, 20);
    const sweep = host.sweepIdempotency();
    const retry = host.handle(patch(id, { v: '2' }, 'swept'));
    const [swept, answered] = await Promise.allSettled([sweep, retry]);
    t.like(swept, { status: 'fulfilled', value: 0 }, 'the sweep removed nothing and said so');
    t.is(answered.status, 'fulfilled', answered.status === 'rejected' ? String(answered.reason) : '');
    if (answered.status === 'fulfilled') t.is(valueOf<OrderRecord>(answered.value).version, 3, 'the request under the expired key ran anew');
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('a turn that rejects does not take the turns queued behind it under its key down unrun', async (t) => {
  // Driven directly, to reach both ways of queueing: on the key alone, and as a pair taken one
  // key at a time.
  const host = t.context.host as unknown as {
    holding(keys: string[], run: () => Promise<Result<unknown>>): Promise<Result<unknown>>;
    boxes: Map<string, unknown>;
  };
  let fail!: () => void;
  const failing = new Promise<void>((resolve) => (fail = resolve));
  const ran: string[] = [];
  const first = host.holding(['k'], async () => {
    await failing;
    ran.push('first');
    throw new Error('the disk is full');
  });
  // One behind it on its key alone, and one taking that key with another, one by one.
  const alone = host.holding(['k'], () => {
    ran.push('alone');
    return Promise.resolve({ ok: true, value: 'alone' });
  });
  const pair = host.holding(['k', 'j'], () => {
    ran.push('pair');
    return Promise.resolve({ ok: true, value: 'pair' });
  });
  fail();
  await t.throwsAsync(first, { message: 'the disk is full' });
  t.deepEqual(await alone, { ok: true, value: 'alone' });
  t.deepEqual(await pair, { ok: true, value: 'pair' });
  t.deepEqual(ran, ['first', 'alone', 'pair']);
  t.is(host.boxes.size, 0, 'every mailbox given back');
});

test("another tenant's writes naming a record are answered without its mailbox: they neither wait behind the owner's writes nor fill the mailbox against them", async (t) => {
  const dir = await tempDir('mailboxes-tenants');
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 2, log: silentLog() });
  let release: () => void = () => undefined;
  try {
    const id = newId('order', PARTITION);
    valueOf(await host.handle(create(id)));
    // The owner's write keeps the order's turn until `release`.
    release = holdNextCommit(host);
    const first = host.handle(patch(id, { a: '1' }));
    // Another tenant, with Idempotency-Keys (each answer kept, so each turn commits): before,
    // they queued on the order's mailbox, the third was refused, and the owner's next write too.
    const foreign = [1, 2, 3].map((n) => host.handle({ ...patch(id, { x: String(n) }, `other-${n}`), tenant: 't2' }));
    // And a batch patching it beside a create of its own.
    const ops: BatchOp[] = [
      { index: 0, op: 'patch', id, ifMatch: undefined, patch: { note: 'other' } },
      { index: 1, op: 'create', id: newId('order', PARTITION), input, items: [] },
    ];
    const batch = host.handle({ kind: 'order.batch', tenant: 't2', partition: PARTITION, atomic: false, ops, idem: { key: 'other-batch', fingerprint: 'fp' } });
    const answered = await Promise.race([Promise.all([...foreign, batch]), delay(3000).then(() => undefined)]);
    t.truthy(answered, "the other tenant's writes were answered while the owner's turn was held");
    t.deepEqual(
      answered?.slice(0, 3).map((r) => (r.ok ? 'ok' : r.error.code)),
      ['not-found', 'not-found', 'not-found'],
    );
    const outcomes = valueOf<BatchOutcome[]>(answered![3]!);
    t.deepEqual(
      outcomes.map((o) => o.ok),
      [false, true],
    );
    const second = host.handle(patch(id, { b: '2' }));
    release();
    t.true((await first).ok);
    const r = await second;
    t.true(r.ok, JSON.stringify(r));
    const order = valueOf<OrderRecord>(await host.handle({ kind: 'order.get', tenant: 't1', partition: partitionOf(id), id }));
    t.deepEqual(order.metadata, { a: '1', b: '2' });
  } finally {
    release();
    await host.close();
    await removeDir(dir);
  }
});
