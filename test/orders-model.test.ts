// A model-based property run of the orders API over real HTTP (embedded service on port 0, and a
// cluster: gateway, two actor nodes, nats-server):
// fast-check generates sequences of commands (create with and without items, read, merge patch
// and replacement with no If-Match, the current tag or a stale one, pay, cancel, delete, add an
// item, list, touch a deleted order), runs each against the service and against a small
// in-memory model, and fails on the first status code or body member the model did not
// predict, with a shrunk counterexample and the seed to replay it
// (FC_SEED=… FC_PATH=… npx ava dist/test/orders-model.test.js; FC_NUM_RUNS=… searches longer).
//
// The model is the API guide's state machine and limits (docs/api-guide.md, "Orders"):
//
//   pending ──pay (total > 0)──▶ paid          delete: pending or cancelled, else 409
//      └──────cancel──────────▶ cancelled     items, currency changes: only while pending
//                                              currency changes: only with no items
//                                              metadata: at most 50 keys after a merge
//                                              items: at most 100
//
// with the checks in the order the pipeline makes them: the body's JSON Schema (422), the order
// (404), If-Match (412), the state (409), then domain validation (422). Ids, entity tags and
// timestamps cannot be predicted; they are learned from the wire and checked for consistency
// instead (a tag changes with every write and only then, createdAt never changes, updatedAt
// never goes back).
//
// Every run has a tenant of its own, with its own products, so runs are independent although
// they share one service, and lists show exactly the orders of the run.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import anyTest, { type ExecutionContext, type TestFn } from 'ava';
import fc from 'fast-check';
import { ALL_SCOPES, Caller, HttpClient, type Reply, type SendOptions, mintToken } from './helpers/client.js';
import { assertProperty, expectProblem } from './helpers/property-kit.js';
import { startCluster, startEmbedded, type RunningService } from './helpers/service.js';

interface Context {
  service: RunningService;
}

const test = anyTest as TestFn<Context>;

test.before(async (t) => {
  t.context = { service: await startEmbedded() };
});

test.after.always(async (t) => {
  await (t.context as Partial<Context>).service?.close();
});

// ---- the catalogue every run starts with ----

type ProductKey = 'eur' | 'free' | 'usd' | 'gone';

/** `gone` is created and deleted before the run: an item naming it names no product. */
const CATALOGUE: Record<ProductKey, { price: number; currency: string; deleted: boolean }> = {
  eur: { price: 1250, currency: 'EUR', deleted: false },
  free: { price: 0, currency: 'EUR', deleted: false },
  usd: { price: 300, currency: 'USD', deleted: false },
  gone: { price: 500, currency: 'EUR', deleted: true },
};
const PRODUCT_KEYS = Object.keys(CATALOGUE) as ProductKey[];

// ---- the model ----

type Status = 'pending' | 'paid' | 'cancelled';

interface ItemSpec {
  product: ProductKey;
  quantity: number;
  unitPrice?: number;
}

interface ModelItem {
  /** Learned from the wire: from the add-item answer, or from the first read of a created order. */
  id: string | undefined;
  product: ProductKey;
  quantity: number;
  unitPrice: number;
}

interface ModelOrder {
  /** Creation order within the run, for messages. */
  n: number;
  id: string;
  deleted: boolean;
  status: Status;
  currency: string;
  customerId: string | null;
  note: string | null;
  metadata: Record<string, string>;
  items: ModelItem[];
  createdAt: string;
  /** The last updatedAt seen. */
  updatedAt: string;
  /** The plain representation's ETag for the current version, when an answer showed it. */
  tag: string | undefined;
  /** Tags of earlier versions: none of them may ever come back. */
  staleTags: string[];
}

interface Model {
  orders: ModelOrder[];
}

interface Real {
  caller: Caller;
  products: Record<ProductKey, string>;
}

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const STRONG_TAG = /^"[^"]+"$/;
const CURRENCY = /^[A-Z]{3}$/;
const MAX_METADATA_KEYS = 50;
const MAX_ITEMS = 100;

const totalOf = (o: ModelOrder): number => o.items.reduce((sum, i) => sum + i.quantity * i.unitPrice, 0);

function linksOf(o: ModelOrder): Record<string, { href: string; method?: string }> {
  const self = `/v1/orders/${o.id}`;
  const links: Record<string, { href: string; method?: string }> = { self: { href: self }, items: { href: `${self}/items` } };
  if (o.status === 'pending') links.cancel = { href: `${self}/cancel`, method: 'POST' };
  if (o.status === 'pending' && totalOf(o) > 0) links.pay = { href: `${self}/pay`, method: 'POST' };
  if (o.status === 'paid') links.refund = { href: '/v1/refunds', method: 'POST' };
  if (o.status === 'paid') links.refunds = { href: `/v1/refunds?orderId=${o.id}` };
  return links;
}

