// Webhook endpoints and deliveries end to end (issue 5, CONTRACT §10): real receivers on
// 127.0.0.1, signatures checked with the `stripe` and `standardwebhooks` packages and with our
// own verifyWebhook, the type filter, rotation, retries after a 500 and a refused connection,
// 410 disabling, a receiver down for a while, and the delivery log.

import anyTest, { type TestFn } from 'ava';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { verifyWebhook, WebhookVerificationError } from '../common/webhook-signature.js';
import type { Caller } from './helpers/client.js';
import { startReceiver, startWebhookService, until, WEBHOOK_SCOPES, type Receiver, type WebhookService } from './helpers/webhook-kit.js';

const test = anyTest as TestFn<WebhookService>;
const stripe = new Stripe('sk_test_not_used');

test.before(async (t) => {
  t.context = await startWebhookService({ WEBHOOK_RETRY_SCHEDULE: '1,1,1' });
});

test.after.always(async (t) => {
  await t.context?.close();
});

async function setup(t: { context: WebhookService }, tenant: string, eventTypes: string[] = ['*']): Promise<{ c: Caller; r: Receiver; endpoint: { id: string; signingSecret: string } }> {
  const c = await t.context.api.as(tenant, WEBHOOK_SCOPES);
  const r = await startReceiver();
  const created = await c.post('/v1/webhook-endpoints', { endpointUrl: r.url, eventTypes });
  if (created.status !== 201) throw new Error(`create answered ${created.status}: ${created.text}`);
  return { c, r, endpoint: created.json };
}

function headerString(h: string | string[] | undefined): string {
  return Array.isArray(h) ? h.join(',') : (h ?? '');
}

test('endpoints: create shows the secret once, every answer is no-store, list/read/patch/delete', async (t) => {
  const c = await t.context.api.as('wh-crud', WEBHOOK_SCOPES);
  const created = await c.post('/v1/webhook-endpoints', { endpointUrl: 'http://127.0.0.1:9/hook', eventTypes: ['order.created'] });
  t.is(created.status, 201);
  t.is(created.headers['cache-control'], 'no-store');
  t.regex(created.json.signingSecret, /^whsec_[A-Za-z0-9+/]{43}=$/);
  t.is(Buffer.from((created.json.signingSecret as string).slice(6), 'base64').length, 32);
  t.is(created.json.status, 'enabled');
  t.is(created.json.apiVersion, 'v1');
  t.is(created.headers.location, `/v1/webhook-endpoints/${created.json.id as string}`);
  const path = created.headers.location!;

  const read = await c.get(path);
  t.is(read.status, 200);
  t.is(read.headers['cache-control'], 'no-store');
  t.false('signingSecret' in read.json);
  t.false(read.text.includes(created.json.signingSecret as string));

  const list = await c.get('/v1/webhook-endpoints');
  t.is(list.status, 200);
  t.is(list.headers['cache-control'], 'no-store');
  t.is(list.json.data.length, 1);
  t.false(list.text.includes('whsec_'));

  const patched = await c.patch(path, { eventTypes: ['order.paid', 'order.created'], status: 'disabled' });
  t.is(patched.status, 200);
  t.deepEqual(patched.json.eventTypes, ['order.paid', 'order.created']);
  t.is(patched.json.status, 'disabled');
  t.is(patched.json.disabledReason, 'manual');
  t.is((await c.patch(path, { eventTypes: ['no.such'] })).status, 422);
  t.is((await c.patch(path, { signingSecret: 'whsec_x' })).status, 422);

  const other = await t.context.api.as('wh-crud-other', WEBHOOK_SCOPES);
  t.is((await other.get(path)).status, 404);
  t.is((await (await t.context.api.as('wh-crud', 'webhooks:read')).post('/v1/webhook-endpoints', { endpointUrl: 'http://127.0.0.1:9/', eventTypes: ['*'] })).status, 403);

  const gone = await c.delete(path);
  t.is(gone.status, 204);
  t.is((await c.get(path)).status, 404);
});

