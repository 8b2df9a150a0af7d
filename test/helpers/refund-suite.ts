// Refunds through asynchronous operations (CONTRACT §6, §8): 202 with the operation, polling
// with Retry-After, the result link, partial and full refunds, the checks made at the start, and
// Idempotency-Key on the start. Registered beside the order suite, so it runs in embedded mode
// and against two gateways over NATS in cluster mode, with the default processing time.

import { setTimeout as delay } from 'node:timers/promises';
import type { TestFn } from 'ava';
import type { Caller, Reply } from './client.js';
import { assertProblem, createOrder, createProduct, tenant, type SuiteContext, type T } from './order-suite.js';

const POLL_LIMIT_MS = 20_000;

/** A paid order of `quantity` × 1000 EUR minor units. */
export async function paidOrder(t: T, c: Caller, quantity = 1): Promise<{ id: string; total: number }> {
  const product = await createProduct(t, c, { price: 1000 });
  const order = await createOrder(t, c, { items: [{ productId: product.id, quantity }] });
  const paid = await c.post(`/v1/orders/${order.id}/pay`);
  t.is(paid.status, 200, paid.text);
  return { id: order.id, total: paid.json.total as number };
}

/** Polls an operation, honouring Retry-After as a client would (at most 1 s here), until it ends. */
export async function settle(t: T, c: Caller, href: string): Promise<Reply> {
  const deadline = Date.now() + POLL_LIMIT_MS;
  for (;;) {
    const res = await c.get(href);
    t.is(res.status, 200, res.text);
    const status = res.json.status as string;
    if (status === 'succeeded' || status === 'failed') {
      t.is(res.headers['retry-after'], undefined, 'a finished operation says no more to wait');
      return res;
    }
    t.regex(res.headers['retry-after'] ?? '', /^\d+$/, 'Retry-After while the operation runs');
    if (Date.now() > deadline) throw new Error(`operation ${href} still ${status} after ${POLL_LIMIT_MS} ms`);
    await delay(Math.min(1000, Number(res.headers['retry-after']) * 1000) / 4);
  }
}