/** The order as GET renders it, timestamps aside. */
function expectedOrder(o: ModelOrder): Record<string, unknown> {
  return {
    id: o.id,
    status: o.status,
    currency: o.currency,
    total: totalOf(o),
    customerId: o.customerId,
    note: o.note,
    metadata: o.metadata,
    _links: linksOf(o),
  };
}

/**
 * Compares a rendered order with the model: every member but the timestamps exactly; createdAt
 * as first seen; updatedAt never earlier than the last one seen, and equal to it when the
 * version is the one last seen (`sameVersion`).
 */
function checkOrder(actual: Record<string, unknown>, o: ModelOrder, sameVersion: boolean, context: string, expanded = false): void {
  const { createdAt, updatedAt, ...rest } = actual;
  // The items, embedded only with expand=items, are compared on their own (readOrder).
  if (expanded) delete rest.items;
  assert.deepStrictEqual(rest, expectedOrder(o), `${context}: the order differs from the model`);
  assert.equal(createdAt, o.createdAt, `${context}: createdAt changed`);
  assert.match(String(updatedAt), ISO_MS, `${context}: updatedAt`);
  if (sameVersion) assert.equal(updatedAt, o.updatedAt, `${context}: updatedAt changed without a write`);
  else assert.ok(String(updatedAt) >= o.updatedAt, `${context}: updatedAt went back from ${o.updatedAt} to ${String(updatedAt)}`);
  o.updatedAt = String(updatedAt);
}

/** A write answered with the order: it matches the model (already updated) and carries a new tag. */
function acceptWrite(res: Reply, o: ModelOrder, context: string): void {
  assert.equal(res.status, 200, `${context}: expected 200, got ${res.status}: ${res.text.slice(0, 300)}`);
  checkOrder(res.json, o, false, context);
  newVersion(o, res.headers.etag, context);
}

function newVersion(o: ModelOrder, tag: string | undefined, context: string): void {
  assert.match(tag ?? '', STRONG_TAG, `${context}: no strong ETag`);
  assert.ok(tag !== o.tag && !o.staleTags.includes(tag!), `${context}: the write did not change the ETag ${tag}`);
  forgetTag(o);
  o.tag = tag;
}

/** The version moved on and the answer did not show the order's new tag. */
function forgetTag(o: ModelOrder): void {
  if (o.tag !== undefined) o.staleTags.push(o.tag);
  o.tag = undefined;
}

function pointersOf(res: Reply): string[] {
  const errors = (res.json.errors ?? []) as { pointer?: string }[];
  return [...new Set(errors.map((e) => e.pointer ?? '?'))].sort();
}

/** A 422 validation-failed naming exactly these members (RFC 6901 pointers, in any order). */
function expectInvalid(res: Reply, pointers: string[], context: string): void {
  expectProblem(res, 422, 'validation-failed', context);
  assert.deepStrictEqual(pointersOf(res), [...new Set(pointers)].sort(), `${context}: ${res.text.slice(0, 400)}`);
}

// ---- request bodies and what the schema says of them ----

/** Code points, as JSON Schema's minLength and maxLength count them. */
const codePoints = (s: string): number => [...s].length;

/**
 * Valid text: within the length bounds and free of lone surrogates. A lone surrogate is valid
 * JSON (as a \u escape) but no Unicode text (RFC 8259 §8.2; I-JSON, RFC 7493 §2.1, forbids it),
 * so it cannot be stored as UTF-8 and read back unchanged.
 */
const validText = (s: string, min: number, max: number): boolean => codePoints(s) >= min && codePoints(s) <= max && !/\p{Cs}/u.test(s);

const LONE_SURROGATES = ['\ud800', '\udbff', '\udc00', '\udfff'];

/**
 * Mostly short valid text (any code point); one string in about `oneIn` is text just inside or
 * just past a length bound, or holds a lone surrogate. Members that come in dozens (metadata
 * values) make invalid ones rarer, so that most writes still get through.
 */
function textArb(min: number, max: number, oneIn: number): fc.Arbitrary<string> {
  const around = (n: number) => fc.string({ unit: 'binary-ascii', minLength: Math.max(0, n - 1), maxLength: n + 1 });
  const broken = fc
    .tuple(fc.string({ unit: 'binary', maxLength: 4 }), fc.constantFrom(...LONE_SURROGATES), fc.string({ unit: 'binary', maxLength: 4 }))
    .map(([a, s, b]) => a + s + b);
  return fc.oneof(
    { weight: oneIn * 3, arbitrary: fc.string({ unit: 'binary', minLength: Math.max(min, 0), maxLength: Math.min(max, 24) }) },
    { weight: 1, arbitrary: around(min) },
    { weight: 1, arbitrary: around(max) },
    { weight: 1, arbitrary: broken },
  );
}

const customerIdArb = fc.option(textArb(1, 255, 20));
const noteArb = fc.option(textArb(0, 2000, 20));
const metadataValueArb = textArb(0, 500, 300);

