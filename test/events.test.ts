// Events (issue 5): every write emits its event with the full resource state, in the write's
// transaction; the catalogue, the list (type filter, keyset pages) and one event by id.

import anyTest, { type TestFn } from 'ava';
import type { Caller } from './helpers/client.js';
import { startWebhookService, WEBHOOK_SCOPES, type WebhookService } from './helpers/webhook-kit.js';

const test = anyTest as TestFn<WebhookService>;

test.before(async (t) => {
  t.context = await startWebhookService({ REFUND_PROCESSING_MS: '10' });
});

test.after.always(async (t) => {
  await t.context?.close();
});

async function caller(t: { context: WebhookService }, tenant: string, scope = WEBHOOK_SCOPES): Promise<Caller> {
  return t.context.api.as(tenant, scope);
}

test('the root document links to the event and webhook collections', async (t) => {
  const root = await t.context.api.anonymous().get('/v1');
  t.is(root.json._links.events.href, '/v1/events');
  t.is(root.json._links.eventTypes.href, '/v1/event-types');
  t.is(root.json._links.webhookEndpoints.href, '/v1/webhook-endpoints');
});

test('the catalogue lists every event type with what emits it, without a token', async (t) => {
  const r = await t.context.api.anonymous().get('/v1/event-types');
  t.is(r.status, 200);
  const types = (r.json.data as { type: string; emittedBy: string }[]).map((e) => e.type);
  for (const type of ['order.created', 'order.updated', 'order.paid', 'order.cancelled', 'order.deleted', 'order.refunded', 'refund.created', 'refund.succeeded', 'refund.failed', 'user.created', 'user.updated', 'user.deleted', 'team.member.added', 'team.member.removed', 'article.created', 'article.updated', 'ping']) {
    t.true(types.includes(type), type);
  }
});

test('order writes emit events carrying the full order; the list filters by type, newest first', async (t) => {
  const c = await caller(t, 'events-orders');
  const created = await c.post('/v1/orders', { currency: 'EUR', note: 'first' });
  t.is(created.status, 201);
  const id = created.json.id as string;
  const patched = await c.patch(`/v1/orders/${id}`, { note: 'second' });
  t.is(patched.status, 200);
  const cancelled = await c.post(`/v1/orders/${id}/cancel`);
  t.is(cancelled.status, 200);

  const all = await c.get('/v1/events');
  t.is(all.status, 200);
  t.deepEqual(
    (all.json.data as { type: string }[]).map((e) => e.type),
    ['order.cancelled', 'order.updated', 'order.created'],
  );
  const upd = (all.json.data as { type: string; data: { id: string; note: string; status: string; currency: string } }[])[1]!;
  t.is(upd.data.id, id);
  t.is(upd.data.note, 'second');
  t.is(upd.data.currency, 'EUR');

  const only = await c.get('/v1/events?type=order.created');
  t.is(only.json.data.length, 1);
  t.is(only.json.data[0].data.note, 'first');
  t.regex(only.json.data[0].id, /^evt_/);
  t.regex(only.json.data[0].created, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  const one = await c.get(`/v1/events/${only.json.data[0].id as string}`);
  t.is(one.status, 200);
  t.deepEqual(one.json.data, only.json.data[0].data);
  t.is(one.json.type, 'order.created');

  t.is((await c.get('/v1/events?type=nope')).status, 400);
  // Names every object inherits are not event types either.
  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) t.is((await c.get(`/v1/events?type=${name}`)).status, 400, name);
});

test('events are paged with a keyset cursor', async (t) => {
  const c = await caller(t, 'events-pages');
  for (let i = 0; i < 5; i++) t.is((await c.post('/v1/orders', { currency: 'EUR', note: `n${i}` })).status, 201);
  const seen: string[] = [];
  let path: string | undefined = '/v1/events?limit=2';
  for (let i = 0; path && i < 10; i++) {
    const page = await c.get(path);
    t.is(page.status, 200);
    seen.push(...(page.json.data as { data: { note: string } }[]).map((e) => e.data.note));
    path = page.json._links.next?.href as string | undefined;
  }
  t.deepEqual(seen, ['n4', 'n3', 'n2', 'n1', 'n0']);
});

