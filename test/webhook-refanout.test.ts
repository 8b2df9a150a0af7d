// A fan-out's first attempts are stored only with their outcome, and their event leaves the
// outbox only once the last of them is stored (actors/dispatcher.ts). The real process is
// SIGKILLed while one endpoint's first attempt is still out and the other's outcome is stored:
// the data it leaves holds the event's outbox row, the stored outcome, and nothing for the
// attempt still out. After a restart the event is fanned out again: the stored delivery is found
// by its id (fixed by event and endpoint) and not sent again; the other is sent again, with the
// same event id. While that attempt is out, a second event is fanned out: the first, still in
// the outbox, is not sent again; the second goes to the fast endpoint at once and waits, stored,
// for the slow endpoint's worker (its batch still holds the endpoint), which resumes it after the
// restart.
//
// Then, on the actor host directly, with the LMDB state arranged between two hosts: a delivery id
// that another endpoint's delivery of the same event already holds (a hash clash), an event
// whose body cannot be rendered, and first attempts whose signatures fail (stored pending, unsent).

import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import { EVENTS, OUTBOX } from '../actors/events.js';
import { ActorHost } from '../actors/host.js';
import { DELIVERIES } from '../actors/webhooks.js';
import { derivedId, newId, partitionOf } from '../common/ids.js';
import { allPartitions } from '../common/partitions.js';
import type { DeliveryRecord, EndpointRecord, EventRecord, OutboxEntry } from '../proto/webhooks.js';
import { Signer, type SignedPart } from '../actors/signer.js';
import type { SignTask } from '../common/webhook-signature.js';
import { Store, type Table } from '../storage/store.js';
import { HttpClient } from './helpers/client.js';
import { exited, startChild, useChildren, type ChildContext, type Running } from './helpers/child-service.js';
import { removeDir, silentLog, tempDir, token } from './helpers/edge-kit.js';
import { deliveries, endpointCreate, ok, startReceiver, until, WEBHOOK_SCOPES, type Receiver } from './helpers/webhook-kit.js';

const test = anyTest as TestFn<ChildContext>;
const SECRET = 'webhook-refanout-secret-0123456789abcdef';

useChildren(test, 'webhook-refanout');

function start(t: { context: ChildContext }): Promise<Running> {
  // A timeout longer than the test: the slow receiver's first attempt is still out at the kill.
  return startChild(t.context.children, t.context.dir, SECRET, { LOG_LEVEL: 'error', WEBHOOK_ALLOW_PRIVATE_TARGETS: '1', WEBHOOK_TIMEOUT_MS: '60000' });
}

/** The ids of the outbox rows in `store`, oldest first. */
function outboxIds(store: Store): string[] {
  return store.scan(store.table<OutboxEntry>(OUTBOX) as Table<unknown>, { prefix: [], after: undefined, reverse: false, limit: 100 }).map((r) => r.id);
}

/** What a host left in its LMDB (in `dir`): the outbox rows, and the deliveries asked for by id. */
async function leftBehind(dir: string, deliveryIds: string[]): Promise<{ outbox: string[]; deliveries: (DeliveryRecord | undefined)[] }> {
  const store = Store.open(dir);
  try {
    const stored = store.table<DeliveryRecord>(DELIVERIES);
    return { outbox: outboxIds(store), deliveries: deliveryIds.map((id) => stored.get(id)) };
  } finally {
    await store.close();
  }
}