// More keys than an order may hold, so merge patches cross the limit; some are names that mean
// something to JavaScript objects. (__proto__, constructor, prototype and any key starting with
// __ are refused by the schema: test/hostile.test.ts.)
const METADATA_KEYS = [
  ...Array.from({ length: 52 }, (_, i) => `k${i}`),
  ...['0', '10', '-', '.', '_', '_x', 'a__b', 'a.b-c_D', 'x'.repeat(40), 'toString', 'valueOf', 'hasOwnProperty', 'length', 'isPrototypeOf'],
];

const currencyArb = fc.oneof({ weight: 30, arbitrary: fc.constantFrom('EUR', 'USD', 'JPY') }, { weight: 1, arbitrary: fc.constantFrom('eur', 'EURO', '') });

const itemArb: fc.Arbitrary<ItemSpec> = fc.record(
  {
    product: fc.oneof(
      { weight: 6, arbitrary: fc.constant<ProductKey>('eur') },
      { weight: 2, arbitrary: fc.constant<ProductKey>('free') },
      { weight: 2, arbitrary: fc.constant<ProductKey>('usd') },
      { weight: 1, arbitrary: fc.constant<ProductKey>('gone') },
    ),
    quantity: fc.oneof({ weight: 20, arbitrary: fc.integer({ min: 1, max: 10_000 }) }, { weight: 1, arbitrary: fc.constant(0) }),
    unitPrice: fc.integer({ min: 0, max: 1_000_000_000 }),
  },
  { requiredKeys: ['product', 'quantity'] },
);

/** Around the most items an order holds (100), all priceable, so the limit itself is what is tested. */
const fullOrderItems: fc.Arbitrary<ItemSpec[]> = fc.array(
  fc.record({ product: fc.constant<ProductKey>('eur'), quantity: fc.integer({ min: 1, max: 3 }), unitPrice: fc.integer({ min: 0, max: 100 }) }),
  { minLength: MAX_ITEMS - 2, maxLength: MAX_ITEMS + 1 },
);

interface CreateBody {
  currency: string;
  customerId?: string | null;
  note?: string | null;
  metadata?: Record<string, string>;
  items?: ItemSpec[];
}

const createArb: fc.Arbitrary<CreateBody> = fc.record(
  {
    currency: currencyArb,
    customerId: customerIdArb,
    note: noteArb,
    metadata: fc.dictionary(fc.constantFrom(...METADATA_KEYS), metadataValueArb, { maxKeys: 48, size: 'max', noNullPrototype: true }),
    items: fc.oneof({ weight: 30, arbitrary: fc.array(itemArb, { minLength: 1, maxLength: 3 }) }, { weight: 1, arbitrary: fullOrderItems }),
  },
  { requiredKeys: ['currency'] },
);

interface PatchBody {
  currency?: string;
  customerId?: string | null;
  note?: string | null;
  metadata?: Record<string, string | null> | null;
}

const patchArb: fc.Arbitrary<PatchBody> = fc.record(
  {
    currency: currencyArb,
    customerId: customerIdArb,
    note: noteArb,
    metadata: fc.option(fc.dictionary(fc.constantFrom(...METADATA_KEYS), fc.option(metadataValueArb, { freq: 4 }), { maxKeys: 30, size: 'max', noNullPrototype: true }), {
      freq: 8,
    }),
  },
  { requiredKeys: [] },
);

interface ReplaceBody {
  currency: string;
  customerId?: string | null;
  note?: string | null;
  metadata?: Record<string, string>;
}

const replaceArb: fc.Arbitrary<ReplaceBody> = fc.record(
  {
    currency: currencyArb,
    customerId: customerIdArb,
    note: noteArb,
    metadata: fc.dictionary(fc.constantFrom(...METADATA_KEYS), metadataValueArb, { maxKeys: 50, noNullPrototype: true }),
  },
  { requiredKeys: ['currency'] },
);

/** Pointers of the members the JSON Schema refuses: checked before anything else (pipeline step 6). */
function schemaErrors(body: PatchBody | ReplaceBody | CreateBody): string[] {
  const errors: string[] = [];
  if (body.currency !== undefined && !CURRENCY.test(body.currency)) errors.push('/currency');
  if (typeof body.customerId === 'string' && !validText(body.customerId, 1, 255)) errors.push('/customerId');
  if (typeof body.note === 'string' && !validText(body.note, 0, 2000)) errors.push('/note');
  if (body.metadata && Object.keys(body.metadata).length > MAX_METADATA_KEYS) errors.push('/metadata');
  for (const [key, value] of Object.entries(body.metadata ?? {})) {
    if (typeof value === 'string' && !validText(value, 0, 500)) errors.push(`/metadata/${key}`);
  }
  const items = 'items' in body ? (body.items ?? []) : [];
  if (items.length > MAX_ITEMS) errors.push('/items');
  items.forEach((item, i) => {
    if (item.quantity < 1) errors.push(`/items/${i}/quantity`);
  });
  return errors;
}