test('the event, endpoint and delivery lists take sort and fields like every other list', async (t) => {
  const c = await caller(t, 'events-sort');
  for (let i = 0; i < 3; i++) t.is((await c.post('/v1/orders', { currency: 'EUR', note: `s${i}` })).status, 201);
  const oldest = await c.get('/v1/events?sort=created&fields=type,data&limit=2');
  t.is(oldest.status, 200, oldest.text);
  t.deepEqual((oldest.json.data as { data: { note: string } }[]).map((e) => e.data.note), ['s0', 's1']);
  t.deepEqual(Object.keys(oldest.json.data[0]).sort(), ['_links', 'data', 'id', 'type']);
  const next = await c.get(oldest.json._links.next.href as string);
  t.deepEqual((next.json.data as { data: { note: string } }[]).map((e) => e.data.note), ['s2']);
  t.is((await c.get('/v1/events?sort=type')).status, 400);
  t.is((await c.get('/v1/events?fields=secret')).status, 400);
  const made = [];
  for (const n of [1, 2]) {
    const e = await c.post('/v1/webhook-endpoints', { endpointUrl: `http://127.0.0.1:9/in${n}`, eventTypes: ['order.created'] });
    t.is(e.status, 201, e.text);
    made.push(e.json.id as string);
  }
  const endpoints = await c.get('/v1/webhook-endpoints?sort=createdAt&fields=endpointUrl');
  t.is(endpoints.status, 200, endpoints.text);
  t.deepEqual((endpoints.json.data as { id: string }[]).map((e) => e.id), made);
  t.deepEqual(Object.keys(endpoints.json.data[0]).sort(), ['_links', 'endpointUrl', 'id']);
  const deliveries = await c.get(`/v1/webhook-endpoints/${made[0]!}/deliveries?sort=createdAt&fields=status`);
  t.is(deliveries.status, 200, deliveries.text);
});

test('users, memberships and articles emit their events; a refused write emits none', async (t) => {
  const c = await caller(t, 'events-users');
  const u = await c.post('/v1/users', { email: 'a@example.com' });
  t.is(u.status, 201);
  t.is((await c.post('/v1/users', { email: 'A@example.com' })).status, 409);
  t.is((await c.patch(`/v1/users/${u.json.id as string}`, { name: 'Ann' })).status, 200);
  const team = await c.post('/v1/teams', { name: 'core' });
  t.is(team.status, 201);
  t.is((await c.post(`/v1/teams/${team.json.id as string}/members`, { userId: u.json.id, role: 'admin' })).status, 201);
  t.is((await c.delete(`/v1/teams/${team.json.id as string}/members/${u.json.id as string}`)).status, 204);
  t.is((await c.delete(`/v1/users/${u.json.id as string}`)).status, 204);
  const art = await c.post('/v1/articles', { translations: { en: { title: 'Hi', body: 'x' } }, defaultLanguage: 'en', tags: [] });
  t.is(art.status, 201);
  t.is((await c.patch(`/v1/articles/${art.json.id as string}`, { tags: ['news'] })).status, 200);

  const list = await c.get('/v1/events?limit=100');
  t.deepEqual(
    (list.json.data as { type: string }[]).map((e) => e.type).reverse(),
    ['user.created', 'user.updated', 'team.member.added', 'team.member.removed', 'user.deleted', 'article.created', 'article.updated'],
  );
  const deleted = (list.json.data as { type: string; data: { email: string; name: string } }[]).find((e) => e.type === 'user.deleted')!;
  t.is(deleted.data.email, 'a@example.com');
  t.is(deleted.data.name, 'Ann');
  const added = (list.json.data as { type: string; data: { role: string } }[]).find((e) => e.type === 'team.member.added')!;
  t.is(added.data.role, 'admin');
});

test('events need events:read and belong to their tenant', async (t) => {
  const a = await caller(t, 'events-a');
  const created = await a.post('/v1/orders', { currency: 'EUR' });
  const ev = (await a.get('/v1/events')).json.data[0].id as string;
  t.is(created.status, 201);
  const b = await caller(t, 'events-b');
  t.is((await b.get(`/v1/events/${ev}`)).status, 404);
  t.is((await b.get('/v1/events')).json.data.length, 0);
  const noScope = await caller(t, 'events-a', 'orders:read');
  t.is((await noScope.get('/v1/events')).status, 403);
});