test('an endpoint URL with spaces is refused (422), on create and on PATCH, and nothing is stored', async (t) => {
  const c = await t.context.api.as('wh-spaces', WEBHOOK_SCOPES);
  for (const endpointUrl of [' http://127.0.0.1:9/hook ', 'http://127.0.0.1:9/hook\n', 'http://127.0.0.1:9/a hook']) {
    const res = await c.post('/v1/webhook-endpoints', { endpointUrl, eventTypes: ['*'] });
    t.is(res.status, 422, JSON.stringify(endpointUrl));
    t.is(res.json.errors[0].pointer, '/endpointUrl');
  }
  t.deepEqual((await c.get('/v1/webhook-endpoints')).json.data, []);
  const created = await c.post('/v1/webhook-endpoints', { endpointUrl: 'http://127.0.0.1:9/hook', eventTypes: ['*'] });
  const path = created.headers.location!;
  t.is((await c.patch(path, { endpointUrl: ' http://127.0.0.1:9/other' })).status, 422);
  t.is((await c.get(path)).json.endpointUrl, 'http://127.0.0.1:9/hook');
});

test('a delivery verifies with stripe, standardwebhooks and verifyWebhook, and carries the event', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-verify');
  try {
    const order = await c.post('/v1/orders', { currency: 'EUR', note: 'signed' });
    t.is(order.status, 201);
    await until('a delivery', () => r.got.length >= 1);
    const got = r.got[0]!;
    t.is(got.headers['content-type'], 'application/json');
    const eventId = got.json.id as string;
    t.regex(eventId, /^evt_/);
    t.is(got.headers['service-event-id'], eventId);
    t.is(got.headers['webhook-id'], eventId);
    t.is(got.json.type, 'order.created');
    t.is(got.json.apiVersion, 'v1');
    t.is(got.json.data.id, order.json.id);
    t.is(got.json.data.note, 'signed');

    const sig = headerString(got.headers['service-signature']);
    t.regex(sig, /^t=\d+,v1=[0-9a-f]{64}$/);
    const viaStripe = stripe.webhooks.constructEvent(got.raw, sig, endpoint.signingSecret) as unknown as { id: string };
    t.is(viaStripe.id, eventId);

    const wh = new Webhook(endpoint.signingSecret);
    const std = wh.verify(got.raw.toString('utf8'), {
      'webhook-id': headerString(got.headers['webhook-id']),
      'webhook-timestamp': headerString(got.headers['webhook-timestamp']),
      'webhook-signature': headerString(got.headers['webhook-signature']),
    }) as { id: string };
    t.is(std.id, eventId);

    t.is(verifyWebhook(got.raw, got.headers, endpoint.signingSecret).id, eventId);
    t.throws(() => verifyWebhook(got.raw, got.headers, 'whsec_' + Buffer.alloc(32).toString('base64')), { instanceOf: WebhookVerificationError });
    t.throws(() => verifyWebhook(Buffer.concat([got.raw, Buffer.from(' ')]), got.headers, endpoint.signingSecret), { instanceOf: WebhookVerificationError });
    // A replay outside the window is refused.
    t.throws(() => verifyWebhook(got.raw, got.headers, endpoint.signingSecret, { now: Math.floor(Date.now() / 1000) + 301 }), { message: /tolerance/ });
    // So is one stamped ahead of the clock by as much (a receiver whose clock lags, or a forgery).
    const stamped = Number(headerString(got.headers['webhook-timestamp']));
    t.throws(() => verifyWebhook(got.raw, got.headers, endpoint.signingSecret, { now: stamped - 301 }), { message: /tolerance/ });
    t.is(verifyWebhook(got.raw, got.headers, endpoint.signingSecret, { now: stamped - 299 }).id, eventId);

    // The event as the API serves it is the same event.
    const ev = await c.get(`/v1/events/${eventId}`);
    t.deepEqual(ev.json.data, got.json.data);
  } finally {
    await r.close();
  }
});