test.serial('killed with one first attempt out: the event stays in the outbox, and after a restart only that endpoint gets it again', async (t) => {
  const tok = await token(SECRET, WEBHOOK_SCOPES, { tenant: 'refanout' });
  const auth = { authorization: `Bearer ${tok}` };
  const fast = await startReceiver();
  const slow = await startReceiver();
  slow.answer = () => ({ status: 200, delayMs: 60_000 });
  let run = await start(t);
  let http = new HttpClient(run.url);
  try {
    const endpoint = async (url: string): Promise<string> => {
      const e = await http.send('POST', '/v1/webhook-endpoints', { headers: auth, json: { endpointUrl: url, eventTypes: ['order.created'] } });
      t.is(e.status, 201);
      return e.json.id as string;
    };
    const fastId = await endpoint(fast.url);
    const slowId = await endpoint(slow.url);
    t.is((await http.send('POST', '/v1/orders', { headers: auth, json: { currency: 'EUR' } })).status, 201);

    await until('both first attempts', () => fast.got.length === 1 && slow.got.length === 1);
    const eventId = fast.got[0]!.json.id as string;
    t.is(slow.got[0]!.json.id, eventId);
    await until('the fast outcome stored', async () => {
      const page = await http.send('GET', `/v1/webhook-endpoints/${fastId}/deliveries`, { headers: auth });
      return (page.json.data as { status: string }[]).some((d) => d.status === 'delivered');
    });
    // A second event, fanned out while the first's row is still in the outbox. Past FULL_PASS_MS
    // (1 s), so that pass scans from the beginning and meets the first row, still in flight.
    await delay(1100);
    t.is((await http.send('POST', '/v1/orders', { headers: auth, json: { currency: 'EUR' } })).status, 201);
    await until('the second event at the fast endpoint', () => fast.got.length === 2);
    const second = fast.got[1]!.json.id as string;
    t.not(second, eventId);
    // LMDB lets this process read beside the running one.
    await until('the second event out of the outbox, the first still in it', async () => (await leftBehind(join(t.context.dir, 'actors'), [])).outbox.join() === eventId);
    t.deepEqual(
      slow.got.map((g) => g.json.id as string),
      [eventId],
      'the first event, still in the outbox while its attempt is out, was not sent again',
    );
    run.child.kill('SIGKILL');
    await exited(run.child);
    await http.close();

    const fastDelivery = derivedId('delivery', eventId, fastId);
    const slowDelivery = derivedId('delivery', eventId, slowId);
    const slowSecond = derivedId('delivery', second, slowId);
    const killed = await leftBehind(join(t.context.dir, 'actors'), [fastDelivery, slowDelivery, slowSecond]);
    t.deepEqual(killed.outbox, [eventId], 'an event stays in the outbox while a first attempt is out');
    t.is(killed.deliveries[0]?.status, 'delivered');
    t.is(killed.deliveries[1], undefined, 'a first attempt still out is not stored');
    t.is(killed.deliveries[2]?.status, 'pending', "a delivery handed to the endpoint's worker is stored at the fan-out");
    t.deepEqual(killed.deliveries[2]?.attempts, []);

    slow.answer = () => ({ status: 200 });
    run = await start(t);
    http = new HttpClient(run.url);
    await until('the slow endpoint to get the first event again, and the second', () => slow.got.length === 3);
    t.deepEqual(slow.got.slice(1).map((g) => g.json.id as string).sort(), [eventId, second].sort());
    await until('the slow outcomes stored', async () => {
      const page = await http.send('GET', `/v1/webhook-endpoints/${slowId}/deliveries`, { headers: auth });
      return (page.json.data as { status: string }[]).filter((d) => d.status === 'delivered').length === 2;
    });
    // The outbox row goes in a commit after the last outcome's.
    await until('the outbox row removed', async () => (await leftBehind(join(t.context.dir, 'actors'), [])).outbox.length === 0);
    run.child.kill('SIGKILL');
    await exited(run.child);
    const after = await leftBehind(join(t.context.dir, 'actors'), [fastDelivery, slowDelivery, slowSecond]);
    t.deepEqual(after.outbox, []);
    t.deepEqual(
      after.deliveries.map((d) => d?.status),
      ['delivered', 'delivered', 'delivered'],
    );
    t.is(fast.got.length, 2, 'the deliveries stored before the kill were not sent again');
    t.is(slow.got.length, 3);
  } finally {
    await http.close();
    run.child.kill('SIGKILL');
    await fast.close();
    await slow.close();
  }
});

const ALL = allPartitions();

