// /v2 beside /v1 (CONTRACT §9): one order, two renderings. Money is a decimal string object in
// v2, keyed on the currency's minor unit; everything else, links aside, is the same. In process,
// through the whole pipeline.

import { join } from 'node:path';
import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import { loadConfig } from '../common/config.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost } from '../actors/host.js';
import { allRoutes } from '../gateway/app.js';
import { Authenticator } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import { renderMoney } from '../gateway/money.js';
import { renderEventData } from '../gateway/resources/event-data.js';
import type { EventRecord } from '../proto/webhooks.js';
import type { Resolver } from '../actors/webhook-target.js';
import { Ajv2020 } from 'ajv/dist/2020.js';

function orderEvent(o: OrderRecord): EventRecord {
  return { id: 'evt_test', tenant: o.tenant, version: 1, type: 'order.created', resource: 'order', created: o.createdAt, data: o };
}
import { partitionOf } from '../common/ids.js';
import type { OrderRecord } from '../proto/messages.js';
import { createGateway, type Gateway } from '../gateway/pipeline.js';
import { ALL_SCOPES, type Answer, type Call, answerOf, assertProblem, freshTenant, removeDir, silentLog, tempDir, toRequest, token } from './helpers/edge-kit.js';
import { allPartitions } from '../common/partitions.js';

interface Context {
  dir: string;
  host: ActorHost;
  gateway: Gateway;
  tok: string;
  tenant: string;
  call(c: Call): Promise<Answer>;
}

const test = anyTest as TestFn<Context>;
const SECRET = 'versions-test-secret-0123456789abcdef';

test.before(async (t) => {
  const dir = await tempDir('versions');
  const config = loadConfig({ DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, PORT: '0' });
  const log = silentLog();
  const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 1000, log });
  // Webhook targets resolve to a public address, so an endpoint can be created in process.
  const resolver: Resolver = async () => [{ address: '93.184.216.34', family: 4 }];
  const gateway = createGateway({ routes: allRoutes({ resolver }), auth: new Authenticator(SECRET), bus: new BusClient(new LocalBus(host, 5000)), config, log });
  const tenant = freshTenant('versions');
  t.context = {
    dir,
    host,
    gateway,
    tenant,
    tok: await token(SECRET, `${ALL_SCOPES} users:write teams:write articles:read articles:write webhooks:write`, { tenant }),
    async call(c) {
      return answerOf(await gateway.handle(toRequest(c)));
    },
  };
});

test.after.always(async (t) => {
  t.context.gateway?.close();
  await t.context.host?.close();
  await removeDir(t.context.dir);
});

// Tests read many response shapes; the members they touch are asserted, not assumed.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const j = (a: Answer): any => a.json();