function itemErrors(item: ItemSpec, prefix: string): string[] {
  return item.quantity < 1 ? [`${prefix}/quantity`] : [];
}

/** Pricing (CONTRACT §6): the product must exist; without unitPrice it must be in the order's currency. */
function pricingError(item: ItemSpec, currency: string, prefix: string): string | undefined {
  const product = CATALOGUE[item.product];
  if (product.deleted) return `${prefix}/productId`;
  if (item.unitPrice === undefined && product.currency !== currency) return `${prefix}/unitPrice`;
  return undefined;
}

function modelItem(item: ItemSpec, id?: string): ModelItem {
  return { id, product: item.product, quantity: item.quantity, unitPrice: item.unitPrice ?? CATALOGUE[item.product].price };
}

function wireItem(item: ItemSpec, real: Real): Record<string, unknown> {
  const out: Record<string, unknown> = { productId: real.products[item.product], quantity: item.quantity };
  if (item.unitPrice !== undefined) out.unitPrice = item.unitPrice;
  return out;
}

function mergeMetadata(base: Record<string, string>, patch: Record<string, string | null> | null): Record<string, string> {
  if (patch === null) return {};
  const out = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

const show = (v: unknown): string => {
  const s = JSON.stringify(v);
  return s.length > 300 ? `${s.slice(0, 300)}…` : s;
};

// ---- choosing the order a command acts on ----

/**
 * Which tag a write sends in If-Match: none, the current one (known only after an answer showed
 * it), or one of an earlier version of the same order (tags of different orders can be equal).
 */
type Guard = 'none' | 'current' | 'stale';

/** Which order a write acts on (`pick` modulo the candidates), and with which tag. */
interface Aim {
  pick: number;
  guard: Guard;
  /** Which of the order's earlier tags, for a stale guard. */
  stalePick: number;
}

interface Target {
  order: ModelOrder;
  ifMatch: string | undefined;
}

function candidates(m: Readonly<Model>, guard: Guard): ModelOrder[] {
  if (guard === 'current') return m.orders.filter((o) => o.tag !== undefined);
  if (guard === 'stale') return m.orders.filter((o) => o.staleTags.length > 0);
  return m.orders;
}

/** `pick` indexes the candidates modulo their number, so a shrunk sequence still finds an order. */
function target(m: Model, { pick, guard, stalePick }: Aim): Target {
  const list = candidates(m, guard);
  const order = list[pick % list.length]!;
  const ifMatch = guard === 'current' ? order.tag : guard === 'stale' ? order.staleTags[stalePick % order.staleTags.length] : undefined;
  return { order, ifMatch };
}

const aimText = ({ pick, guard, stalePick }: Aim): string => `#${pick}${guard === 'none' ? '' : ` If-Match ${guard}${guard === 'stale' ? ` ${stalePick}` : ''}`}`;
const guardHeaders = (t: Target): Record<string, string> | undefined => (t.ifMatch === undefined ? undefined : { 'if-match': t.ifMatch });
const label = (name: string, o: ModelOrder, guard: Guard): string => `${name} order #${o.n} ${o.id}${guard === 'none' ? '' : ` (If-Match: ${guard})`}`;

/** After a refused guarded write: the order reads exactly as before. */
async function unchanged(o: ModelOrder, real: Real, context: string): Promise<void> {
  await readOrder(o, real, `${context}, then GET`);
}

// ---- reads ----

/** GET the order and GET it with expand=items: both match the model, and so do the items. */
async function readOrder(o: ModelOrder, real: Real, context: string): Promise<void> {
  const href = `/v1/orders/${o.id}`;
  const res = await real.caller.get(href);
  if (o.deleted) {
    expectProblem(res, 404, 'not-found', `${context}: GET`);
    return;
  }
  assert.equal(res.status, 200, `${context}: GET answered ${res.status}: ${res.text.slice(0, 300)}`);
  const sameVersion = o.tag !== undefined;
  checkOrder(res.json, o, sameVersion, `${context}: GET`);
  const tag = res.headers.etag;
  assert.match(tag ?? '', STRONG_TAG, `${context}: GET has no strong ETag`);
  if (sameVersion) assert.equal(tag, o.tag, `${context}: the ETag changed without a write`);
  else assert.ok(!o.staleTags.includes(tag!), `${context}: GET shows the ETag of an earlier version`);
  o.tag = tag;

  const expanded = await real.caller.get(`${href}?expand=items`);
  assert.equal(expanded.status, 200, `${context}: GET ?expand=items answered ${expanded.status}`);
  checkOrder(expanded.json, o, true, `${context}: GET ?expand=items`, true);
  const items = expanded.json.items as Record<string, unknown>[];
  assert.ok(Array.isArray(items), `${context}: expand=items embeds no items`);
  assert.equal(items.length, o.items.length, `${context}: ${items.length} items, the model has ${o.items.length}`);
  items.forEach((actual, i) => {
    const want = o.items[i]!;
    const { createdAt, updatedAt, ...rest } = actual;
    assert.match(String(rest.id), /^itm_/, `${context}: item ${i} id`);
    want.id ??= String(rest.id);
    assert.deepStrictEqual(
      rest,
      {
        id: want.id,
        orderId: o.id,
        productId: real.products[want.product],
        quantity: want.quantity,
        unitPrice: want.unitPrice,
        _links: { self: { href: `${href}/items/${want.id}` }, order: { href }, product: { href: `/v1/products/${real.products[want.product]}` } },
      },
      `${context}: item ${i} differs from the model`,
    );
    assert.match(String(createdAt), ISO_MS);
    assert.match(String(updatedAt), ISO_MS);
  });
  assert.equal(new Set(items.map((i) => i.id)).size, items.length, `${context}: item ids repeat`);
}

// ---- the commands ----

type OrdersCommand = fc.AsyncCommand<Model, Real>;

class CreateOrder implements OrdersCommand {
  constructor(readonly body: CreateBody) {}

  check(): boolean {
    return true;
  }

  async run(m: Model, real: Real): Promise<void> {
    const b = this.body;
    const wire: Record<string, unknown> = { ...b };
    if (b.items) wire.items = b.items.map((i) => wireItem(i, real));
    const res = await real.caller.post('/v1/orders', wire);
    const context = `create ${show(wire)}`;

    const invalid = [...schemaErrors(b), ...(b.items ?? []).flatMap((item, i) => itemErrors(item, `/items/${i}`))];
    if (invalid.length) return expectInvalid(res, invalid, context);
    const unpriced = (b.items ?? []).map((item, i) => pricingError(item, b.currency, `/items/${i}`)).filter((p) => p !== undefined);
    if (unpriced.length) return expectInvalid(res, unpriced, context);

    assert.equal(res.status, 201, `${context}: expected 201, got ${res.status}: ${res.text.slice(0, 300)}`);
    const id = String(res.json.id);
    assert.match(id, /^ord_/, context);
    assert.equal(res.headers.location, `/v1/orders/${id}`, `${context}: Location`);
    assert.match(String(res.json.createdAt), ISO_MS, `${context}: createdAt`);
    const order: ModelOrder = {
      n: m.orders.length,
      id,
      deleted: false,
      status: 'pending',
      currency: b.currency,
      customerId: b.customerId ?? null,
      note: b.note ?? null,
      metadata: { ...b.metadata },
      items: (b.items ?? []).map((i) => modelItem(i)),
      createdAt: String(res.json.createdAt),
      updatedAt: String(res.json.createdAt),
      tag: undefined,
      staleTags: [],
    };
    checkOrder(res.json, order, false, context);
    newVersion(order, res.headers.etag, context);
    m.orders.push(order);
  }

  toString(): string {
    return `create ${show(this.body)}`;
  }
}

class GetOrder implements OrdersCommand {
  constructor(readonly pick: number) {}

  check(m: Readonly<Model>): boolean {
    return m.orders.length > 0;
  }

  async run(m: Model, real: Real): Promise<void> {
    const { order } = target(m, { pick: this.pick, guard: 'none', stalePick: 0 });
    await readOrder(order, real, label('get', order, 'none'));
  }

  toString(): string {
    return `get #${this.pick}`;
  }
}

/** GET, GET items, DELETE and pay on a deleted order: all 404. */
class TouchDeleted implements OrdersCommand {
  constructor(readonly pick: number) {}

  check(m: Readonly<Model>): boolean {
    return m.orders.some((o) => o.deleted);
  }

  async run(m: Model, real: Real): Promise<void> {
    const gone = m.orders.filter((o) => o.deleted);
    const o = gone[this.pick % gone.length]!;
    const href = `/v1/orders/${o.id}`;
    const context = label('after delete', o, 'none');
    expectProblem(await real.caller.get(href), 404, 'not-found', `${context}: GET`);
    expectProblem(await real.caller.get(`${href}/items`), 404, 'not-found', `${context}: GET items`);
    expectProblem(await real.caller.delete(href), 404, 'not-found', `${context}: DELETE`);
    expectProblem(await real.caller.post(`${href}/pay`), 404, 'not-found', `${context}: pay`);
  }

  toString(): string {
    return `touch deleted #${this.pick}`;
  }
}

/** PATCH is a JSON Merge Patch (RFC 7396); PUT replaces every writable member, clearing omitted ones. */
type Edit = { method: 'PATCH'; body: PatchBody; mediaType: string } | { method: 'PUT'; body: ReplaceBody };

/** A write to one order, with or without If-Match. */
abstract class WriteOrder implements OrdersCommand {
  constructor(readonly aim: Aim) {}

  check(m: Readonly<Model>): boolean {
    return candidates(m, this.aim.guard).length > 0;
  }

  abstract run(m: Model, real: Real): Promise<void>;
}

class EditOrder extends WriteOrder {
  constructor(
    aim: Aim,
    readonly edit: Edit,
  ) {
    super(aim);
  }

  /** The request to send; FillMetadata builds it from the order's current keys. */
  protected editFor(_o: ModelOrder): Edit {
    return this.edit;
  }

  async run(m: Model, real: Real): Promise<void> {
    const t = target(m, this.aim);
    const o = t.order;
    const edit = this.editFor(o);
    const href = `/v1/orders/${o.id}`;
    const context = `${label(edit.method, o, this.aim.guard)} ${show(edit.body)}${edit.method === 'PATCH' ? ` as ${edit.mediaType}` : ''}`;
    const res = edit.method === 'PATCH' ? await real.caller.patch(href, edit.body, guardHeaders(t), edit.mediaType) : await real.caller.put(href, edit.body, guardHeaders(t));

    const invalid = schemaErrors(edit.body);
    if (invalid.length) return expectInvalid(res, invalid, context);
    if (o.deleted) return void expectProblem(res, 404, 'not-found', context);
    if (this.aim.guard === 'stale') {
      expectProblem(res, 412, 'precondition-failed', context);
      return unchanged(o, real, context);
    }
    const { currency } = edit.body;
    if (currency !== undefined && currency !== o.currency && (o.status !== 'pending' || o.items.length > 0)) {
      return void expectProblem(res, 409, 'invalid-state', `${context} (${o.status}, ${o.items.length} items)`);
    }
    if (edit.method === 'PUT') {
      const b = edit.body;
      Object.assign(o, { currency: b.currency, customerId: b.customerId ?? null, note: b.note ?? null, metadata: { ...b.metadata } });
      return acceptWrite(res, o, context);
    }
    const b = edit.body;
    const metadata = b.metadata === undefined ? o.metadata : mergeMetadata(o.metadata, b.metadata);
    if (Object.keys(metadata).length > MAX_METADATA_KEYS) return expectInvalid(res, ['/metadata'], `${context} (${Object.keys(metadata).length} keys)`);
    if (b.currency !== undefined) o.currency = b.currency;
    if (b.customerId !== undefined) o.customerId = b.customerId;
    if (b.note !== undefined) o.note = b.note;
    o.metadata = metadata;
    acceptWrite(res, o, context);
  }

  override toString(): string {
    const media = this.edit.method === 'PATCH' ? ` as ${this.edit.mediaType}` : '';
    return `${this.edit.method} ${aimText(this.aim)} ${show(this.edit.body)}${media}`;
  }
}

/**
 * A merge patch that takes the order's metadata to 50 + `delta` keys after removing `removals`
 * of its keys: the boundary of the limit, which counts keys after the merge.
 */
class FillMetadata extends EditOrder {
  constructor(
    pick: number,
    readonly delta: number,
    readonly removals: number,
  ) {
    super({ pick, guard: 'none', stalePick: 0 }, { method: 'PATCH', body: {}, mediaType: 'application/merge-patch+json' });
  }

  protected override editFor(o: ModelOrder): Edit {
    const kept = Object.keys(o.metadata);
    const removed = kept.splice(0, this.removals);
    const fresh = METADATA_KEYS.filter((k) => !Object.hasOwn(o.metadata, k)).slice(0, Math.max(0, MAX_METADATA_KEYS + this.delta - kept.length));
    const metadata = Object.fromEntries([...removed.map((k) => [k, null]), ...fresh.map((k) => [k, 'v'])]);
    return { method: 'PATCH', body: { metadata }, mediaType: 'application/merge-patch+json' };
  }

  override toString(): string {
    return `fill the metadata of #${this.aim.pick} to ${MAX_METADATA_KEYS + this.delta} keys, removing ${this.removals}`;
  }
}

type Action = 'pay' | 'cancel' | 'delete';

class ActOnOrder extends WriteOrder {
  constructor(
    readonly action: Action,
    aim: Aim,
  ) {
    super(aim);
  }

  async run(m: Model, real: Real): Promise<void> {
    const t = target(m, this.aim);
    const o = t.order;
    const href = `/v1/orders/${o.id}`;
    const context = label(this.action, o, this.aim.guard);
    const res = this.action === 'delete' ? await real.caller.delete(href, guardHeaders(t)) : await real.caller.post(`${href}/${this.action}`, undefined, guardHeaders(t));

    if (o.deleted) return void expectProblem(res, 404, 'not-found', context);
    if (this.aim.guard === 'stale') {
      expectProblem(res, 412, 'precondition-failed', context);
      return unchanged(o, real, context);
    }
    switch (this.action) {
      case 'pay':
        if (o.status !== 'pending' || totalOf(o) <= 0) return void expectProblem(res, 409, 'invalid-state', `${context} (${o.status}, total ${totalOf(o)})`);
        o.status = 'paid';
        return acceptWrite(res, o, context);
      case 'cancel':
        if (o.status !== 'pending') return void expectProblem(res, 409, 'invalid-state', `${context} (${o.status})`);
        o.status = 'cancelled';
        return acceptWrite(res, o, context);
      case 'delete':
        // Money has moved once an order is paid: it cannot be deleted.
        if (o.status === 'paid') return void expectProblem(res, 409, 'invalid-state', context);
        assert.equal(res.status, 204, `${context}: expected 204, got ${res.status}: ${res.text.slice(0, 300)}`);
        assert.equal(res.raw.length, 0, `${context}: 204 with a body`);
        o.deleted = true;
        forgetTag(o);
        return;
    }
  }

  override toString(): string {
    return `${this.action} ${aimText(this.aim)}`;
  }
}

class AddItem implements OrdersCommand {
  constructor(
    readonly pick: number,
    readonly item: ItemSpec,
  ) {}

  check(m: Readonly<Model>): boolean {
    return m.orders.length > 0;
  }

  async run(m: Model, real: Real): Promise<void> {
    const { order: o } = target(m, { pick: this.pick, guard: 'none', stalePick: 0 });
    const href = `/v1/orders/${o.id}`;
    const wire = wireItem(this.item, real);
    const context = `${label('add item', o, 'none')} ${show(wire)}`;
    const res = await real.caller.post(`${href}/items`, wire);

    const invalid = itemErrors(this.item, '');
    if (invalid.length) return expectInvalid(res, invalid, context);
    if (o.deleted) return void expectProblem(res, 404, 'not-found', context);
    const unpriced = pricingError(this.item, o.currency, '');
    if (unpriced) return expectInvalid(res, [unpriced], context);
    if (o.status !== 'pending') return void expectProblem(res, 409, 'invalid-state', `${context} (${o.status})`);
    if (o.items.length >= MAX_ITEMS) return void expectProblem(res, 409, 'invalid-state', `${context} (full)`);

    assert.equal(res.status, 201, `${context}: expected 201, got ${res.status}: ${res.text.slice(0, 300)}`);
    const id = String(res.json.id);
    assert.match(id, /^itm_/, context);
    assert.equal(res.headers.location, `${href}/items/${id}`, `${context}: Location`);
    const item = modelItem(this.item, id);
    const { createdAt: _c, updatedAt: _u, ...rest } = res.json as Record<string, unknown>;
    assert.deepStrictEqual(
      rest,
      {
        id,
        orderId: o.id,
        productId: wire.productId,
        quantity: item.quantity,
        unitPrice: item.unitPrice,
        _links: { self: { href: `${href}/items/${id}` }, order: { href }, product: { href: `/v1/products/${String(wire.productId)}` } },
      },
      `${context}: the item differs from the model`,
    );
    o.items.push(item);
    // The order has a new version, whose tag this answer (the item's) does not show.
    forgetTag(o);
  }

  toString(): string {
    return `add item to #${this.pick} ${show(this.item)}`;
  }
}

/** The list, filtered or not: exactly the run's live orders, newest first (ties by id). */
class ListOrders implements OrdersCommand {
  constructor(readonly status: Status | undefined) {}

  check(): boolean {
    return true;
  }

  async run(m: Model, real: Real): Promise<void> {
    const query = `limit=100${this.status ? `&status=${this.status}` : ''}`;
    const context = `list ?${query}`;
    const res = await real.caller.get(`/v1/orders?${query}`);
    assert.equal(res.status, 200, `${context}: ${res.status} ${res.text.slice(0, 300)}`);
    const want = m.orders
      .filter((o) => !o.deleted && (this.status === undefined || o.status === this.status))
      .sort((a, b) => (a.createdAt !== b.createdAt ? (a.createdAt < b.createdAt ? 1 : -1) : a.id < b.id ? 1 : -1));
    const data = res.json.data as Record<string, unknown>[];
    assert.deepStrictEqual(
      data.map((d) => d.id),
      want.map((o) => o.id),
      `${context}: the listed orders differ from the model`,
    );
    assert.equal(res.json.hasMore, false, context);
    data.forEach((d, i) => checkOrder(d, want[i]!, want[i]!.tag !== undefined, `${context}: entry ${i}`));
  }

  toString(): string {
    return `list${this.status ? ` status=${this.status}` : ''}`;
  }
}

// ---- the run ----

const pick = fc.nat({ max: 30 });
const guardArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant<Guard>('none') },
  { weight: 1, arbitrary: fc.constant<Guard>('current') },
  { weight: 1, arbitrary: fc.constant<Guard>('stale') },
);
const aimArb: fc.Arbitrary<Aim> = fc.record({ pick, guard: guardArb, stalePick: fc.nat() });
const actionArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant<Action>('pay') },
  { weight: 1, arbitrary: fc.constant<Action>('cancel') },
  { weight: 2, arbitrary: fc.constant<Action>('delete') },
);