async function createOrder(host: ActorHost, tenant: string): Promise<void> {
  const id = newId('order');
  await ok(host.handle({ kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }));
}

/**
 * One order.created event of `tenant` left in the outbox of a host in `dir` that has no
 * dispatcher, with an endpoint per URL: the endpoints, and the store open for the test to change
 * what the dispatching host (`dispatching`) will find.
 */
async function eventLeft(dir: string, tenant: string, urls: string[]): Promise<{ endpoints: EndpointRecord[]; eventId: string; store: Store }> {
  const quiet = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, log: silentLog() });
  const endpoints: EndpointRecord[] = [];
  for (const url of urls) endpoints.push(await ok<EndpointRecord>(quiet.handle(endpointCreate(tenant, url))));
  await createOrder(quiet, tenant);
  await quiet.close();
  const store = Store.open(dir);
  return { endpoints, eventId: outboxIds(store)[0]!, store };
}

/** eventLeft in a fresh directory, with two receivers and an endpoint at each; all gone after the test. */
async function twoReceivers(t: ExecutionContext, tenant: string): Promise<Awaited<ReturnType<typeof eventLeft>> & { dir: string; a: Receiver; b: Receiver }> {
  const dir = await tempDir(`webhook-${tenant}`);
  t.teardown(() => removeDir(dir));
  const a = await startReceiver();
  const b = await startReceiver();
  t.teardown(async () => {
    await a.close();
    await b.close();
  });
  return { dir, a, b, ...(await eventLeft(dir, tenant, [a.url, b.url])) };
}

function dispatching(dir: string, signer?: Signer): ActorHost {
  return new ActorHost({
    dataDir: dir,
    partitions: ALL,
    mailboxLimit: 100,
    log: silentLog(),
    webhooks: { retrySchedule: [1], timeoutMs: 2000, disableAfterMs: 3_600_000, allowPrivateTargets: true, signer },
  });
}

test.serial("a delivery id taken by another endpoint's delivery of the same event: the endpoint gets the next id, and its delivery", async (t) => {
  const tenant = 'id-clash';
  const { dir, a, b, endpoints, eventId, store } = await twoReceivers(t, tenant);
  const [ea, eb] = endpoints as [EndpointRecord, EndpointRecord];
  // A clash the hash would make about once in 2^52: the id of B's delivery already names one
  // of A's, settled.
  const clash: DeliveryRecord = {
    id: derivedId('delivery', eventId, eb.id),
    tenant,
    version: 2,
    endpointId: ea.id,
    eventId,
    eventType: 'order.created',
    status: 'delivered',
    nextAttemptAt: undefined,
    attempts: [{ attempt: 1, at: Date.now(), outcome: 'delivered', responseStatus: 200, error: null, durationMs: 1 }],
    createdAt: Date.now(),
    updatedAt: Date.now(),
  };
  await store.commit([{ table: store.table(DELIVERIES) as Table<unknown>, id: clash.id, before: undefined, after: clash }]);
  await store.close();

  const host = dispatching(dir);
  t.teardown(() => host.close());
  await until('the event at both endpoints', () => a.got.length === 1 && b.got.length === 1);
  t.is(a.got[0]!.json.id, eventId);
  t.is(b.got[0]!.json.id, eventId);
  await host.close();
  const left = await leftBehind(dir, [derivedId('delivery', eventId, ea.id), derivedId('delivery', eventId, `${eb.id}\u00001`)]);
  t.deepEqual(left.outbox, []);
  t.deepEqual(
    left.deliveries.map((d) => [d?.endpointId, d?.status]),
    [
      [ea.id, 'delivered'],
      [eb.id, 'delivered'],
    ],
  );
});