test('an atomic batch that fails emits nothing; one that succeeds emits an event per operation', async (t) => {
  const c = await caller(t, 'events-batch');
  const bad = await c.post('/v1/orders/batch', { atomic: true, operations: [{ method: 'POST', body: { currency: 'EUR' } }, { method: 'DELETE', id: 'ord_nope' }] });
  t.true(bad.status >= 400);
  t.is((await c.get('/v1/events')).json.data.length, 0);
  const good = await c.post('/v1/orders/batch', { atomic: true, operations: [{ method: 'POST', body: { currency: 'EUR' } }, { method: 'POST', body: { currency: 'USD' } }] });
  t.is(good.status, 200);
  t.deepEqual((await c.get('/v1/events')).json.data.map((e: { type: string }) => e.type), ['order.created', 'order.created']);

  // Refused by the order's owner itself (a stale tag behind a patch that would pass): no event
  // for the patch that was not written either.
  const id = good.json.results[0].id as string;
  const refused = await c.post('/v1/orders/batch', { atomic: true, operations: [{ method: 'PATCH', id, body: { note: 'not written' } }, { method: 'PATCH', id, ifMatch: '"9-x"', body: { note: 'stale' } }] });
  t.is(refused.status, 412, refused.text);
  t.is((await c.get(`/v1/orders/${id}`)).json.note, null);
  t.deepEqual((await c.get('/v1/events')).json.data.map((e: { type: string }) => e.type), ['order.created', 'order.created']);
});

test('a full refund emits refund.created, then refund.succeeded and order.refunded with the refunded order', async (t) => {
  const c = await caller(t, 'events-refunds', `${WEBHOOK_SCOPES} refunds:read refunds:write`);
  const p = await c.post('/v1/products', { name: 'Widget', price: 700, currency: 'EUR' });
  const o = await c.post('/v1/orders', { currency: 'EUR', items: [{ productId: p.json.id, quantity: 1 }] });
  t.is((await c.post(`/v1/orders/${o.json.id as string}/pay`)).status, 200);
  const started = await c.post('/v1/refunds', { orderId: o.json.id });
  t.is(started.status, 202);
  let types: string[] = [];
  for (let i = 0; i < 200 && !types.includes('order.refunded'); i++) {
    types = (await c.get('/v1/events?limit=100')).json.data.map((e: { type: string }) => e.type);
    await new Promise((done) => setTimeout(done, 20));
  }
  t.deepEqual(types.slice(0, 3).sort(), ['order.refunded', 'refund.created', 'refund.succeeded']);
  const events = (await c.get('/v1/events?limit=100')).json.data as { type: string; data: Record<string, unknown> }[];
  t.is(events.find((e) => e.type === 'order.refunded')!.data.status, 'refunded');
  t.is(events.find((e) => e.type === 'refund.succeeded')!.data.status, 'succeeded');
  t.is(events.find((e) => e.type === 'refund.created')!.data.amount, 700);
});

test('a user or team delete announces each membership it removes as team.member.removed', async (t) => {
  const c = await caller(t, 'events-cascade');
  const u = (await c.post('/v1/users', { email: 'b@example.com' })).json as { id: string };
  const v = (await c.post('/v1/users', { email: 'c@example.com' })).json as { id: string };
  const one = (await c.post('/v1/teams', { name: 'one' })).json as { id: string };
  const two = (await c.post('/v1/teams', { name: 'two' })).json as { id: string };
  for (const [team, user] of [[one, u], [two, u], [two, v]] as const) {
    t.is((await c.post(`/v1/teams/${team.id}/members`, { userId: user.id, role: 'member' })).status, 201);
  }
  t.is((await c.delete(`/v1/users/${u.id}`)).status, 204);
  t.is((await c.delete(`/v1/teams/${two.id}`)).status, 204);
  const removed = ((await c.get('/v1/events?type=team.member.removed&limit=100')).json.data as { data: { teamId: string; userId: string } }[]).map(
    (e) => `${e.data.teamId === one.id ? 'one' : 'two'}:${e.data.userId === u.id ? 'u' : 'v'}`,
  );
  t.deepEqual(removed.sort(), ['one:u', 'two:u', 'two:v']);
});