/** One weighted choice: orders with items come first, since most rules need them. */
const commandArb: fc.Arbitrary<OrdersCommand> = fc.oneof(
  { weight: 3, arbitrary: createArb.map((b) => new CreateOrder(b)) },
  { weight: 1, arbitrary: createArb.map((b) => new CreateOrder({ ...b, items: undefined })) },
  { weight: 2, arbitrary: pick.map((p) => new GetOrder(p)) },
  { weight: 1, arbitrary: pick.map((p) => new TouchDeleted(p)) },
  {
    weight: 3,
    arbitrary: fc
      .tuple(aimArb, patchArb, fc.constantFrom('application/merge-patch+json', 'application/json'))
      .map(([aim, body, mediaType]) => new EditOrder(aim, { method: 'PATCH', body, mediaType })),
  },
  { weight: 1, arbitrary: fc.tuple(aimArb, replaceArb).map(([aim, body]) => new EditOrder(aim, { method: 'PUT', body })) },
  { weight: 1, arbitrary: fc.tuple(pick, fc.integer({ min: -1, max: 1 }), fc.nat({ max: 2 })).map(([p, d, r]) => new FillMetadata(p, d, r)) },
  { weight: 3, arbitrary: fc.tuple(actionArb, aimArb).map(([action, aim]) => new ActOnOrder(action, aim)) },
  { weight: 2, arbitrary: fc.tuple(pick, itemArb).map(([p, i]) => new AddItem(p, i)) },
  { weight: 1, arbitrary: fc.option(fc.constantFrom<Status>('pending', 'paid', 'cancelled'), { nil: undefined }).map((s) => new ListOrders(s)) },
);