test('only the subscribed event types are delivered', async (t) => {
  const { c, r } = await setup(t, 'wh-filter', ['order.paid']);
  try {
    const p = await c.post('/v1/products', { name: 'Widget', price: 500, currency: 'EUR' });
    t.is(p.status, 201);
    const o = await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: p.json.id, quantity: 2 }] });
    t.is(o.status, 201);
    t.is((await c.patch(`/v1/orders/${o.json.id as string}`, { note: 'x' })).status, 200);
    t.is((await c.post(`/v1/orders/${o.json.id as string}/pay`)).status, 200);
    const other = await c.post('/v1/orders', { currency: 'EUR' });
    t.is((await c.post(`/v1/orders/${other.json.id as string}/cancel`)).status, 200);
    const u = await c.post('/v1/users', { email: 'f@example.com' });
    t.is(u.status, 201);
    // A ping is delivered whatever the types: it marks the end of what came before.
    const ping = await c.post(`/v1/webhook-endpoints/${(await c.get('/v1/webhook-endpoints')).json.data[0].id as string}/test`);
    t.is(ping.status, 202);
    await until('the ping', () => r.got.some((g) => g.json?.type === 'ping'));
    const paid = r.got.find((g) => g.json.type === 'order.paid')!;
    t.is(paid.json.data.total, 1000);
    t.is(paid.json.data.status, 'paid');
    t.deepEqual(
      r.got.map((g) => g.json.type as string).sort(),
      ['order.paid', 'ping'],
    );
  } finally {
    await r.close();
  }
});

test('each fan-out reaches the endpoints as they are at that moment: one added, one whose types changed', async (t) => {
  const { c, r: a, endpoint } = await setup(t, 'wh-change', ['order.created']);
  const b = await startReceiver();
  try {
    const order = async (note: string): Promise<void> => {
      t.is((await c.post('/v1/orders', { currency: 'EUR', note })).status, 201);
    };
    const notes = (r: Receiver): string[] => r.got.filter((g) => g.json?.type === 'order.created').map((g) => g.json.data.note as string).sort();
    await order('first');
    await until('the first event', () => notes(a).includes('first'));
    const added = await c.post('/v1/webhook-endpoints', { endpointUrl: b.url, eventTypes: ['order.created'] });
    t.is(added.status, 201);
    await order('second');
    await until('the second event at both', () => notes(a).includes('second') && notes(b).includes('second'));
    t.is((await c.patch(`/v1/webhook-endpoints/${endpoint.id}`, { eventTypes: ['order.paid'] })).status, 200);
    await order('third');
    await until('the third event', () => notes(b).includes('third'));
    // A ping marks the end of what went to the first endpoint: whatever was due has come.
    t.is((await c.post(`/v1/webhook-endpoints/${endpoint.id}/test`)).status, 202);
    await until('the ping', () => a.got.some((g) => g.json?.type === 'ping'));
    t.deepEqual(notes(a), ['first', 'second']);
    t.deepEqual(notes(b), ['second', 'third']);
  } finally {
    await a.close();
    await b.close();
  }
});

test('after a rotation both secrets sign for 24 h; each verifies', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-rotate');
  try {
    const rotated = await c.post(`/v1/webhook-endpoints/${endpoint.id}/rotate-secret`);
    t.is(rotated.status, 200);
    t.is(rotated.headers['cache-control'], 'no-store');
    const fresh = rotated.json.signingSecret as string;
    t.not(fresh, endpoint.signingSecret);
    await c.post('/v1/orders', { currency: 'EUR' });
    await until('a delivery', () => r.got.length >= 1);
    const got = r.got[0]!;
    const sig = headerString(got.headers['service-signature']);
    t.regex(sig, /^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
    t.is(headerString(got.headers['webhook-signature']).split(' ').length, 2);
    for (const secret of [fresh, endpoint.signingSecret]) {
      t.is((stripe.webhooks.constructEvent(got.raw, sig, secret) as unknown as { id: string }).id, got.json.id);
      t.notThrows(() =>
        new Webhook(secret).verify(got.raw.toString('utf8'), {
          'webhook-id': headerString(got.headers['webhook-id']),
          'webhook-timestamp': headerString(got.headers['webhook-timestamp']),
          'webhook-signature': headerString(got.headers['webhook-signature']),
        }),
      );
      t.is(verifyWebhook(got.raw, got.headers, secret).id, got.json.id);
    }
  } finally {
    await r.close();
  }
});

