// Refund operations in the background: what the processor's answers do, that a job cut off by a
// stop or a SIGKILL is resumed and moves the money once, and that finished operations are swept
// after OPERATION_RETENTION_HOURS. The paths every client takes run in both modes in
// helpers/refund-suite.ts; these need a processor or a clock of the test's own, or a real kill.

import type { ChildProcess } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import anyTest, { type TestFn } from 'ava';
import { ActorHost, type HostOptions } from '../actors/host.js';
import { RefundRunner, simulatedProcessor, type RefundProcessor } from '../actors/refund-runner.js';
import type { RefundTables } from '../actors/refunds.js';
import { newId, partitionOf } from '../common/ids.js';
import type { Command, OperationRecord, OrderRecord, RefundRecord, Result } from '../proto/messages.js';
import { exited, killAll, startChild } from './helpers/child-service.js';
import { Api } from './helpers/client.js';
import { holdNextCommit, removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { newTenant } from './helpers/order-suite.js';
import { paidOrder } from './helpers/refund-suite.js';
import { startEmbedded } from './helpers/service.js';
import { allPartitions } from '../common/partitions.js';

const test = anyTest as TestFn;
const ALL = allPartitions();
const TENANT = 'refund-jobs';
const WAIT_MS = 15_000;

function open(dir: string, extra: Partial<HostOptions> = {}): ActorHost {
  return new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: silentLog(), ...extra });
}

async function ok<T>(host: ActorHost, cmd: Command): Promise<T> {
  const r = (await host.handle(cmd)) as Result<T>;
  if (!r.ok) throw new Error(`${cmd.kind}: ${r.error.code} ${r.error.detail}`);
  return r.value;
}

function read<T>(host: ActorHost, kind: 'operation.get' | 'refund.get' | 'order.get', id: string): Result<T> {
  return host.read({ kind, tenant: TENANT, partition: partitionOf(id), id } as Command) as Result<T>;
}

async function paid(host: ActorHost, total = 3000): Promise<OrderRecord> {
  const id = newId('order');
  const partition = partitionOf(id);
  const input = { currency: 'EUR', customerId: null, note: null, metadata: {} };
  await ok(host, { kind: 'order.create', tenant: TENANT, partition, id, input, items: [{ id: newId('item', partition), productId: newId('product'), quantity: 1, unitPrice: total }] });
  return ok<OrderRecord>(host, { kind: 'order.pay', tenant: TENANT, partition, id, ifMatch: undefined });
}

function startRefund(host: ActorHost, order: OrderRecord, amount: number | null = null): Promise<OperationRecord> {
  const partition = partitionOf(order.id);
  return ok<OperationRecord>(host, {
    kind: 'refund.create',
    tenant: TENANT,
    partition,
    id: newId('refund', partition),
    orderId: order.id,
    operationId: newId('operation', partition),
    amount,
    reason: null,
  });
}

/** Waits until the operation's status is one of `statuses`. */
async function until(host: ActorHost, opId: string, ...statuses: string[]): Promise<OperationRecord> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const r = read<OperationRecord>(host, 'operation.get', opId);
    if (r.ok && statuses.includes(r.value.status)) return r.value;
    if (Date.now() > deadline) throw new Error(`operation still ${r.ok ? r.value.status : r.error.code}`);
    await delay(10);
  }
}