/** Counts answers by method, route and status (to see which rules a run exercised, log `tally`). */
class TallyingHttp extends HttpClient {
  readonly tally = new Map<string, number>();

  override async send(method: Parameters<HttpClient['send']>[0], path: string, opts?: SendOptions): Promise<Reply> {
    const res = await super.send(method, path, opts);
    const route = path.replace(/\?.*$/, '').replace(/ord_\w+/, '{id}').replace(/itm_\w+/, '{item}').replace(/prd_\w+/, '{product}');
    const key = `${method} ${route} ${res.status}`;
    this.tally.set(key, (this.tally.get(key) ?? 0) + 1);
    return res;
  }
}

/** A fresh tenant with the catalogue: the product `gone` is created and deleted. */
async function freshWorld(http: HttpClient, secret: string): Promise<Real> {
  const tenant = `model-${randomBytes(6).toString('hex')}`;
  const caller = new Caller(http, tenant, await mintToken(secret, { sub: `usr-${tenant}`, tenant, scope: ALL_SCOPES }));
  const products = {} as Record<ProductKey, string>;
  await Promise.all(
    PRODUCT_KEYS.map(async (key) => {
      const { price, currency } = CATALOGUE[key];
      const res = await caller.post('/v1/products', { name: `Product ${key}`, price, currency });
      assert.equal(res.status, 201, res.text);
      products[key] = String(res.json.id);
    }),
  );
  const removed = await caller.delete(`/v1/products/${products.gone}`);
  assert.equal(removed.status, 204, removed.text);
  return { caller, products };
}