test.serial('an event whose body does not render: its delivery fails at once, nothing is sent, the event leaves the outbox, and the endpoint gets the next event', async (t) => {
  const dir = await tempDir('webhook-unrenderable');
  t.teardown(() => removeDir(dir));
  const r = await startReceiver();
  t.teardown(() => r.close());
  const tenant = 'unrenderable';
  const { endpoints, eventId, store } = await eventLeft(dir, tenant, [r.url]);
  const endpoint = endpoints[0]!;
  // An event whose data the renderer cannot take: rendering its body throws before any request.
  const events = store.table<EventRecord>(EVENTS);
  const event = events.get(eventId)!;
  await store.commit([{ table: events as Table<unknown>, id: event.id, before: event, after: { ...event, data: null } }]);
  await store.close();

  const host = dispatching(dir);
  t.teardown(() => host.close());
  const deliveryId = derivedId('delivery', event.id, endpoint.id);
  await until('the delivery stored', async () => (await deliveries(host, tenant, endpoint.id)).some((d) => d.id === deliveryId));
  const failed = (await deliveries(host, tenant, endpoint.id)).find((d) => d.id === deliveryId)!;
  t.is(failed.status, 'failed');
  t.deepEqual(
    failed.attempts.map((a) => [a.outcome, a.responseStatus, a.error]),
    [['failed', null, 'the event could not be rendered']],
  );
  // The endpoint's queue is not held by it: the next event is delivered.
  await createOrder(host, tenant);
  await until('the next event delivered', () => r.got.length === 1);
  t.not(r.got[0]!.json.id, eventId);
  await host.close();
  const left = await leftBehind(dir, [deliveryId]);
  t.deepEqual(left.outbox, []);
  t.is(left.deliveries[0]?.status, 'failed');
});

/**
 * A signer whose first batch fails, as a pool whose worker died would answer; later batches are
 * signed once `open` is called, so the test sees what the failure left before the retry.
 */
class FailingOnce extends Signer {
  calls = 0;
  open!: () => void;
  private readonly gate = new Promise<void>((resolve) => (this.open = resolve));

  override parts(tasks: SignTask[]): SignedPart[] {
    if (this.calls++ === 0) return [{ from: 0, to: tasks.length, sigs: Promise.reject(new Error('the signing pool is gone')) }];
    return [{ from: 0, to: tasks.length, sigs: this.gate.then(() => Promise.all(super.parts(tasks).map((p) => p.sigs))).then((x) => x.flat()) }];
  }
}

test.serial('first attempts whose signatures could not be had: nothing is sent, they are stored pending, and the workers deliver them later', async (t) => {
  const tenant = 'unsent';
  const { dir, a, b, endpoints, eventId, store } = await twoReceivers(t, tenant);
  await store.close();
  const signer = new FailingOnce();
  const host = dispatching(dir, signer);
  t.teardown(() => host.close());
  const ids = endpoints.map((e) => derivedId('delivery', eventId, e.id));
  const stored = (): Promise<(DeliveryRecord | undefined)[]> => Promise.all(endpoints.map(async (e, i) => (await deliveries(host, tenant, e.id)).find((d) => d.id === ids[i])));
  await until('both deliveries stored', async () => (await stored()).every((d) => d !== undefined));
  t.deepEqual(
    (await stored()).map((d) => [d?.status, d?.attempts.length]),
    [
      ['pending', 0],
      ['pending', 0],
    ],
    'stored pending, with no attempt: none was made',
  );
  t.is(a.got.length + b.got.length, 0);
  signer.open();
  await until('the event at both endpoints', () => a.got.length === 1 && b.got.length === 1);
  t.is(a.got[0]!.json.id, eventId);
  t.is(b.got[0]!.json.id, eventId);
  // A receiver has a request before its answer is back and stored; a close before then would
  // cut the request off and store it pending again (to be sent after a restart).
  await until('both outcomes stored', async () => (await stored()).every((d) => d?.status === 'delivered'));
  await host.close();
  const left = await leftBehind(dir, ids);
  t.deepEqual(left.outbox, []);
  t.deepEqual(
    left.deliveries.map((d) => [d?.status, d?.attempts.map((x) => [x.attempt, x.outcome])]),
    [
      ['delivered', [[1, 'delivered']]],
      ['delivered', [[1, 'delivered']]],
    ],
  );
});