/** A processor that never answers until it is aborted (the host stopping), counting calls. */
function stuck(calls: string[]): RefundProcessor {
  return {
    refund: (req, signal) =>
      new Promise((_, reject) => {
        calls.push(req.refundId);
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
  };
}

function counting(calls: string[], answer: Awaited<ReturnType<RefundProcessor['refund']>> = { ok: true }): RefundProcessor {
  return {
    refund: async (req) => {
      calls.push(req.refundId);
      return answer;
    },
  };
}

test('a job cut off by a stop is resumed on the next start and moves the money once', async (t) => {
  const dir = await tempDir('refund-resume');
  try {
    const before: string[] = [];
    const first = open(dir, { refundProcessor: stuck(before) });
    const order = await paid(first, 3000);
    const op = await startRefund(first, order, 1000);
    t.is(op.status, 'pending');
    await until(first, op.id, 'running');
    // Stopped while the processor call is out (a runner that is stopping makes none).
    while (before.length === 0) await delay(5);
    await first.close();
    t.is(before.length, 1);

    const calls: string[] = [];
    const second = open(dir, { refundProcessor: counting(calls) });
    const done = await until(second, op.id, 'succeeded');
    t.is(done.attempts, 2, 'one processor call before the stop, one after');
    t.deepEqual(calls, [op.refundId], 'the resumed job asks for the same refund');
    const o = read<OrderRecord>(second, 'order.get', order.id);
    t.true(o.ok && o.value.refunded === 1000 && (o.value.refundHeld ?? 0) === 0 && o.value.status === 'paid', JSON.stringify(o));
    await second.close();

    const again: string[] = [];
    const third = open(dir, { refundProcessor: counting(again) });
    await delay(200);
    t.deepEqual(again, [], 'a finished operation is not run again');
    t.is(third.runningOperations, 0);
    const o3 = read<OrderRecord>(third, 'order.get', order.id);
    t.true(o3.ok && o3.value.refunded === 1000, 'refunded once');
    await third.close();
  } finally {
    await removeDir(dir);
  }
});

test('a declined refund fails its operation with the problem, fails the refund, and frees the amount', async (t) => {
  const dir = await tempDir('refund-declined');
  const host = open(dir, { refundProcessor: counting([], { ok: false, error: { code: 'refund-declined', detail: 'The card was closed.' } }) });
  try {
    const order = await paid(host, 2500);
    const op = await startRefund(host, order);
    const failed = await until(host, op.id, 'failed', 'succeeded');
    t.is(failed.status, 'failed');
    t.deepEqual(failed.error, { code: 'refund-declined', detail: 'The card was closed.' });
    const refund = read<RefundRecord>(host, 'refund.get', op.refundId);
    t.true(refund.ok && refund.value.status === 'failed' && refund.value.failureReason === 'The card was closed.');
    const o = read<OrderRecord>(host, 'order.get', order.id);
    t.true(o.ok && o.value.status === 'paid' && (o.value.refundHeld ?? 0) === 0 && (o.value.refunded ?? 0) === 0, JSON.stringify(o));
    const retry = await startRefund(host, order);
    t.is(retry.status, 'pending', 'the whole amount can be refunded again');
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('a processor that throws is asked again after a pause; the operation then succeeds', async (t) => {
  const dir = await tempDir('refund-retry');
  let calls = 0;
  const host = open(dir, {
    refundProcessor: {
      async refund() {
        if (++calls === 1) throw new Error('connection reset');
        return { ok: true };
      },
    },
  });
  try {
    const order = await paid(host, 1200);
    const op = await startRefund(host, order);
    const done = await until(host, op.id, 'succeeded', 'failed');
    t.is(done.status, 'succeeded');
    t.is(calls, 2);
    t.is(done.attempts, 2);
    const o = read<OrderRecord>(host, 'order.get', order.id);
    t.true(o.ok && o.value.status === 'refunded', 'a full refund makes the order refunded');
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('a processor that keeps failing never fails the refund: its amount stays held until the processor answers', async (t) => {
  // A failed or timed-out call may still have moved the money: giving up would free the amount
  // for a second refund, and the processor would pay twice.
  const dir = await tempDir('refund-unanswered');
  let calls = 0;
  let failing = true;
  const host = open(dir, {
    refundBackoffMs: [1],
    refundProcessor: {
      async refund() {
        calls++;
        if (failing) throw new Error('connection reset');
        return { ok: true };
      },
    },
  });
  try {
    const order = await paid(host, 1000);
    const op = await startRefund(host, order);
    let meanwhile = read<OperationRecord>(host, 'operation.get', op.id);
    while (calls < 20 && meanwhile.ok && meanwhile.value.status !== 'failed') {
      await delay(5);
      meanwhile = read<OperationRecord>(host, 'operation.get', op.id);
    }
    t.true(meanwhile.ok && meanwhile.value.status === 'running', 'still running after 20 failed calls');
    const second = await host.handle({
      kind: 'refund.create',
      tenant: TENANT,
      partition: partitionOf(order.id),
      id: newId('refund', partitionOf(order.id)),
      orderId: order.id,
      operationId: newId('operation', partitionOf(order.id)),
      amount: null,
      reason: null,
    });
    t.like(second, { ok: false, error: { code: 'invalid-state' } }, 'the amount is still held');
    failing = false;
    const done = await until(host, op.id, 'succeeded', 'failed');
    t.is(done.status, 'succeeded');
    const o = read<OrderRecord>(host, 'order.get', order.id);
    t.true(o.ok && o.value.status === 'refunded' && o.value.refunded === 1000);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('refunds a processor keeps failing give up their slots after a while: another refund waiting for one runs', async (t) => {
  const dir = await tempDir('refund-yield');
  let stuck = '';
  const host = open(dir, {
    refundMaxJobs: 1,
    refundBackoffMs: [1],
    refundProcessor: {
      async refund(req) {
        if (req.refundId === stuck) throw new Error('connection reset');
        return { ok: true };
      },
    },
  });
  try {
    const a = await paid(host, 1000);
    const b = await paid(host, 700);
    const first = await startRefund(host, a);
    stuck = first.refundId;
    t.truthy(stuck);
    // The only slot is taken by the failing refund; these wait, then run once it yields, one
    // after the other, each pass going on past the one before.
    const second = await startRefund(host, b);
    const c = await paid(host, 300);
    const third = await startRefund(host, c);
    for (const op of [second, third]) t.is((await until(host, op.id, 'succeeded', 'failed')).status, 'succeeded');
    const held = read<OperationRecord>(host, 'operation.get', first.id);
    t.true(held.ok && held.value.status === 'running', 'the failing refund still runs, holding its amount');
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('a job stopped by an error of ours (its commit refused) rests before it runs again, instead of retrying at once', async (t) => {
  let commits = 0;
  const op = { id: newId('operation'), orderId: newId('order') };
  const runner: RefundRunner = new RefundRunner({
    tables: {} as RefundTables,
    processor: simulatedProcessor(0),
    retentionMs: 60_000,
    processorTimeoutMs: 1000,
    commit: async () => {
      commits++;
      throw new Error('the disk is full');
    },
    // As the host does: a freed slot starts whatever waits, this operation included.
    onRoom: () => setImmediate(() => runner.kick(op)),
    log: silentLog(),
  });
  runner.kick(op);
  await delay(300);
  await runner.close();
  t.is(commits, 1, 'one attempt, then a rest');
});

test('a processor call that hangs, even one that ignores the abort, is abandoned after its timeout and asked again; close() does not wait for it', async (t) => {
  const dir = await tempDir('refund-hang');
  let calls = 0;
  const never = new Promise<never>(() => {});
  const host = open(dir, {
    refundProcessorTimeoutMs: 100,
    refundProcessor: { refund: () => (++calls === 1 ? never : Promise.resolve({ ok: true as const })) },
  });
  try {
    const order = await paid(host, 900);
    const op = await startRefund(host, order);
    const done = await until(host, op.id, 'succeeded', 'failed');
    t.is(done.status, 'succeeded');
    t.is(calls, 2);
  } finally {
    await host.close();
  }
  const stuckHost = open(dir, { refundProcessor: { refund: () => never } });
  try {
    const order = await paid(stuckHost, 900);
    const op = await startRefund(stuckHost, order);
    await until(stuckHost, op.id, 'running');
  } finally {
    const started = Date.now();
    await stuckHost.close();
    t.true(Date.now() - started < 5_000, `close took ${Date.now() - started} ms`);
    await removeDir(dir);
  }
});

test('a hanging processor call is abandoned after its timeout even when the collector runs meanwhile', async (t) => {
  // The collector, as the service's idle collection (--expose-gc) runs it.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const dir = await tempDir('refund-hang-gc');
  let calls = 0;
  const host = open(dir, {
    refundProcessorTimeoutMs: 300,
    refundProcessor: { refund: () => (++calls === 1 ? new Promise<never>(() => {}) : Promise.resolve({ ok: true as const })) },
  });
  try {
    const order = await paid(host, 900);
    const op = await startRefund(host, order);
    await until(host, op.id, 'running');
    // Before the timeout is due: what only a weak reference holds is collected now.
    for (let i = 0; i < 5; i++) {
      gc();
      await delay(10);
    }
    const done = await until(host, op.id, 'succeeded', 'failed');
    t.is(done.status, 'succeeded');
    t.is(calls, 2);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('finished operations read as not found once past their retention, sweep or not, and are swept; the refund stays; unfinished ones are not', async (t) => {
  const dir = await tempDir('refund-sweep');
  let now = Date.parse('2026-01-01T00:00:00Z');
  const hours = 3600_000;
  const calls: string[] = [];
  // The first refund is processed at once; later ones hang until the host stops.
  const hanging = stuck([]);
  const processor: RefundProcessor = { refund: (req, signal) => (calls.push(req.refundId) === 1 ? Promise.resolve({ ok: true }) : hanging.refund(req, signal)) };
  const host = open(dir, { now: () => now, operationRetentionMs: 24 * hours, refundProcessor: processor });
  try {
    const order = await paid(host, 1000);
    const op = await startRefund(host, order, 400);
    await until(host, op.id, 'succeeded');
    const unfinished = await startRefund(host, order, 100);
    await until(host, unfinished.id, 'running');
    t.is(await host.sweepOperations(), 0, 'kept within its retention');
    now += 24 * hours - 1;
    t.true(read(host, 'operation.get', op.id).ok, 'readable to the end of its retention');
    t.is(await host.sweepOperations(), 0);
    now += 1;
    const expired = read(host, 'operation.get', op.id);
    t.true(!expired.ok && expired.error.code === 'not-found', `read before the sweep comes by: ${JSON.stringify(expired)}`);
    t.is(await host.sweepOperations(), 1);
    const gone = read(host, 'operation.get', op.id);
    t.true(!gone.ok && gone.error.code === 'not-found');
    t.true(read(host, 'refund.get', op.refundId).ok, 'the refund itself stays');
    now += 365 * 24 * hours;
    t.is(await host.sweepOperations(), 0, 'a running operation is never swept');
    t.true(read(host, 'operation.get', unfinished.id).ok);
    t.deepEqual(calls, [op.refundId, unfinished.refundId]);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('over HTTP, a failed operation carries its error as a problem object and no result link', async (t) => {
  const service = await startEmbedded({}, { refundProcessor: counting([], { ok: false, error: { code: 'refund-declined', detail: 'Declined by the issuer.' } }) });
  const api = new Api(service.url, service.secret);
  try {
    const c = await api.as(newTenant('rf-http'));
    // The suite helper asserts with `t` and reads nothing from its context.
    const order = await paidOrder(t as never, c, 1);
    const started = await c.post('/v1/refunds', { orderId: order.id });
    t.is(started.status, 202, started.text);
    let op = started.json;
    for (let i = 0; i < 500 && (op.status === 'pending' || op.status === 'running'); i++) {
      await delay(20);
      op = (await c.get(started.headers.location!)).json;
    }
    t.is(op.status, 'failed');
    t.deepEqual(op.error, { type: '/problems/refund-declined', title: 'Refund declined', status: 402, detail: 'Declined by the issuer.' });
    t.is(op._links.result, undefined);
    const refunds = await c.get(`/v1/refunds?orderId=${order.id}`);
    t.like(refunds.json.data[0], { status: 'failed', failureReason: 'Declined by the issuer.' });
    const doc = await c.get('/problems/refund-declined');
    t.is(doc.status, 200);
  } finally {
    await api.close();
    await service.close();
  }
});

test.serial('SIGKILL while a refund runs: after the restart the operation is resumed and succeeds, refunding once', async (t) => {
  const dir = await tempDir('refund-kill');
  const children = new Set<ChildProcess>();
  const secret = 'refund-kill-test-secret-0123456789abcdef';
  try {
    const tenant = newTenant('rf-kill');
    const first = await startChild(children, dir, secret, { REFUND_PROCESSING_MS: '60000' });
    let api = new Api(first.url, secret);
    let c = await api.as(tenant);
    const order = await paidOrder(t as never, c, 2);
    const started = await c.post('/v1/refunds', { orderId: order.id, amount: 500 }, { 'idempotency-key': 'kill-1' });
    t.is(started.status, 202, started.text);
    const href = started.headers.location!;
    let status = started.json.status as string;
    for (let i = 0; i < 500 && status !== 'running'; i++) {
      await delay(10);
      status = (await c.get(href)).json.status;
    }
    t.is(status, 'running');
    first.child.kill('SIGKILL');
    t.is((await exited(first.child)).signal, 'SIGKILL');
    await api.close();

    const second = await startChild(children, dir, secret, { REFUND_PROCESSING_MS: '50' });
    api = new Api(second.url, secret);
    c = await api.as(tenant);
    let op = (await c.get(href)).json;
    for (let i = 0; i < 500 && op.status !== 'succeeded' && op.status !== 'failed'; i++) {
      await delay(20);
      op = (await c.get(href)).json;
    }
    t.is(op.status, 'succeeded');
    const replay = await c.post('/v1/refunds', { orderId: order.id, amount: 500 }, { 'idempotency-key': 'kill-1' });
    t.is(replay.headers['idempotent-replayed'], 'true');
    t.is(replay.json.id, started.json.id, 'a retry of the start still names the same operation');
    const list = (await c.get(`/v1/refunds?orderId=${order.id}`)).json.data;
    t.is(list.length, 1);
    t.like(list[0], { amount: 500, status: 'succeeded' });
    const rest = await c.post('/v1/refunds', { orderId: order.id, amount: order.total - 500 + 1 });
    t.is(rest.status, 422, 'only what is left can be refunded: the resumed refund counted once');
    await api.close();
    second.child.kill('SIGTERM');
    await exited(second.child);
  } finally {
    killAll(children);
    await removeDir(dir);
  }
});

test("a refund job is not refused a turn by its order's full mailbox: it finishes as soon as the writes queued there have run", async (t) => {
  const dir = await tempDir('refund-mailbox');
  // One turn queued under a key at most, so a client's write waiting there fills the mailbox.
  let answer: () => void = () => undefined;
  const answered = new Promise<void>((resolve) => (answer = resolve));
  let asked: () => void = () => undefined;
  const processorAsked = new Promise<void>((resolve) => (asked = resolve));
  const processor: RefundProcessor = {
    refund: () => {
      asked();
      return answered.then(() => ({ ok: true }) as const);
    },
  };
  const host = open(dir, { mailboxLimit: 1, refundProcessor: processor });
  try {
    const order = await paid(host);
    const op = await startRefund(host, order);
    // The job's first turn is over (its mailbox given back) once it asks the processor.
    await processorAsked;
    // A client's write whose commit is held: it keeps the order's turn until `release`.
    const release = holdNextCommit(host);
    const partition = partitionOf(order.id);
    const patching = host.handle({ kind: 'order.patch', tenant: TENANT, partition, id: order.id, ifMatch: undefined, patch: { note: 'held' } });
    await delay(20);
    // The job's finish comes while the mailbox is full: a client's write would be refused now.
    const refused = await host.handle({ kind: 'order.patch', tenant: TENANT, partition, id: order.id, ifMatch: undefined, patch: { note: 'refused' } });
    t.is(refused.ok ? 'ok' : refused.error.code, 'unavailable');
    answer();
    await delay(50);
    release();
    t.true((await patching).ok);
    // Before, the job was refused its turn and rested a minute before asking the processor again.
    const done = await until(host, op.id, 'succeeded', 'failed');
    t.is(done.status, 'succeeded');
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('over HTTP, an order links `refund` only while one can start: not while all that is left is held by a refund still processing', async (t) => {
  let answer: () => void = () => undefined;
  const answered = new Promise<void>((resolve) => (answer = resolve));
  const service = await startEmbedded({}, { refundProcessor: { refund: () => answered.then(() => ({ ok: true }) as const) } });
  const api = new Api(service.url, service.secret);
  try {
    const c = await api.as(newTenant('rf-link'));
    const order = await paidOrder(t as never, c, 2);
    const href = `/v1/orders/${order.id}`;
    t.truthy((await c.get(href)).json._links.refund);
    const part = await c.post('/v1/refunds', { orderId: order.id, amount: 500 });
    t.is(part.status, 202, part.text);
    t.truthy((await c.get(href)).json._links.refund, 'something is left to refund');
    const rest = await c.post('/v1/refunds', { orderId: order.id });
    t.is(rest.status, 202, rest.text);
    const held = await c.get(href);
    t.is(held.json.status, 'paid');
    t.is(held.json._links.refund, undefined, 'all that is left is held');
    t.truthy(held.json._links.refunds);
    t.is((await c.post('/v1/refunds', { orderId: order.id })).status, 409, 'as the missing link said');
    // A v2 client is told in major units, whether or not it named an amount.
    const v2 = await c.post('/v2/refunds', { orderId: order.id });
    t.is(v2.status, 409);
    t.regex(v2.json.detail, /20\.00 EUR is held/);
    answer();
  } finally {
    answer();
    await api.close();
    await service.close();
  }
});