test('rotate-secret takes If-Match like every action: a stale tag or If-None-Match: * is 412 and rotates nothing', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-rotate-guard');
  try {
    const path = `/v1/webhook-endpoints/${endpoint.id}`;
    const before = await c.get(path);
    const etag = before.headers.etag!;
    for (const headers of [{ 'if-match': '"999-stale"' }, { 'if-none-match': '*' }] as Record<string, string>[]) {
      const refused = await c.post(`${path}/rotate-secret`, undefined, headers);
      t.is(refused.status, 412, JSON.stringify(headers));
      t.is(refused.json.type, '/problems/precondition-failed');
    }
    const unchanged = await c.get(path);
    t.is(unchanged.headers.etag, etag, 'nothing rotated');
    const rotated = await c.post(`${path}/rotate-secret`, undefined, { 'if-match': etag });
    t.is(rotated.status, 200);
    t.not(rotated.json.signingSecret, endpoint.signingSecret);
    t.not(rotated.headers.etag, etag);
  } finally {
    await r.close();
  }
});

test('a 500 is retried until a 2xx, with the same event id; the delivery log shows each attempt', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-retry');
  try {
    r.answer = (_g, n) => (n < 3 ? { status: 500 } : { status: 204 });
    await c.post('/v1/orders', { currency: 'EUR' });
    await until('three attempts', () => r.got.length >= 3);
    t.is(new Set(r.got.map((g) => g.json.id as string)).size, 1);
    let log: { status: string; attempts: { attempt: number; outcome: string; responseStatus: number | null; durationMs: number }[]; eventId: string; nextAttemptAt: string | null }[] = [];
    await until('the delivery settles', async () => {
      const page = await c.get(`/v1/webhook-endpoints/${endpoint.id}/deliveries`);
      t.is(page.headers['cache-control'], 'no-store');
      log = page.json.data;
      return log[0]?.status === 'delivered';
    });
    t.is(log.length, 1);
    t.is(log[0]!.eventId, r.got[0]!.json.id);
    t.deepEqual(
      log[0]!.attempts.map((a) => [a.attempt, a.outcome, a.responseStatus]),
      [
        [1, 'retry', 500],
        [2, 'retry', 500],
        [3, 'delivered', 204],
      ],
    );
    t.is(log[0]!.nextAttemptAt, null);
    t.is(r.got.length, 3);
  } finally {
    await r.close();
  }
});

test('a refused connection is retried, and a receiver back after being down gets every event', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-down');
  try {
    await r.stop();
    for (let i = 0; i < 3; i++) t.is((await c.post('/v1/orders', { currency: 'EUR', note: `n${i}` })).status, 201);
    await until('a refused attempt', async () => {
      const page = await c.get(`/v1/webhook-endpoints/${endpoint.id}/deliveries`);
      return (page.json.data as { attempts: { error: string | null }[] }[]).some((d) => d.attempts.some((a) => a.error === 'ECONNREFUSED'));
    });
    await r.restart();
    await until('every event', () => new Set(r.got.map((g) => g.json.data.note as string)).size === 3);
    t.deepEqual([...new Set(r.got.map((g) => g.json.data.note as string))].sort(), ['n0', 'n1', 'n2']);
  } finally {
    await r.close();
  }
});