test('the orders API behaves as the model predicts, over any sequence of commands', (t) => modelHolds(t, t.context.service, 800));

// Cluster mode: a gateway and two actor nodes splitting the partitions over a nats-server of
// the test's own (a missing nats-server fails this test, never skips it). Fewer runs: every
// command crosses NATS, and the embedded run above searches the same space more widely.
test('the orders API behaves as the model predicts in cluster mode too', async (t) => {
  const cluster = await startCluster();
  t.teardown(() => cluster.close());
  await modelHolds(t, cluster, 500);
});

/** The model run against `service`, with how many sequences to try. */
async function modelHolds(t: ExecutionContext, service: RunningService, numRuns: number): Promise<void> {
  const http = new TallyingHttp(service.url);
  t.teardown(() => http.close());
  await assertProperty(
    t,
    fc.asyncProperty(fc.commands([commandArb], { maxCommands: 30, size: 'max' }), async (cmds) => {
      const real = await freshWorld(http, service.secret);
      const model: Model = { orders: [] };
      await fc.asyncModelRun(() => ({ model, real }), cmds);
      // Whatever the sequence did, every order still reads as the model says.
      for (const o of model.orders) await readOrder(o, real, `after the run, ${label('order', o, 'none')}`);
    }),
    { numRuns },
  );
  const byStatus = new Map<string, number>();
  for (const [key, n] of http.tally) {
    const status = key.split(' ')[2]!;
    byStatus.set(status, (byStatus.get(status) ?? 0) + n);
  }
  t.log(`answers by status: ${[...byStatus].sort().map(([status, n]) => `${status}: ${n}`).join(', ')}`);
  // Not a vacuous pass: the runs reached every outcome the model predicts for a write.
  for (const status of ['200', '201', '204', '404', '409', '412', '422']) t.true(byStatus.has(status), `no command was answered ${status}`);
}