export function registerRefundSuite(test: TestFn<SuiteContext>): void {
  test('refunds: 202 with the operation; it runs to succeeded with a result link; a full refund makes the order refunded', async (t) => {
    const c = await tenant(t, 'rf');
    const order = await paidOrder(t, c, 3);
    const started = await c.post('/v1/refunds', { orderId: order.id, amount: 1000, reason: 'damaged' });
    t.is(started.status, 202, started.text);
    const op = started.json;
    t.regex(op.id, /^op_/);
    t.is(started.headers.location, `/v1/operations/${op.id}`);
    t.regex(started.headers['retry-after'] ?? '', /^[1-9]\d*$/);
    t.is(started.headers['cache-control'], 'no-store');
    t.like(op, { type: 'refund', status: 'pending', _links: { self: { href: `/v1/operations/${op.id}` }, order: { href: `/v1/orders/${order.id}` } } });
    t.is(op._links.result, undefined, 'no result before success');

    const done = await settle(t, c, started.headers.location!);
    t.is(done.json.status, 'succeeded', done.text);
    t.truthy(done.headers.etag);
    t.is((await c.get(started.headers.location!, { 'if-none-match': done.headers.etag! })).status, 304);
    const refund = await c.get(done.json._links.result.href);
    t.is(refund.status, 200, refund.text);
    t.like(refund.json, { orderId: order.id, amount: 1000, currency: 'EUR', reason: 'damaged', status: 'succeeded', failureReason: null });
    t.is(refund.json._links.operation.href, `/v1/operations/${op.id}`);
    t.is((await c.get(`/v1/orders/${order.id}`)).json.status, 'paid', 'a partial refund leaves the order paid');

    // No amount: everything that is left.
    const rest = await c.post('/v1/refunds', { orderId: order.id });
    t.is(rest.status, 202, rest.text);
    t.is((await settle(t, c, rest.headers.location!)).json.status, 'succeeded');
    const after = await c.get(`/v1/orders/${order.id}`);
    t.is(after.json.status, 'refunded');
    t.is(after.json._links.refunds.href, `/v1/refunds?orderId=${order.id}`);
    const list = await c.get(`/v1/refunds?orderId=${order.id}`);
    t.is(list.status, 200, list.text);
    t.deepEqual(
      list.json.data.map((r: { amount: number }) => r.amount),
      [order.total - 1000, 1000],
      'newest first, amounts summing to the total',
    );
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: 1 }), 409, 'invalid-state');
  });

  test('refunds: the start is checked at once: unknown order, unpaid order, too much, bad bodies; nothing is written', async (t) => {
    const c = await tenant(t, 'rf-check');
    const other = await tenant(t, 'rf-check');
    const order = await paidOrder(t, c, 2);
    const pending = await createOrder(t, c);
    assertProblem(t, await c.post('/v1/refunds', { orderId: 'ord_000000000000000000000a' }), 422, 'validation-failed', { pointer: '/orderId' });
    assertProblem(t, await c.post('/v1/refunds', { orderId: 'ord_000000000ff00000000000' }), 422, 'validation-failed', { pointer: '/orderId' });
    assertProblem(t, await other.post('/v1/refunds', { orderId: order.id }), 422, 'validation-failed', { pointer: '/orderId' });
    assertProblem(t, await c.post('/v1/refunds', { orderId: pending.id }), 409, 'invalid-state');
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: order.total + 1 }), 422, 'validation-failed', { pointer: '/amount' });
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: 0 }), 422, 'validation-failed', { pointer: '/amount' });
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: 1.5 }), 422, 'validation-failed', { pointer: '/amount' });
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, status: 'succeeded' }), 422, 'validation-failed', { pointer: '/status' });
    assertProblem(t, await c.post('/v1/refunds', {}), 422, 'validation-failed');
    const orderNow = await c.get(`/v1/orders/${order.id}`);
    t.is((await c.get(`/v1/refunds?orderId=${order.id}`)).json.data.length, 0, 'no refund was written');

    // Two refunds side by side cannot together exceed the order: the first holds its amount.
    const first = await c.post('/v1/refunds', { orderId: order.id, amount: order.total - 500 });
    t.is(first.status, 202, first.text);
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: 501 }), 422, 'validation-failed', { pointer: '/amount', detail: /at most 500/ });
    const second = await c.post('/v1/refunds', { orderId: order.id });
    t.is(second.status, 202, 'no amount: the 500 that is left');
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id }), 409, 'invalid-state');
    t.not((await c.get(`/v1/orders/${order.id}`)).headers.etag, orderNow.headers.etag, 'the hold is a change to the order');
    // The order's own members may change while its refunds run; the money stays with the refunds.
    const patched = await c.patch(`/v1/orders/${order.id}`, { note: 'refunding' });
    t.is(patched.status, 200, patched.text);
    const polled = await c.get(first.headers.location!);
    t.is(polled.headers['cache-control'], 'private, no-cache');
    await settle(t, c, first.headers.location!);
    await settle(t, c, second.headers.location!);
    const after = await c.get(`/v1/orders/${order.id}`);
    t.like(after.json, { status: 'refunded', note: 'refunding' });
    const refundHref = `/v1/refunds/${(await c.get(`/v1/refunds?orderId=${order.id}`)).json.data[0].id}`;
    assertProblem(t, await other.get(refundHref), 404, 'not-found');
    t.deepEqual((await other.get(`/v1/refunds?orderId=${order.id}`)).json.data, [], 'another tenant lists none of them');

    assertProblem(t, await c.get('/v1/operations/op_nope'), 404, 'not-found');
    assertProblem(t, await other.get(first.headers.location!), 404, 'not-found');
    assertProblem(t, await c.get('/v1/refunds?orderId=nope'), 400, 'invalid-parameter', { parameter: 'orderId' });
    const readOnly = await tenant(t, 'rf-check', 'orders:read refunds:read');
    assertProblem(t, await readOnly.post('/v1/refunds', { orderId: order.id }), 403, 'forbidden');
  });

  test('refunds: any part of the largest order can be refunded, in both versions', async (t) => {
    const c = await tenant(t, 'rf-big');
    const product = await createProduct(t, c, { price: 1000 });
    // 100 lines of 10,000 at 1e9: the largest total an order can have, 1e15 minor units.
    const items = Array.from({ length: 100 }, () => ({ productId: product.id, quantity: 10_000, unitPrice: 1_000_000_000 }));
    const order = await createOrder(t, c, { items });
    t.is(order.body.total, 1e15);
    t.is((await c.post(`/v1/orders/${order.id}/pay`)).status, 200);
    const part = await c.post('/v1/refunds', { orderId: order.id, amount: 5e14 });
    t.is(part.status, 202, part.text);
    const v2 = await c.post('/v2/refunds', { orderId: order.id, amount: { amount: '4000000000000.00', currency: 'EUR' } });
    t.is(v2.status, 202, v2.text);
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: 1e15 + 1 }), 422, 'validation-failed', { pointer: '/amount' });
    // Without decimals, 1e15 minor units are 16 digits of a v2 amount.
    const yen = await createOrder(t, c, { currency: 'JPY', items });
    t.is((await c.post(`/v1/orders/${yen.id}/pay`)).status, 200);
    const whole = await c.post('/v2/refunds', { orderId: yen.id, amount: { amount: '1000000000000000', currency: 'JPY' } });
    t.is(whole.status, 202, whole.text);
  });

  test('refunds: an Idempotency-Key on the start answers the same operation and starts no second job', async (t) => {
    const c = await tenant(t, 'rf-idem');
    const order = await paidOrder(t, c, 5);
    const key = { 'idempotency-key': `refund-${order.id}` };
    const body = { orderId: order.id, amount: 700 };
    const [a, b] = await Promise.all([c.post('/v1/refunds', body, key), c.post('/v1/refunds', body, key)]);
    const firsts = [a, b].filter((r) => r.status === 202);
    t.true(firsts.length >= 1, `${a.status} ${b.status}`);
    for (const r of [a, b]) if (r.status !== 202) assertProblem(t, r, 409, 'idempotency-key-in-flight');
    const again = await c.post('/v1/refunds', body, key);
    t.is(again.status, 202, again.text);
    t.is(again.headers['idempotent-replayed'], 'true');
    t.is(again.json.id, firsts[0]!.json.id, 'the same operation');
    t.is(again.headers.location, firsts[0]!.headers.location);
    await settle(t, c, again.headers.location!);
    const list = await c.get(`/v1/refunds?orderId=${order.id}`);
    t.is(list.json.data.length, 1, 'one refund for one key');
    assertProblem(t, await c.post('/v1/refunds', { ...body, amount: 701 }, key), 422, 'idempotency-key-reused');
  });

  test('refunds in v2: the amount is a money object, read and written; the operation and its links stay in v2', async (t) => {
    const c = await tenant(t, 'rf-v2');
    const order = await paidOrder(t, c, 2);
    assertProblem(t, await c.post('/v2/refunds', { orderId: order.id, amount: { amount: '5.00', currency: 'USD' } }), 422, 'validation-failed', { pointer: '/amount/currency' });
    assertProblem(t, await c.post('/v2/refunds', { orderId: order.id, amount: { amount: '5.001', currency: 'EUR' } }), 422, 'validation-failed', { pointer: '/amount/amount' });
    assertProblem(t, await c.post('/v2/refunds', { orderId: order.id, amount: 500 }), 422, 'validation-failed', { pointer: '/amount' });
    // Answered in v2's terms: major units, at the money object's amount.
    assertProblem(t, await c.post('/v2/refunds', { orderId: order.id, amount: { amount: '0.00', currency: 'EUR' } }), 422, 'validation-failed', { pointer: '/amount/amount', detail: /^must be at least 0\.01$/ });
    assertProblem(t, await c.post('/v2/refunds', { orderId: order.id, amount: { amount: '25.00', currency: 'EUR' } }), 422, 'validation-failed', { pointer: '/amount/amount', detail: /^must be at most 20\.00$/ });
    assertProblem(t, await c.post('/v1/refunds', { orderId: order.id, amount: 2500 }), 422, 'validation-failed', { pointer: '/amount', detail: /^must be at most 2000$/ });
    const started = await c.post('/v2/refunds', { orderId: order.id, amount: { amount: '5.50', currency: 'EUR' } });
    t.is(started.status, 202, started.text);
    t.regex(started.headers.location ?? '', /^\/v2\/operations\/op_/);
    t.is(started.json._links.self.href, started.headers.location);
    const done = await settle(t, c, started.headers.location!);
    t.regex(done.json._links.result.href, /^\/v2\/refunds\/ref_/);
    const v2 = await c.get(done.json._links.result.href);
    t.deepEqual(v2.json.amount, { amount: '5.50', currency: 'EUR' });
    t.false('currency' in v2.json, 'no top-level currency in v2');
    t.is(v2.json._links.order.href, `/v2/orders/${order.id}`);
    const v1 = await c.get(done.json._links.result.href.replace('/v2/', '/v1/'));
    t.like(v1.json, { amount: 550, currency: 'EUR' });
    t.not(v1.headers.etag, v2.headers.etag, 'the ETag differs per version');
    const list = await c.get(`/v2/refunds?orderId=${order.id}`);
    t.deepEqual(list.json.data[0].amount, { amount: '5.50', currency: 'EUR' });
    assertProblem(t, await c.get(`/v2/refunds?orderId=${order.id}&fields=currency`), 400, 'invalid-parameter', { parameter: 'fields' });
  });
}