test('a 410 disables the endpoint at once; other 4xx fail without retry', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-gone');
  try {
    r.answer = () => ({ status: 400 });
    await c.post('/v1/orders', { currency: 'EUR' });
    await until('the 400', () => r.got.length >= 1);
    await until('the failure is recorded', async () => (await c.get(`/v1/webhook-endpoints/${endpoint.id}/deliveries`)).json.data[0]?.status === 'failed');
    r.answer = () => ({ status: 410 });
    await c.post('/v1/orders', { currency: 'EUR' });
    await until('disabled', async () => (await c.get(`/v1/webhook-endpoints/${endpoint.id}`)).json.status === 'disabled');
    const e = await c.get(`/v1/webhook-endpoints/${endpoint.id}`);
    t.is(e.json.disabledReason, 'gone');
    await c.post('/v1/orders', { currency: 'EUR' });
    // Nothing more goes to a disabled endpoint, and the 400 was not retried.
    await new Promise((done) => setTimeout(done, 1500));
    t.is(r.got.length, 2);
    // Re-enabled, it receives again.
    t.is((await c.patch(`/v1/webhook-endpoints/${endpoint.id}`, { status: 'enabled' })).status, 200);
    r.answer = () => ({ status: 200 });
    await c.post('/v1/orders', { currency: 'EUR', note: 'again' });
    await until('the next event', () => r.got.some((g) => g.json.data?.note === 'again'));
    t.pass();
  } finally {
    await r.close();
  }
});

test('POST …/test sends a ping to that endpoint, with the id it answered', async (t) => {
  const { c, r, endpoint } = await setup(t, 'wh-ping');
  try {
    const ping = await c.post(`/v1/webhook-endpoints/${endpoint.id}/test`);
    t.is(ping.status, 202);
    await until('the ping', () => r.got.length >= 1);
    t.is(r.got[0]!.json.type, 'ping');
    t.is(r.got[0]!.json.data.endpointId, endpoint.id);
    t.is(r.got[0]!.json.id, ping.json.id);
  } finally {
    await r.close();
  }
});

test('the test link is offered only while the endpoint is enabled, and following it then works', async (t) => {
  const c = await t.context.api.as('wh-test-link', WEBHOOK_SCOPES);
  const created = await c.post('/v1/webhook-endpoints', { endpointUrl: 'http://127.0.0.1:9/hook', eventTypes: ['order.paid'] });
  t.is(created.status, 201);
  const path = created.headers.location!;
  t.deepEqual(created.json._links.test, { href: `${path}/test`, method: 'POST' });

  const disabled = await c.patch(path, { status: 'disabled' });
  t.is(disabled.status, 200);
  t.false('test' in disabled.json._links, 'a disabled endpoint offers a ping it would refuse');
  t.false('test' in (await c.get(path)).json._links);
  t.false('test' in (await c.get('/v1/webhook-endpoints')).json.data[0]._links);
  t.truthy(disabled.json._links.self);

  const enabled = await c.patch(path, { status: 'enabled' });
  const link = enabled.json._links.test as { href: string; method: string };
  t.is(link.method, 'POST');
  t.is((await c.post(link.href)).status, 202);
});