const send = (t: { context: Context }, method: Call['method'], path: string, body?: object, headers: Record<string, string> = {}): Promise<Answer> =>
  t.context.call({ method, path, headers: { authorization: `Bearer ${t.context.tok}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers }, ...(body === undefined ? {} : { body }) });

async function product(t: ExecutionContext<Context>, price: number, currency: string): Promise<string> {
  const a = await send(t, 'POST', '/v1/products', { name: 'Widget', price, currency });
  t.is(a.status, 201, a.text);
  return a.json().id as string;
}

test('money renders by the currency minor unit (ISO 4217)', (t) => {
  t.deepEqual(renderMoney(1999, 'EUR'), { amount: '19.99', currency: 'EUR' });
  t.deepEqual(renderMoney(5, 'EUR'), { amount: '0.05', currency: 'EUR' });
  t.deepEqual(renderMoney(0, 'USD'), { amount: '0.00', currency: 'USD' });
  t.deepEqual(renderMoney(1999, 'JPY'), { amount: '1999', currency: 'JPY' });
  t.deepEqual(renderMoney(1250, 'KWD'), { amount: '1.250', currency: 'KWD' });
  t.deepEqual(renderMoney(7, 'BHD'), { amount: '0.007', currency: 'BHD' });
  t.deepEqual(renderMoney(-150, 'EUR'), { amount: '-1.50', currency: 'EUR' });
});

test('one order, two renderings: v1 minor units beside currency, v2 money objects', async (t) => {
  const prd = await product(t, 1999, 'EUR');
  const created = await send(t, 'POST', '/v1/orders', { currency: 'EUR', items: [{ productId: prd, quantity: 2 }] });
  t.is(created.status, 201);
  const id = j(created).id as string;

  const v1 = await send(t, 'GET', `/v1/orders/${id}`, undefined, { 'accept-encoding': 'identity' });
  const v2 = await send(t, 'GET', `/v2/orders/${id}`);
  t.is(v1.status, 200);
  t.is(v2.status, 200);
  t.is(j(v1).total, 3998);
  t.is(j(v1).currency, 'EUR');
  t.deepEqual(j(v2).total, { amount: '39.98', currency: 'EUR' });
  t.false('currency' in j(v2));
  t.is(j(v2).status, j(v1).status);
  t.is(j(v2).createdAt, j(v1).createdAt);
  t.is(j(v2)._links.self.href, `/v2/orders/${id}`);
  t.is(j(v2)._links.items.href, `/v2/orders/${id}/items`);
  t.is(j(v1)._links.self.href, `/v1/orders/${id}`);
  // One record, two representations: the tags differ, and each revalidates on its own.
  t.not(v1.headers.etag, v2.headers.etag);
  t.is((await send(t, 'GET', `/v2/orders/${id}`, undefined, { 'if-none-match': v2.headers.etag! })).status, 304);
  t.is((await send(t, 'GET', `/v2/orders/${id}`, undefined, { 'if-none-match': v1.headers.etag! })).status, 200);

  const expanded = await send(t, 'GET', `/v2/orders/${id}`, undefined, { accept: 'application/json' });
  t.is(expanded.status, 200);
  const withItems = await t.context.call({ method: 'GET', path: `/v2/orders/${id}`, query: 'expand=items.product', headers: { authorization: `Bearer ${t.context.tok}` } });
  const item = j(withItems).items[0];
  t.deepEqual(item.unitPrice, { amount: '19.99', currency: 'EUR' });
  t.is(item._links.product.href, `/v2/products/${prd}`);
  t.is(item.product._links.self.href, `/v2/products/${prd}`);

  const items = await send(t, 'GET', `/v2/orders/${id}/items`);
  t.deepEqual(j(items).data[0].unitPrice, { amount: '19.99', currency: 'EUR' });
  t.is(j(items)._links.self.href, `/v2/orders/${id}/items`);
  const one = await send(t, 'GET', `/v1/orders/${id}/items/${item.id as string}`);
  t.is(j(one).unitPrice, 1999);

  const list = await send(t, 'GET', '/v2/orders');
  const listed = j(list).data.find((o: { id: string }) => o.id === id);
  t.deepEqual(listed.total, { amount: '39.98', currency: 'EUR' });
  t.regex(j(list)._links.self.href, /^\/v2\/orders/);
});

test('v2 writes money as a money object in the order currency', async (t) => {
  const prd = await product(t, 100, 'JPY');
  const created = await send(t, 'POST', '/v2/orders', { currency: 'KWD', items: [{ productId: prd, quantity: 3, unitPrice: { amount: '1.25', currency: 'KWD' } }] });
  t.is(created.status, 201, created.text);
  t.deepEqual(j(created).total, { amount: '3.750', currency: 'KWD' });
  t.regex(created.headers.location ?? '', /^\/v2\/orders\/ord_/);
  const id = j(created).id as string;
  t.is((await send(t, 'GET', `/v1/orders/${id}`)).json().total, 3750);

  const added = await send(t, 'POST', `/v2/orders/${id}/items`, { productId: prd, quantity: 1, unitPrice: { amount: '0.005', currency: 'KWD' } });
  t.is(added.status, 201, added.text);
  t.deepEqual(j(added).unitPrice, { amount: '0.005', currency: 'KWD' });

  // Too many decimals for the currency, another currency, or v1's integer: 422 naming the member.
  const tooFine = await send(t, 'POST', `/v2/orders/${id}/items`, { productId: prd, quantity: 1, unitPrice: { amount: '0.0001', currency: 'KWD' } });
  t.is(assertProblem(t, tooFine, 422, 'validation-failed').errors?.[0]?.pointer, '/unitPrice/amount');
  const other = await send(t, 'POST', `/v2/orders/${id}/items`, { productId: prd, quantity: 1, unitPrice: { amount: '1', currency: 'JPY' } });
  t.is(assertProblem(t, other, 422, 'validation-failed').errors?.[0]?.pointer, '/unitPrice/currency');
  assertProblem(t, await send(t, 'POST', `/v2/orders/${id}/items`, { productId: prd, quantity: 1, unitPrice: 5 }), 422, 'validation-failed');
  // and v1 still takes minor units, not objects
  assertProblem(t, await send(t, 'POST', `/v1/orders/${id}/items`, { productId: prd, quantity: 1, unitPrice: { amount: '1', currency: 'KWD' } }), 422, 'validation-failed');

  const yen = await send(t, 'POST', '/v2/orders', { currency: 'JPY', items: [{ productId: prd, quantity: 2 }] });
  t.deepEqual(j(yen).total, { amount: '200', currency: 'JPY' });
});

test('a paid order under /v2 links its refunds under /v2; the ETag of a v2 write revalidates the v2 GET', async (t) => {
  const prd = await product(t, 500, 'EUR');
  const created = await send(t, 'POST', '/v2/orders', { currency: 'EUR', items: [{ productId: prd, quantity: 1 }] });
  t.is(created.status, 201, created.text);
  const id = j(created).id as string;
  t.is((await send(t, 'GET', `/v2/orders/${id}`, undefined, { 'if-none-match': created.headers.etag! })).status, 304, 'the create answer\'s tag');
  const paid = await send(t, 'POST', `/v2/orders/${id}/pay`);
  t.is(paid.status, 200, paid.text);
  t.deepEqual(j(paid)._links.refund, { href: '/v2/refunds', method: 'POST' });
  t.deepEqual(j(paid)._links.refunds, { href: `/v2/refunds?orderId=${id}` });
  const got = await send(t, 'GET', `/v2/orders/${id}`);
  t.deepEqual(j(got)._links, j(paid)._links);
  t.is(got.headers.etag, paid.headers.etag, 'one representation, one tag');
  t.is((await send(t, 'GET', `/v2/orders/${id}`, undefined, { 'if-none-match': paid.headers.etag! })).status, 304);
  t.deepEqual(j(await send(t, 'GET', `/v1/orders/${id}`))._links.refund, { href: '/v1/refunds', method: 'POST' });
});

test('v2 has no top-level currency field to ask for; v1 keeps it', async (t) => {
  const created = await send(t, 'POST', '/v1/orders', { currency: 'EUR' });
  const id = j(created).id as string;
  const bad = await t.context.call({ method: 'GET', path: `/v2/orders/${id}`, query: 'fields=currency', headers: { authorization: `Bearer ${t.context.tok}` } });
  assertProblem(t, bad, 400, 'invalid-parameter');
  const good = await t.context.call({ method: 'GET', path: `/v1/orders/${id}`, query: 'fields=currency', headers: { authorization: `Bearer ${t.context.tok}` } });
  t.is(j(good).currency, 'EUR');
  // Nor do the OpenAPI documents offer it, for one order or for the list.
  const fieldsOf = async (version: string, path: string): Promise<string> => {
    const doc = j(await t.context.call({ method: 'GET', path: `/${version}/openapi.json` }));
    return doc.paths[`/${version}${path}`].get.parameters.find((p: { name: string }) => p.name === 'fields').description;
  };
  for (const path of ['/orders', '/orders/{orderId}']) {
    t.regex(await fieldsOf('v1', path), /\bcurrency\b/, path);
    t.notRegex(await fieldsOf('v2', path), /\bcurrency\b/, path);
  }
});

test('every other resource answers the same under /v2, with links under /v2', async (t) => {
  const prd = await product(t, 500, 'EUR');
  const v2 = await send(t, 'GET', `/v2/products/${prd}`);
  t.is(v2.status, 200);
  t.is(j(v2).price, 500);
  t.is(j(v2)._links.self.href, `/v2/products/${prd}`);
  const page = await send(t, 'GET', '/v2/products');
  t.is(j(page)._links.self.href.startsWith('/v2/products'), true);
  t.true(j(page).data.every((p: { _links: { self: { href: string } } }) => p._links.self.href.startsWith('/v2/')));
});

test('a create under /v2 answers a Location under /v2, as its body links', async (t) => {
  const created = async (path: string, body: object): Promise<Answer> => {
    const a = await send(t, 'POST', path, body);
    t.is(a.status, 201, `${path}: ${a.text}`);
    t.is(a.headers.location, j(a)._links.self.href, path);
    t.true(a.headers.location!.startsWith('/v2/'), `${path}: ${a.headers.location}`);
    return a;
  };
  await created('/v2/products', { name: 'Widget', price: 500, currency: 'EUR' });
  const user = await created('/v2/users', { email: `v2-${Date.now()}@example.com` });
  const team = await created('/v2/teams', { name: 'Crew' });
  await created(`/v2/teams/${j(team).id}/members`, { userId: j(user).id, role: 'member' });
  await created('/v2/articles', { translations: { en: { title: 'Hi', body: 'Hello' } }, defaultLanguage: 'en', tags: ['news'] });
  await created('/v2/orders', { currency: 'EUR' });
  const hook = await created('/v2/webhook-endpoints', { endpointUrl: 'https://hooks.example.com/in', eventTypes: ['order.created'] });
  const ping = await send(t, 'POST', `/v2/webhook-endpoints/${j(hook).id}/test`, {});
  t.is(ping.status, 202, ping.text);
  t.is(ping.headers.location, `/v2/events/${j(ping).id}`);
  t.is(j(ping)._links.self.href, ping.headers.location);
});

test("an article's tag links, one per tag, stay under /v2, and its reads match the /v2 OpenAPI document", async (t) => {
  const a = await send(t, 'POST', '/v2/articles', { translations: { en: { title: 'Hi', body: 'Hello' } }, defaultLanguage: 'en', tags: ['news', 'tips'] });
  t.is(a.status, 201, a.text);
  const one = await send(t, 'GET', `/v2/articles/${j(a).id}`);
  const page = await send(t, 'GET', '/v2/articles', undefined);
  const tags = (body: { _links: { tag: { href: string; name: string }[] } }): string[] => body._links.tag.map((l) => `${l.name} ${l.href}`);
  t.deepEqual(tags(j(one)), ['news /v2/articles?tag=news', 'tips /v2/articles?tag=tips']);
  t.deepEqual(tags(j(page).data.find((x: { id: string }) => x.id === j(a).id)), tags(j(one)));
  const doc = j(await t.context.call({ method: 'GET', path: '/v2/openapi.json' }));
  // Timestamps as CONTRACT §2 has them: RFC 3339 UTC with milliseconds.
  const ajv = new Ajv2020({ strict: false }).addFormat('date-time', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  for (const [path, answer] of [['/v2/articles/{articleId}', one], ['/v2/articles', page]] as const) {
    const validate = ajv.compile(doc.paths[path].get.responses['200'].content['application/json'].schema);
    t.true(validate(j(answer)), `${path}: ${JSON.stringify(validate.errors)}`);
  }
});

test('the OpenAPI documents name the 400, 406, 304 and 412 every operation may answer, and the reads answer them', async (t) => {
  const auth = { authorization: `Bearer ${t.context.tok}` };
  for (const version of ['v1', 'v2']) {
    const doc = j(await t.context.call({ method: 'GET', path: `/${version}/openapi.json` }));
    // A route's 406 names what that route serves.
    t.regex(doc.paths[`/${version}/openapi.json`].get.responses['406'].description, /application\/vnd\.oai\.openapi\+json/);
    t.notRegex(doc.paths[`/${version}/openapi.json`].get.responses['406'].description, /hal\+json/);
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, { responses: Record<string, unknown> }>>)) {
      for (const [method, op] of Object.entries(ops)) {
        const expected = method === 'get' ? ['400', '406', '304', '412'] : ['400', '406'];
        t.deepEqual(expected.filter((s) => op.responses[s] === undefined), [], `${method} ${path}`);
      }
      if (!ops.get || path.includes('{')) continue;
      const read = await t.context.call({ method: 'GET', path, headers: auth });
      if (read.status !== 200) continue; // a scope this token lacks
      const etag = read.headers.etag!;
      t.is((await t.context.call({ method: 'GET', path, headers: { ...auth, 'if-none-match': etag } })).status, 304, path);
      t.is((await t.context.call({ method: 'GET', path, headers: { ...auth, accept: 'application/xml' } })).status, 406, path);
      t.is((await t.context.call({ method: 'GET', path, query: 'bogus=1', headers: auth })).status, 400, path);
    }
  }
});

test('discovery: GET / links to each version; each version has a root and an OpenAPI document', async (t) => {
  const root = await t.context.call({ method: 'GET', path: '/' });
  t.is(j(root)._links.v1.href, '/v1');
  t.is(j(root)._links.v2.href, '/v2');
  const v2root = await t.context.call({ method: 'GET', path: '/v2' });
  t.is(j(v2root)._links.orders.href, '/v2/orders');
  t.is(j(v2root)._links.openapi.href, '/v2/openapi.json');
  const doc1 = j(await t.context.call({ method: 'GET', path: '/v1/openapi.json' }));
  const doc2 = j(await t.context.call({ method: 'GET', path: '/v2/openapi.json' }));
  t.is(doc2.info.version, 'v2');
  t.truthy(doc2.paths['/v2/orders/{orderId}']);
  t.falsy(doc2.paths['/v1/orders/{orderId}']);
  t.falsy(doc1.paths['/v2/orders/{orderId}']);
  const order2 = doc2.paths['/v2/orders/{orderId}'].get.responses['200'].content['application/json'].schema;
  const order1 = doc1.paths['/v1/orders/{orderId}'].get.responses['200'].content['application/json'].schema;
  t.is(order1.properties.total.type, 'integer');
  t.is(order2.properties.total.properties.amount.type, 'string');
  t.falsy(order2.properties.currency);
});

test('an event\'s data is what a GET of that version answers, items expanded (webhook data)', async (t) => {
  const prd = await product(t, 250, 'EUR');
  const created = j(await send(t, 'POST', '/v1/orders', { currency: 'EUR', items: [{ productId: prd, quantity: 1 }] }));
  const record = await t.context.host.handle({ kind: 'order.get', tenant: t.context.tenant, partition: partitionOf(created.id as string), id: created.id as string });
  if (!record.ok) throw new Error('order not found');
  for (const v of ['v1', 'v2'] as const) {
    const got = j(await t.context.call({ method: 'GET', path: `/${v}/orders/${created.id as string}`, query: 'expand=items', headers: { authorization: `Bearer ${t.context.tok}` } }));
    t.deepEqual(renderEventData(orderEvent(record.value as OrderRecord), v), got);
  }
  t.deepEqual((renderEventData(orderEvent(record.value as OrderRecord), 'v2') as { total: unknown }).total, { amount: '2.50', currency: 'EUR' });
});
