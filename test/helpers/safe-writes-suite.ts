// Writes that are safe to retry (CONTRACT §7): Idempotency-Key on POST, and POST /orders/batch in
// partial and atomic mode. Registered beside the order suite, so both run in embedded mode and
// against two gateways over NATS in cluster mode.

import { randomBytes } from 'node:crypto';
import type { TestFn } from 'ava';
import { callersOn, type Caller, type Reply } from './client.js';
import { partitionOf } from '../../common/ids.js';
import { assertProblem, createOrder, createProduct, tenant, type Created, type SuiteContext, type T } from './order-suite.js';

const key = (): string => `key-${randomBytes(8).toString('hex')}`;

async function countOrders(t: T, c: Caller): Promise<number> {
  const res = await c.get('/v1/orders?limit=100');
  t.is(res.status, 200, res.text);
  return (res.json.data as unknown[]).length;
}

function replayed(res: Reply): boolean {
  return res.headers['idempotent-replayed'] === 'true';
}

export function registerSafeWritesSuite(test: TestFn<SuiteContext>): void {
  // ---------------- Idempotency-Key ----------------

  test('idempotency: a retried create replays the first status, body, Location and ETag, even after the order changed', async (t) => {
    const c = await tenant(t, 'idem');
    const k = key();
    const body = { currency: 'EUR', note: 'first' };
    const first = await c.post('/v1/orders', body, { 'idempotency-key': k });
    t.is(first.status, 201, first.text);
    t.false(replayed(first), 'the first answer is not a replay');
    const id = first.json.id as string;
    t.is(first.headers.location, `/v1/orders/${id}`);

    const patched = await c.patch(`/v1/orders/${id}`, { note: 'changed' });
    t.is(patched.status, 200, patched.text);

    const again = await c.post('/v1/orders', body, { 'idempotency-key': k });
    t.is(again.status, 201, again.text);
    t.true(replayed(again), 'Idempotent-Replayed: true');
    t.is(again.text, first.text, 'the first body, byte for byte');
    t.is(again.headers.location, first.headers.location);
    t.is(again.headers.etag, first.headers.etag);
    // The gateway keeps an answer it replayed: a third retry is answered from there, alike.
    const third = await c.post('/v1/orders', body, { 'idempotency-key': k });
    t.is(third.status, 201, third.text);
    t.true(replayed(third), 'Idempotent-Replayed: true, from the gateway too');
    t.is(third.text, first.text);
    t.is(third.headers.location, first.headers.location);
    t.is(third.headers.etag, first.headers.etag);
    t.is(await countOrders(t, c), 1, 'one order, however many retries');
    t.is((await c.get(`/v1/orders/${id}`)).json.note, 'changed', 'the replay changed nothing');
  });

  test('idempotency: the same key with another body, path or method is 422 idempotency-key-reused and runs nothing', async (t) => {
    const c = await tenant(t, 'idem');
    const k = key();
    const first = await c.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k });
    t.is(first.status, 201, first.text);
    const otherBody = await c.post('/v1/orders', { currency: 'USD' }, { 'idempotency-key': k });
    assertProblem(t, otherBody, 422, 'idempotency-key-reused');
    // The same bytes under another media type are another request (CONTRACT §7's fingerprint).
    const otherType = await c.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k, 'content-type': 'application/json; charset=utf-8' });
    assertProblem(t, otherType, 422, 'idempotency-key-reused');
    // A keyed create lives where its key does, so another create or an action on that order
    // with the same key meets the first use, in either mode.
    const otherPath = await c.post('/v1/products', { name: 'Other', price: 1, currency: 'EUR' }, { 'idempotency-key': k });
    assertProblem(t, otherPath, 422, 'idempotency-key-reused');
    const otherAction = await c.post(`/v1/orders/${first.json.id}/cancel`, undefined, { 'idempotency-key': k });
    assertProblem(t, otherAction, 422, 'idempotency-key-reused');
    t.is((await c.get(`/v1/orders/${first.json.id}`)).json.status, 'pending', 'the cancel did not run');
    t.is(await countOrders(t, c), 1);
    t.is((await c.get('/v1/products')).json.data.length, 0, 'the product was not created');
  });

  test('idempotency: one key on actions over two orders stored apart is 422 for the second, and the second runs nothing', async (t) => {
    // Scope is tenant + key (CONTRACT §7). In cluster mode the two halves of the partitions are
    // served by two actor nodes, each with its own store: the key is taken where it lives first.
    const c = await tenant(t, 'idem');
    const product = await createProduct(t, c, { price: 100 });
    const apart = async (): Promise<[Created, Created]> => {
      const made: Created[] = [];
      while (!(made.some((o) => partitionOf(o.id) < 128) && made.some((o) => partitionOf(o.id) >= 128))) made.push(await createOrder(t, c, { items: [{ productId: product.id, quantity: 1 }] }));
      return [made.find((o) => partitionOf(o.id) < 128)!, made.find((o) => partitionOf(o.id) >= 128)!];
    };
    for (const [first, second] of [await apart(), (await apart()).reverse() as [Created, Created]]) {
      const k = key();
      t.is((await c.post(`/v1/orders/${first.id}/cancel`, undefined, { 'idempotency-key': k })).status, 200);
      assertProblem(t, await c.post(`/v1/orders/${second.id}/cancel`, undefined, { 'idempotency-key': k }), 422, 'idempotency-key-reused');
      assertProblem(t, await c.post(`/v1/orders/${second.id}/items`, { productId: product.id, quantity: 1 }, { 'idempotency-key': k }), 422, 'idempotency-key-reused');
      const untouched = await c.get(second.href);
      t.is(untouched.json.status, 'pending');
      t.is(untouched.headers.etag, second.etag, 'the second order is as it was');
      // The first request's retry still replays; a fresh key acts on the second order.
      t.true(replayed(await c.post(`/v1/orders/${first.id}/cancel`, undefined, { 'idempotency-key': k })));
      t.is((await c.post(`/v1/orders/${second.id}/pay`, undefined, { 'idempotency-key': key() })).status, 200);
      // Refunds of two paid orders under one key: the second is refused and starts nothing.
      const kr = key();
      t.is((await c.post('/v1/refunds', { orderId: second.id, amount: 50 }, { 'idempotency-key': kr })).status, 202);
      const [third] = (await apart()).filter((o) => partitionOf(o.id) < 128 !== partitionOf(second.id) < 128);
      t.is((await c.post(`/v1/orders/${third!.id}/pay`, undefined)).status, 200);
      assertProblem(t, await c.post('/v1/refunds', { orderId: third!.id, amount: 50 }, { 'idempotency-key': kr }), 422, 'idempotency-key-reused');
      t.is((await c.get(`/v1/refunds?orderId=${third!.id}`)).json.data.length, 0, 'no refund was started');
    }
  });

  test('idempotency: a key over 255 characters, empty, or not printable ASCII is 400; the quoted form names the same key', async (t) => {
    const c = await tenant(t, 'idem');
    for (const bad of ['x'.repeat(256), '""', 'tab\there']) {
      const res = await c.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': bad });
      assertProblem(t, res, 400, 'malformed-request');
      t.is(res.json.errors?.[0]?.header, 'Idempotency-Key');
    }
    t.is(await countOrders(t, c), 0, 'nothing was created');
    const long = 'k'.repeat(255);
    const ok = await c.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': long });
    t.is(ok.status, 201, ok.text);
    const quoted = await c.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': `"${long}"` });
    t.is(quoted.status, 201);
    t.true(replayed(quoted), 'an RFC 8941 string names the same key as the bare token');
    t.is(quoted.json.id, ok.json.id);
  });

  test('idempotency: keys are scoped per tenant', async (t) => {
    const a = await tenant(t, 'idem-a');
    const b = await tenant(t, 'idem-b');
    const k = key();
    const ra = await a.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k });
    // Replayed twice, a's answer is kept by the gateway as well as by the owner.
    for (let i = 0; i < 2; i++) t.true(replayed(await a.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k })));
    const rb = await b.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k });
    t.is(ra.status, 201);
    t.is(rb.status, 201);
    t.false(replayed(rb), "another tenant's key is another key");
    t.not(ra.json.id, rb.json.id);
    const rbAgain = await b.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k });
    t.true(replayed(rbAgain));
    t.is(rbAgain.json.id, rb.json.id);
    t.is(await countOrders(t, a), 1);
    t.is(await countOrders(t, b), 1);
  });

  test('idempotency: concurrent identical creates through every gateway make exactly one order', async (t) => {
    const c = await tenant(t, 'idem-race');
    const { callers, close } = callersOn(c, t.context.service.urls);
    try {
      const k = key();
      const body = { currency: 'EUR', note: 'race' };
      const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => callers[i % callers.length]!.post('/v1/orders', body, { 'idempotency-key': k })));
      const created = answers.filter((r) => r.status === 201);
      const inFlight = answers.filter((r) => r.status === 409);
      t.is(created.length + inFlight.length, answers.length, answers.map((r) => `${r.status} ${r.text}`).join('\n'));
      t.is(created.filter((r) => !replayed(r)).length, 1, 'one request ran; every other 201 is a replay');
      t.is(new Set(created.map((r) => r.json.id)).size, 1, 'every 201 names the same order');
      for (const r of inFlight) {
        assertProblem(t, r, 409, 'idempotency-key-in-flight');
        t.regex(r.headers['retry-after'] ?? '', /^\d+$/);
      }
      t.is(await countOrders(t, c), 1, 'exactly one effect');
      // Once the first has finished, a retry through either gateway replays it.
      for (const caller of callers) {
        const late = await caller.post('/v1/orders', body, { 'idempotency-key': k });
        t.is(late.status, 201);
        t.true(replayed(late));
      }
    } finally {
      await close();
    }
  });

  test('idempotency: while a request is queued or running, the same key is 409 with Retry-After and runs nothing', async (t) => {
    const c = await tenant(t, 'idem-busy');
    const product = await createProduct(t, c, { price: 100 });
    const order = await createOrder(t, c);
    const k = key();
    // Pools of their own, so every request below is on the wire at once.
    const { callers, close } = callersOn(c, Array.from({ length: 5 }, () => c.http.baseUrl));
    const [pairClient, ...floodClients] = callers;
    try {
      const add = (via: Caller): Promise<Reply> => via.post(`/v1/orders/${order.id}/items`, { productId: product.id, quantity: 1 }, { 'idempotency-key': k });
      // Writes to one order run one at a time, each flushed to disk before the next. The first of
      // the keyed pair waits behind these holding its key, so the other meets it in flight: in
      // one process at once; over NATS once it has taken the key at its home, a flush later.
      const ahead = floodClients.flatMap((via, j) => Array.from({ length: 30 }, (_, i) => via.patch(order.href, { note: `n${j}-${i}` })));
      const pair = await Promise.all([add(pairClient!), add(pairClient!)]);
      for (const r of await Promise.all(ahead)) t.is(r.status, 200, r.text);
      const ran = pair.filter((r) => r.status === 201);
      const busy = pair.filter((r) => r.status !== 201);
      t.is(ran.length, 1, pair.map((r) => `${r.status} ${r.headers['idempotent-replayed'] ?? ''} ${r.text}`).join('\n'));
      t.false(replayed(ran[0]!), 'the one that ran answers as a first request');
      t.is(busy.length, 1);
      assertProblem(t, busy[0]!, 409, 'idempotency-key-in-flight');
      t.regex(busy[0]!.headers['retry-after'] ?? '', /^[1-9]\d*$/, 'Retry-After in whole seconds');
      t.false(replayed(busy[0]!));
      t.is((await c.get(`/v1/orders/${order.id}/items`)).json.data.length, 1, 'one item: the refused request ran nothing');
      // Its retry, once the first has finished, replays the first's answer.
      const retry = await add(c);
      t.is(retry.status, 201, retry.text);
      t.true(replayed(retry));
      t.is(retry.text, ran[0]!.text);
    } finally {
      await close();
    }
  });

  test('idempotency: a refusal decided by the order is replayed too; a request refused before it ran is not kept', async (t) => {
    const c = await tenant(t, 'idem');
    const order = await createOrder(t, c);
    const k = key();
    // Total 0: paying is refused by the order itself, and that answer is kept under the key.
    const refused = await c.post(`/v1/orders/${order.id}/pay`, undefined, { 'idempotency-key': k });
    assertProblem(t, refused, 409, 'invalid-state');
    t.false(replayed(refused), 'a first answer is never marked as a replay');
    const product = await createProduct(t, c, { price: 100 });
    t.is((await c.post(`/v1/orders/${order.id}/items`, { productId: product.id, quantity: 1 })).status, 201);
    const again = await c.post(`/v1/orders/${order.id}/pay`, undefined, { 'idempotency-key': k });
    assertProblem(t, again, 409, 'invalid-state');
    t.true(replayed(again), 'the first answer, even though paying would now succeed');
    t.is((await c.get(order.href)).json.status, 'pending');

    // A body that fails validation never reached the order: the key stays free.
    const k2 = key();
    const invalid = await c.post('/v1/orders', { currency: 'euro' }, { 'idempotency-key': k2 });
    assertProblem(t, invalid, 422, 'validation-failed');
    const valid = await c.post('/v1/orders', { currency: 'EUR' }, { 'idempotency-key': k2 });
    t.is(valid.status, 201, valid.text);
    t.false(replayed(valid));

    // Nor did items priced against the catalogue and refused (a product in another currency):
    // once the product is fixed, the same request with the same key creates the order.
    const dollars = await createProduct(t, c, { price: 100, currency: 'USD' });
    const k3 = key();
    const body = { currency: 'EUR', items: [{ productId: dollars.id, quantity: 1 }] };
    assertProblem(t, await c.post('/v1/orders', body, { 'idempotency-key': k3 }), 422, 'validation-failed');
    t.is((await c.patch(`/v1/products/${dollars.id}`, { currency: 'EUR' })).status, 200);
    const priced = await c.post('/v1/orders', body, { 'idempotency-key': k3 });
    t.is(priced.status, 201, priced.text);
    t.false(replayed(priced));
  });

  test('idempotency: pay and add-item retries replay the first answer and act once', async (t) => {
    const c = await tenant(t, 'idem');
    const product = await createProduct(t, c, { price: 100 });
    const order = await createOrder(t, c);
    const k = key();
    const add = await c.post(`/v1/orders/${order.id}/items`, { productId: product.id, quantity: 2 }, { 'idempotency-key': k });
    t.is(add.status, 201, add.text);
    const addAgain = await c.post(`/v1/orders/${order.id}/items`, { productId: product.id, quantity: 2 }, { 'idempotency-key': k });
    t.is(addAgain.status, 201);
    t.true(replayed(addAgain));
    t.is(addAgain.headers.location, add.headers.location, 'the first item, not a second one');
    t.is(addAgain.text, add.text);
    const items = await c.get(`/v1/orders/${order.id}/items`);
    t.is(items.json.data.length, 1);

    const kp = key();
    const pay = await c.post(`/v1/orders/${order.id}/pay`, undefined, { 'idempotency-key': kp });
    t.is(pay.status, 200, pay.text);
    const payAgain = await c.post(`/v1/orders/${order.id}/pay`, undefined, { 'idempotency-key': kp });
    t.is(payAgain.status, 200, 'a retried pay is not 409: it replays the success');
    t.true(replayed(payAgain));
    t.is(payAgain.text, pay.text);
    t.is(payAgain.headers.etag, pay.headers.etag);
  });

  test('idempotency: a retry replays even when what the first attempt read has changed since', async (t) => {
    const c = await tenant(t, 'idem');
    const product = await createProduct(t, c, { price: 100 });
    const order = await createOrder(t, c);
    const k = key();
    const add = await c.post(`/v1/orders/${order.id}/items`, { productId: product.id, quantity: 1 }, { 'idempotency-key': k });
    t.is(add.status, 201, add.text);
    const kc = key();
    const create = await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: product.id, quantity: 1 }] }, { 'idempotency-key': kc });
    t.is(create.status, 201, create.text);
    // The product and the order the first attempts read are gone now.
    t.is((await c.delete(`/v1/products/${product.id}`)).status, 204);
    t.is((await c.delete(order.href)).status, 204);
    const addAgain = await c.post(`/v1/orders/${order.id}/items`, { productId: product.id, quantity: 1 }, { 'idempotency-key': k });
    t.is(addAgain.status, 201, addAgain.text);
    t.true(replayed(addAgain));
    t.is(addAgain.text, add.text);
    const createAgain = await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: product.id, quantity: 1 }] }, { 'idempotency-key': kc });
    t.is(createAgain.status, 201, createAgain.text);
    t.true(replayed(createAgain));
    t.is(createAgain.headers.location, create.headers.location);
  });

  // ---------------- POST /orders/batch ----------------

  test('batch: partial mode answers 207 with one result per operation; a failed operation changes nothing', async (t) => {
    const c = await tenant(t, 'batch');
    const a = await createOrder(t, c, { note: 'a' });
    const b = await createOrder(t, c, { note: 'b' });
    const res = await c.post('/v1/orders/batch', {
      operations: [
        { method: 'POST', body: { currency: 'EUR', note: 'new' } },
        { method: 'PATCH', id: a.id, ifMatch: a.etag, body: { note: 'a2' } },
        { method: 'PATCH', id: b.id, ifMatch: '"999-stale"', body: { note: 'b2' } },
        { method: 'POST', body: { currency: 'euro' } },
        { method: 'DELETE', id: b.id },
        { method: 'DELETE', id: 'ord_missing' },
      ],
    });
    t.is(res.status, 207, res.text);
    const results = res.json.results as Record<string, unknown>[];
    t.deepEqual(results.map((r) => [r.index, r.status]), [[0, 201], [1, 200], [2, 412], [3, 422], [4, 204], [5, 404]]);
    const created = results[0]!;
    t.regex(String(created.id), /^ord_/);
    const got = await c.get(`/v1/orders/${created.id}`);
    t.is(got.status, 200);
    t.is(got.headers.etag, String(created.etag), 'the result carries the ETag a GET answers');
    t.is((await c.get(a.href)).json.note, 'a2');
    t.is(results[1]!.etag, (await c.get(a.href)).headers.etag);
    t.is((results[2]!.problem as Record<string, unknown>).type, '/problems/precondition-failed');
    const invalid = results[3]!.problem as { type: string; errors: { pointer: string }[] };
    t.is(invalid.type, '/problems/validation-failed');
    t.is(invalid.errors[0]!.pointer, '/operations/3/body/currency');
    t.is((await c.get(b.href)).status, 404, 'the delete after the refused patch went through');
    t.is(await countOrders(t, c), 2);
  });

  test('batch: atomic mode is 200 with every result, or one problem naming every failed index with nothing written', async (t) => {
    const c = await tenant(t, 'batch');
    const ok = await c.post('/v1/orders/batch', { atomic: true, operations: [{ method: 'POST', body: { currency: 'EUR', note: 'x' } }, { method: 'POST', body: { currency: 'USD' } }] });
    t.is(ok.status, 200, ok.text);
    const [x, y] = ok.json.results as { index: number; status: number; id: string; etag: string }[];
    t.is(x!.status, 201);
    t.is(y!.status, 201);
    t.is(await countOrders(t, c), 2);

    // Orders created together live together, so one atomic batch can change them both.
    const together = await c.post('/v1/orders/batch', {
      atomic: true,
      operations: [
        { method: 'PATCH', id: x!.id, ifMatch: x!.etag, body: { note: 'x2' } },
        { method: 'DELETE', id: y!.id, ifMatch: y!.etag },
        { method: 'POST', body: { currency: 'EUR', note: 'z' } },
      ],
    });
    t.is(together.status, 200, together.text);
    t.is((await c.get(`/v1/orders/${y!.id}`)).status, 404);

    const before = (await c.get(`/v1/orders/${x!.id}`)).text;
    const failed = await c.post('/v1/orders/batch', {
      atomic: true,
      operations: [
        { method: 'PATCH', id: x!.id, body: { note: 'must not stick' } },
        { method: 'POST', body: { currency: 'EUR', note: 'must not exist' } },
        { method: 'DELETE', id: y!.id },
        { method: 'PATCH', id: x!.id, ifMatch: '"1-stale"', body: { note: 'stale' } },
      ],
    });
    assertProblem(t, failed, 404, 'not-found');
    const errors = failed.json.errors as { index: number; status: number; type: string; detail: string }[];
    t.deepEqual(errors.map((e) => [e.index, e.status, e.type]), [
      [2, 404, '/problems/not-found'],
      [3, 412, '/problems/precondition-failed'],
    ]);
    t.is((await c.get(`/v1/orders/${x!.id}`)).text, before, 'the first operation was not applied');
    t.is(await countOrders(t, c), 2, 'the create was not applied');
  });

  test('batch: more than MAX_BATCH operations is 413 and nothing is written; a bad envelope is 422', async (t) => {
    const c = await tenant(t, 'batch');
    const operations = Array.from({ length: 101 }, () => ({ method: 'POST', body: { currency: 'EUR' } }));
    const res = await c.post('/v1/orders/batch', { operations });
    assertProblem(t, res, 413, 'payload-too-large');
    const atomic = await c.post('/v1/orders/batch', { atomic: true, operations });
    assertProblem(t, atomic, 413, 'payload-too-large');
    t.is(await countOrders(t, c), 0);
    const junk = await c.post('/v1/orders/batch', { operations: Array.from({ length: 5000 }, () => 0) });
    assertProblem(t, junk, 413, 'payload-too-large');
    t.true(junk.bytes.length < 2048, 'counted before the schema lists thousands of errors');
    assertProblem(t, await c.post('/v1/orders/batch', { operations: [] }), 422, 'validation-failed', { pointer: '/operations' });
    assertProblem(t, await c.post('/v1/orders/batch', { ops: [] }), 422, 'validation-failed');
    const full = await c.post('/v1/orders/batch', { operations: operations.slice(0, 100) });
    t.is(full.status, 207, 'exactly MAX_BATCH is fine');
    t.is(await countOrders(t, c), 100);
  });

  test('batch: an atomic batch over orders stored apart is refused whole', async (t) => {
    const c = await tenant(t, 'batch');
    // Orders created one by one land in partitions of their own; find two that differ.
    const orders = await Promise.all(Array.from({ length: 4 }, () => createOrder(t, c)));
    const parts = new Set(orders.map((o) => o.id.slice(13, 15)));
    t.true(parts.size > 1, 'four random partitions are not all equal');
    const res = await c.post('/v1/orders/batch', { atomic: true, operations: orders.map((o) => ({ method: 'PATCH', id: o.id, body: { note: 'together' } })) });
    assertProblem(t, res, 422, 'validation-failed');
    t.true((res.json.errors as { index: number }[]).length > 0);
    for (const o of orders) t.is((await c.get(o.href)).json.note, null, 'nothing was applied');
    // The same operations without atomic apply one by one.
    const partial = await c.post('/v1/orders/batch', { operations: orders.map((o) => ({ method: 'PATCH', id: o.id, body: { note: 'each' } })) });
    t.is(partial.status, 207);
    t.true((partial.json.results as { status: number }[]).every((r) => r.status === 200));
  });

  test("batch: another tenant's orders are 404 in both modes and stay exactly as they were", async (t) => {
    const owner = await tenant(t, 'batch-owner');
    const other = await tenant(t, 'batch-other');
    const a = await createOrder(t, owner, { note: 'a' });
    const b = await createOrder(t, owner, { note: 'b' });
    const before = [(await owner.get(a.href)).text, (await owner.get(b.href)).text];
    // A failed operation on an order the caller cannot see must not write it back as absent.
    const partial = await other.post('/v1/orders/batch', {
      operations: [
        { method: 'PATCH', id: a.id, body: { note: 'taken' } },
        { method: 'DELETE', id: b.id },
        { method: 'PATCH', id: b.id, ifMatch: b.etag, body: { note: 'taken' } },
        { method: 'POST', body: { currency: 'EUR' } },
      ],
    });
    t.is(partial.status, 207, partial.text);
    t.deepEqual((partial.json.results as { status: number }[]).map((r) => r.status), [404, 404, 404, 201]);
    assertProblem(t, await other.post('/v1/orders/batch', { atomic: true, operations: [{ method: 'DELETE', id: a.id }] }), 404, 'not-found');
    t.deepEqual([(await owner.get(a.href)).text, (await owner.get(b.href)).text], before, "the owner's orders are untouched");
    t.is(await countOrders(t, owner), 2);
  });

  test('batch: a keyed retry answers as the first attempt did and runs nothing twice, even when a product came or went between them', async (t) => {
    const c = await tenant(t, 'batch');
    const gone = await createProduct(t, c, { price: 100 });
    const a = await createOrder(t, c);
    const b = await createOrder(t, c);
    const k1 = key();
    const body1 = { operations: [{ method: 'POST', body: { currency: 'EUR', items: [{ productId: gone.id, quantity: 1 }] } }, { method: 'PATCH', id: a.id, body: { note: 'once' } }] };
    const first = await c.post('/v1/orders/batch', body1, { 'idempotency-key': k1 });
    t.deepEqual((first.json.results as { status: number }[]).map((r) => r.status), [201, 200], first.text);
    t.is((await c.delete(`/v1/products/${gone.id}`)).status, 204);
    const retry = await c.post('/v1/orders/batch', body1, { 'idempotency-key': k1 });
    t.deepEqual(retry.json, first.json, 'the first answer, though the product is gone now');
    t.is((await c.get(a.href)).headers.etag, (first.json.results as { etag: string }[])[1]!.etag, 'the patch ran once');

    // The other way round: the first attempt cannot price the item (the product is in USD, the
    // order in EUR); before the retry the product moves to EUR, so the item could be priced now.
    const dollars = await createProduct(t, c, { price: 100, currency: 'USD' });
    const k2 = key();
    const body2 = { operations: [{ method: 'POST', body: { currency: 'EUR', items: [{ productId: dollars.id, quantity: 1 }] } }, { method: 'PATCH', id: b.id, body: { note: 'once' } }] };
    const first2 = await c.post('/v1/orders/batch', body2, { 'idempotency-key': k2 });
    t.deepEqual((first2.json.results as { status: number }[]).map((r) => r.status), [422, 200], first2.text);
    t.is((await c.patch(`/v1/products/${dollars.id}`, { currency: 'EUR' })).status, 200);
    const count = await countOrders(t, c);
    const retry2 = await c.post('/v1/orders/batch', body2, { 'idempotency-key': k2 });
    t.deepEqual(retry2.json, first2.json);
    t.is(await countOrders(t, c), count, 'the create refused the first time did not run on the retry');

    // A key taken by a batch, even one that only patched orders elsewhere, is taken for good.
    const k3 = key();
    const patches = await c.post('/v1/orders/batch', { operations: [a, b].map((o) => ({ method: 'PATCH', id: o.id, body: { note: 'k3' } })) }, { 'idempotency-key': k3 });
    t.is(patches.status, 207);
    assertProblem(t, await c.post('/v1/orders', { currency: 'USD' }, { 'idempotency-key': k3 }), 422, 'idempotency-key-reused');
  });

  test('batch: a failure the order reports points into the batch document', async (t) => {
    const c = await tenant(t, 'batch');
    const metadata = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`k${i}`, 'v']));
    const order = await createOrder(t, c, { metadata });
    const more = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`m${i}`, 'v']));
    const res = await c.post('/v1/orders/batch', { operations: [{ method: 'PATCH', id: order.id, body: { metadata: more } }] });
    t.is(res.status, 207);
    const problem = (res.json.results as { problem: { errors: { pointer: string }[] } }[])[0]!.problem;
    t.is(problem.errors[0]!.pointer, '/operations/0/body/metadata');
  });

  test('batch: a retried batch with Idempotency-Key replays its results and writes nothing more', async (t) => {
    const c = await tenant(t, 'batch');
    const a = await createOrder(t, c);
    const k = key();
    const body = {
      operations: [
        { method: 'POST', body: { currency: 'EUR', note: 'one' } },
        { method: 'POST', body: { currency: 'EUR', note: 'two' } },
        { method: 'PATCH', id: a.id, body: { note: 'patched once' } },
      ],
    };
    const first = await c.post('/v1/orders/batch', body, { 'idempotency-key': k });
    t.is(first.status, 207, first.text);
    const again = await c.post('/v1/orders/batch', body, { 'idempotency-key': k });
    t.is(again.status, 207);
    t.true(replayed(again));
    t.deepEqual(again.json, first.json, 'the same ids and tags');
    t.is(await countOrders(t, c), 3, 'two creates, once');
    const patchResult = (first.json.results as { etag: string }[])[2]!;
    t.is((await c.get(a.href)).headers.etag, patchResult.etag, 'the patch ran once: the order is at the version it answered');
    const atomicBody = { atomic: true, operations: [{ method: 'POST', body: { currency: 'EUR' } }] };
    const ka = key();
    const at1 = await c.post('/v1/orders/batch', atomicBody, { 'idempotency-key': ka });
    const at2 = await c.post('/v1/orders/batch', atomicBody, { 'idempotency-key': ka });
    t.is(at1.status, 200);
    t.true(replayed(at2));
    t.deepEqual(at2.json, at1.json);
    t.is(await countOrders(t, c), 4);
  });

  test('batch: an Idempotency-Key reused for another batch is 422 in both modes and writes nothing; concurrent duplicates run once', async (t) => {
    const c = await tenant(t, 'batchkey');
    const a = await createOrder(t, c);
    const b = await createOrder(t, c);
    for (const atomic of [false, true]) {
      const k = key();
      const first = await c.post('/v1/orders/batch', { atomic, operations: [{ method: 'PATCH', id: a.id, body: { note: `a ${atomic}` } }] }, { 'idempotency-key': k });
      t.is(first.status, atomic ? 200 : 207, first.text);
      const before = await c.get(b.href);
      const reused = await c.post('/v1/orders/batch', { atomic, operations: [{ method: 'PATCH', id: b.id, body: { note: 'must not happen' } }] }, { 'idempotency-key': k });
      assertProblem(t, reused, 422, 'idempotency-key-reused');
      const after = await c.get(b.href);
      t.is(after.headers.etag, before.headers.etag, `atomic ${atomic}: the other order is untouched`);
      t.is(after.json.note, before.json.note);
    }
    // Identical keyed batches at once: one runs; each other is its replay, or 409 in flight with
    // Retry-After as a whole (never a 207 of per-item 409s).
    const k = key();
    const body = { operations: [{ method: 'POST', body: { currency: 'EUR', note: 'once' } }, { method: 'PATCH', id: a.id, body: { note: 'dup' } }] };
    const answers = await Promise.all(Array.from({ length: 4 }, () => c.post('/v1/orders/batch', body, { 'idempotency-key': k })));
    const ran = answers.filter((r) => r.status === 207 && !replayed(r));
    t.is(ran.length, 1, answers.map((r) => `${r.status} ${r.text}`).join('\n'));
    for (const r of answers) {
      if (r.status === 409) {
        assertProblem(t, r, 409, 'idempotency-key-in-flight');
        t.truthy(r.headers['retry-after']);
      } else {
        t.is(r.status, 207);
        t.deepEqual(r.json, ran[0]!.json);
      }
    }
    const notes = ((await c.get('/v1/orders?limit=100')).json.data as { note: string | null }[]).filter((o) => o.note === 'once');
    t.is(notes.length, 1, 'one create');
  });

  test('batch: under /v2 each result carries the ETag a GET of the order answers there', async (t) => {
    const c = await tenant(t, 'batchv2');
    const a = await createOrder(t, c);
    const res = await c.post('/v2/orders/batch', { operations: [{ method: 'PATCH', id: a.id, body: { note: 'v2' } }] });
    t.is(res.status, 207, res.text);
    const tag = (res.json.results as { etag: string }[])[0]!.etag;
    const got = await c.get(`/v2/orders/${a.id}`, { 'accept-encoding': 'identity' });
    t.is(got.headers.etag, tag);
    t.is((await c.get(`/v2/orders/${a.id}`, { 'if-none-match': tag, 'accept-encoding': 'identity' })).status, 304);
    const v1 = await c.post('/v1/orders/batch', { operations: [{ method: 'PATCH', id: a.id, body: { note: 'v1' } }] });
    t.is((await c.get(a.href, { 'accept-encoding': 'identity' })).headers.etag, (v1.json.results as { etag: string }[])[0]!.etag);
  });
}