test('an endpoint with apiVersion v2 receives v2 data: money objects and /v2 links; a v1 endpoint the v1 shape of the same event', async (t) => {
  const c = await t.context.api.as('wh-v2', WEBHOOK_SCOPES);
  const r1 = await startReceiver();
  const r2 = await startReceiver();
  try {
    const v2 = await c.post('/v1/webhook-endpoints', { endpointUrl: r2.url, eventTypes: ['order.created'], apiVersion: 'v2' });
    t.is(v2.status, 201, v2.text);
    t.is(v2.json.apiVersion, 'v2');
    t.is((await c.post('/v1/webhook-endpoints', { endpointUrl: r1.url, eventTypes: ['order.created'] })).status, 201);
    const product = await c.post('/v1/products', { name: 'Lamp', price: 1999, currency: 'EUR' });
    const order = await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: product.json.id, quantity: 2 }] });
    t.is(order.status, 201, order.text);
    await until('both deliveries', () => r1.got.length >= 1 && r2.got.length >= 1);
    const [e1, e2] = [r1.got[0]!.json, r2.got[0]!.json];
    t.is(e1.id, e2.id, 'one event, two renderings');
    t.is(e2.apiVersion, 'v2');
    t.deepEqual(e2.data.total, { amount: '39.98', currency: 'EUR' });
    t.false('currency' in e2.data);
    t.deepEqual(e2.data.items[0].unitPrice, { amount: '19.99', currency: 'EUR' });
    t.is(e2.data._links.self.href, `/v2/orders/${order.json.id as string}`);
    t.is(e1.apiVersion, 'v1');
    t.is(e1.data.total, 3998);
    t.is(e1.data.currency, 'EUR');
    t.is(e1.data._links.self.href, `/v1/orders/${order.json.id as string}`);
    const read = await c.get(`/v2/events/${e2.id as string}`);
    t.is(read.status, 200, read.text);
    t.deepEqual(read.json.data.total, { amount: '39.98', currency: 'EUR' }, 'the events API renders in the version it is read under');
  } finally {
    await r1.close();
    await r2.close();
  }
});

test('a tenant holds at most 1000 endpoints: the next create is 409 and writes nothing; a ping to a disabled endpoint is 409', async (t) => {
  const c = await t.context.api.as('wh-cap', WEBHOOK_SCOPES);
  const body = { endpointUrl: 'http://127.0.0.1:9/hook', eventTypes: ['order.paid'] };
  for (let i = 0; i < 1000; i += 50) {
    const made = await Promise.all(Array.from({ length: 50 }, () => c.post('/v1/webhook-endpoints', body)));
    t.true(made.every((r) => r.status === 201), made.map((r) => r.status).join(','));
  }
  const over = await Promise.all([c.post('/v1/webhook-endpoints', body), c.post('/v1/webhook-endpoints', body)]);
  t.deepEqual(over.map((r) => r.status), [409, 409], over.map((r) => r.text).join('\n'));
  t.is(over[0]!.json.type, '/problems/conflict');
  let count = 0;
  for (let href: string | undefined = '/v1/webhook-endpoints?limit=100'; href; ) {
    const page = await c.get(href);
    count += page.json.data.length as number;
    href = page.json._links.next?.href as string | undefined;
  }
  t.is(count, 1000);

  const first = (await c.get('/v1/webhook-endpoints?limit=1')).json.data[0] as { id: string };
  t.is((await c.patch(`/v1/webhook-endpoints/${first.id}`, { status: 'disabled' })).status, 200);
  const ping = await c.post(`/v1/webhook-endpoints/${first.id}/test`);
  t.is(ping.status, 409, ping.text);
  t.is(ping.json.type, '/problems/invalid-state');
  t.is((await c.delete(`/v1/webhook-endpoints/${first.id}`)).status, 204);
  t.is((await c.post('/v1/webhook-endpoints', body)).status, 201, 'room again after a delete');
});

test('a burst of events to one endpoint keeps at most 16 deliveries in flight to it, and delivers each', async (t) => {
  const { c, r } = await setup(t, 'wh-paced', ['order.created']);
  let inFlight = 0;
  let most = 0;
  r.answer = () => {
    inFlight++;
    most = Math.max(most, inFlight);
    setTimeout(() => inFlight--, 60);
    return { status: 204, delayMs: 60 };
  };
  try {
    const orders = await Promise.all(Array.from({ length: 40 }, () => c.post('/v1/orders', { currency: 'EUR' })));
    t.true(orders.every((o) => o.status === 201));
    await until('every event', () => new Set(r.got.map((g) => g.json?.id as string)).size >= 40);
    t.is(new Set(r.got.map((g) => g.json.data.id as string)).size, 40);
    t.log(`${most} in flight at most`);
    t.true(most <= 16, `${most} in flight at once`);
    t.true(most > 1, 'deliveries to one endpoint overlap');
  } finally {
    await r.close();
  }
});
