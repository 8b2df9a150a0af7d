// Orders and their line items (CONTRACT §6): the one place to read to understand how an order
// looks on the wire, which requests change it, and which links it offers.

import { ApiError, type FieldError } from '../../common/errors.js';
import { newId, parseId, partitionOf } from '../../common/ids.js';
import type { Command, ItemInput, ItemRecord, OrderInput, OrderPatch, OrderRecord, OrderStatus, ProductRecord } from '../../proto/messages.js';
import { MAX_ITEMS_PER_ORDER, ORDER_SORTS } from '../../actors/orders.js';
import { refundable } from '../../actors/refunds.js';
import {
  LIST_PARAMS,
  decodeCursor,
  encodeCursor,
  expandParam,
  fieldsParam,
  invalidParameter,
  gatherPage,
  pageFingerprint,
  pageLinks,
  pageText,
  parseExpand,
  parseAll,
  parseFields,
  parseLimit,
  parseSort,
  project,
  sortParam,
  variantOf,
} from '../collection.js';
import { type Ctx, type JsonSchema, type Outcome, type RouteDef, partitionForNew, guards, principalOf, route } from '../route.js';
import { idParam, target, iso, metadataSchema, metadataPatchSchema, currencySchema, newCurrencySchema, READ_ONLY, UNICODE_TEXT, collectionSchema, linksSchema, problemResponses } from './common.js';
import { fetchProducts, renderProduct } from './products.js';
import { cachedRendering, versionTag } from '../representation.js';
import { moneyFor, moneyInputSchema, moneySchema, parseMoney, type Money } from '../money.js';
import { relink, versionPath, type ApiVersion } from '../versions.js';

const BASE = '/v1/orders';
/** Where orders live in one version: links in a v2 rendering stay in v2. */
const baseOf = (v: ApiVersion): string => `/${v}/orders`;
export const ORDER_FIELDS = ['id', 'status', 'currency', 'total', 'customerId', 'note', 'metadata', 'createdAt', 'updatedAt'] as const;
/** v2 has no top-level currency: it is inside `total` (CONTRACT §9). */
export const ORDER_FIELDS_V2 = ORDER_FIELDS.filter((f) => f !== 'currency');
const orderFields = (v: ApiVersion): readonly string[] => (v === 'v1' ? ORDER_FIELDS : ORDER_FIELDS_V2);
/** Most a unit price may be, in minor units. */
const MAX_UNIT_PRICE = 1_000_000_000;
const MAX_QUANTITY = 10_000;
/** Most an order's total can come to, in minor units (1e15, within Number's exact integers). */
export const MAX_ORDER_TOTAL = MAX_ITEMS_PER_ORDER * MAX_QUANTITY * MAX_UNIT_PRICE;
export const ORDER_EXPANDS = ['items', 'items.product'] as const;
const ITEM_FIELDS = ['id', 'orderId', 'productId', 'quantity', 'unitPrice', 'createdAt', 'updatedAt'] as const;
const STATUSES: OrderStatus[] = ['pending', 'paid', 'cancelled', 'refunded'];

// ---- schemas: they validate requests and document the API (gateway/openapi.ts) ----

const nullableString = (max: number): JsonSchema => ({ type: ['string', 'null'], minLength: 1, maxLength: max, pattern: UNICODE_TEXT });

const itemInputSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['productId', 'quantity'],
  properties: {
    productId: { type: 'string', minLength: 1, maxLength: 64 },
    quantity: { type: 'integer', minimum: 1, maximum: MAX_QUANTITY },
    unitPrice: { type: 'integer', minimum: 0, maximum: MAX_UNIT_PRICE, description: 'Minor units; defaults to the product price.' },
  },
};

/** v2: the unit price is a money object in the order's currency. */
const itemInputSchemaV2: JsonSchema = {
  ...itemInputSchema,
  properties: { ...(itemInputSchema.properties as object), unitPrice: moneyInputSchema('In the order\'s currency; defaults to the product price.', MAX_UNIT_PRICE) },
};

const orderWritable = {
  currency: currencySchema,
  customerId: nullableString(255),
  note: { type: ['string', 'null'], maxLength: 2000, pattern: UNICODE_TEXT },
  metadata: metadataSchema,
};

export const createSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['currency'],
  properties: { ...orderWritable, currency: newCurrencySchema, items: { type: 'array', maxItems: MAX_ITEMS_PER_ORDER, items: itemInputSchema } },
};

/** v2 creates: `currency` still names the order's currency; item prices are money objects. */
export const createSchemaV2: JsonSchema = {
  ...createSchema,
  properties: { ...orderWritable, currency: newCurrencySchema, items: { type: 'array', maxItems: MAX_ITEMS_PER_ORDER, items: itemInputSchemaV2 } },
};

const replaceSchema: JsonSchema = { type: 'object', additionalProperties: false, required: ['currency'], properties: orderWritable };

export const patchSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: { ...orderWritable, metadata: metadataPatchSchema },
};

const emptySchema: JsonSchema = { type: 'object', additionalProperties: false, maxProperties: 0 };

const itemSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    orderId: { type: 'string' },
    productId: { type: 'string' },
    quantity: { type: 'integer' },
    unitPrice: { type: 'integer' },
    product: { type: ['object', 'null'], description: 'With expand=items.product.' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    _links: linksSchema,
  },
};

const itemSchemaV2: JsonSchema = { ...itemSchema, properties: { ...(itemSchema.properties as object), unitPrice: moneySchema } };

const orderSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string', examples: ['ord_3f0a1b2c3d4e5f6g7h8i9j'] },
    status: { type: 'string', enum: STATUSES },
    currency: currencySchema,
    total: { type: 'integer', description: 'Sum of the items in minor units; read-only.' },
    customerId: nullableString(255),
    note: { type: ['string', 'null'] },
    metadata: metadataSchema,
    items: { type: 'array', items: itemSchema, description: 'With expand=items.' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    _links: linksSchema,
  },
};

const orderSchemaV2: JsonSchema = (() => {
  const { currency: _currency, ...rest } = orderSchema.properties as Record<string, JsonSchema>;
  return {
    type: 'object',
    properties: { ...rest, total: { ...moneySchema, description: 'Sum of the items; read-only.' }, items: { type: 'array', items: itemSchemaV2, description: 'With expand=items.' } },
  };
})();

/** The `status` filter of a list: undefined for every status. */
function parseStatus(query: URLSearchParams): OrderStatus | undefined {
  const status = query.get('status') ?? undefined;
  if (status !== undefined && !STATUSES.includes(status as OrderStatus)) throw invalidParameter('status', `must be one of ${STATUSES.join(', ')}`);
  return status as OrderStatus | undefined;
}

// ---- rendering ----

function orderLinks(o: OrderRecord, v: ApiVersion): Record<string, { href: string; method?: string }> {
  const self = `${baseOf(v)}/${o.id}`;
  const links: Record<string, { href: string; method?: string }> = { self: { href: self }, items: { href: `${self}/items` } };
  if (o.status === 'pending') links.cancel = { href: `${self}/cancel`, method: 'POST' };
  if (o.status === 'pending' && o.total > 0) links.pay = { href: `${self}/pay`, method: 'POST' };
  // Refunds start at POST /{version}/refunds naming the order (an asynchronous operation, CONTRACT §8).
  const refunds = versionPath('/v1/refunds', v);
  // Only while one can start: not once all that is left is held by refunds still processing.
  if (refundable(o)) links.refund = { href: refunds, method: 'POST' };
  if (o.status === 'paid' || o.status === 'refunded') links.refunds = { href: `${refunds}?orderId=${o.id}` };
  return links;
}


function renderItem(o: OrderRecord, i: ItemRecord, products: Map<string, ProductRecord> | undefined, v: ApiVersion): Record<string, unknown> {
  const base = baseOf(v);
  const rep: Record<string, unknown> = {
    id: i.id,
    orderId: o.id,
    productId: i.productId,
    quantity: i.quantity,
    unitPrice: moneyFor(i.unitPrice, o.currency, v),
    createdAt: iso(i.createdAt),
    updatedAt: iso(i.updatedAt),
  };
  if (products) {
    const p = products.get(i.productId);
    rep.product = p ? relink(renderProduct(p), v) : null;
  }
  rep._links = { self: { href: `${base}/${o.id}/items/${i.id}` }, order: { href: `${base}/${o.id}` }, product: { href: `/${v}/products/${i.productId}` } };
  return rep;
}

export function renderOrder(o: OrderRecord, fields: Set<string> | undefined, expand: Set<string>, products: Map<string, ProductRecord> | undefined, v: ApiVersion): Record<string, unknown> {
  const rep: Record<string, unknown> = { id: o.id, status: o.status };
  if (v === 'v1') rep.currency = o.currency;
  Object.assign(rep, {
    total: moneyFor(o.total, o.currency, v),
    customerId: o.customerId,
    note: o.note,
    metadata: o.metadata,
    createdAt: iso(o.createdAt),
    updatedAt: iso(o.updatedAt),
  });
  if (expand.has('items')) rep.items = o.items.map((i) => renderItem(o, i, products, v));
  rep._links = orderLinks(o, v);
  return project(rep, fields, expand);
}

/** An order as API version `v` renders it in full: what webhook events of that version carry. */
export function renderOrderFor(o: OrderRecord, v: ApiVersion): Record<string, unknown> {
  return renderOrder(o, undefined, new Set(), undefined, v);
}

/** Most distinct products one answer may embed: each is a read, and a page must stay bounded. */
const MAX_EMBEDDED_PRODUCTS = 500;

/** Products embedded by expand=items.product. */
async function expansionProducts(ctx: Ctx, orders: OrderRecord[], expand: Set<string>): Promise<Map<string, ProductRecord> | undefined> {
  if (!expand.has('items.product')) return undefined;
  const ids = new Set(orders.flatMap((o) => o.items.map((i) => i.productId)));
  if (ids.size > MAX_EMBEDDED_PRODUCTS) {
    throw invalidParameter('expand', `items.product would embed ${ids.size} products here, more than ${MAX_EMBEDDED_PRODUCTS}; ask for a smaller limit`);
  }
  return fetchProducts(ctx, ids);
}

/** What, beside its version, decides an order's bytes: fields, expand, embedded products' versions. */
function orderVariant(o: OrderRecord, fields: Set<string> | undefined, expand: Set<string>, products: Map<string, ProductRecord> | undefined, v: ApiVersion): string {
  const embedded = products ? [...new Set(o.items.map((i) => i.productId))].sort().map((id) => `${id}@${products.get(id)?.version ?? 0}`).join(',') : '';
  return variantOf(fields, expand, v === 'v1' ? embedded : `${embedded};api=${v}`);
}

/** The fields and expansions a GET of one order asks for. */
function orderView(ctx: Ctx): { fields: Set<string> | undefined; expand: Set<string> } {
  const [fields, expand] = parseAll(
    () => parseFields(ctx.query, orderFields(ctx.version)),
    () => parseExpand(ctx.query, ORDER_EXPANDS),
  );
  return { fields, expand };
}

/** The read of the order in the path. Spelled out: spreading target() cost a GET 2% of its instructions. */
function orderGet(ctx: Ctx): Extract<Command, { kind: 'order.get' }> {
  const id = orderIdOf(ctx);
  return { kind: 'order.get', tenant: principalOf(ctx).tenant, partition: partitionOf(id), id };
}

/** A GET of one order: rendered on demand, tagged by its version and variant. */
function orderRead(ctx: Ctx, order: OrderRecord, fields: Set<string> | undefined, expand: Set<string>, products: Map<string, ProductRecord> | undefined): Outcome {
  return {
    status: 200,
    render: () => renderOrder(order, fields, expand, products, ctx.version),
    cacheKey: order.id,
    record: order,
    tag: { version: order.version, variant: orderVariant(order, fields, expand, products, ctx.version) },
    versioned: true,
  };
}

/**
 * The ETag a GET of the order without fields or expand answers when sent with the request's
 * `Accept` and `Accept-Encoding` (as a single write's own ETag is): for the next If-Match, or
 * If-None-Match on that GET. The version suffix comes twice, as on the GET's way: once in the
 * variant, once from the pipeline (gateway/pipeline.ts render).
 */
export function plainOrderTag(version: number, ctx: Pick<Ctx, 'version' | 'media' | 'coding'>): string {
  const api = ctx.version === 'v1' ? '' : `;api=${ctx.version}`;
  return versionTag(version, variantOf(undefined, new Set(), api) + api, ctx.media, ctx.coding);
}

// ---- request helpers ----

function orderIdOf(ctx: Ctx): string {
  return idParam(ctx, 'order', 'orderId', 'order');
}

function orderOutcome(ctx: Ctx, o: OrderRecord, status = 200, location?: string): Outcome {
  const out: Outcome = {
    status,
    render: () => renderOrder(o, undefined, new Set(), undefined, ctx.version),
    cacheKey: o.id,
    record: o,
    // The variant a plain GET of the order names, so a write's ETag revalidates that GET (304).
    tag: { version: o.version, variant: orderVariant(o, undefined, new Set(), undefined, ctx.version) },
    versioned: true,
  };
  if (location) out.location = location;
  return out;
}

export function inputOf(body: Record<string, unknown>): OrderInput {
  return {
    currency: body.currency as string,
    customerId: (body.customerId as string | null | undefined) ?? null,
    note: (body.note as string | null | undefined) ?? null,
    metadata: (body.metadata as Record<string, string> | undefined) ?? {},
  };
}

/**
 * Turns item requests into priced items: every product must exist in the caller's tenant, and
 * a missing unitPrice takes the product's price, which must then be in the order's currency.
 */
export async function priceItems(ctx: Ctx, orderId: string, currency: string, raw: Record<string, unknown>[], pointer: (i: number) => string): Promise<ItemInput[]> {
  if (raw.length === 0) return [];
  return priceWith(await fetchProducts(ctx, productIdsOf(raw)), orderId, currency, raw, pointer);
}

export function productIdsOf(raw: Record<string, unknown>[]): Set<string> {
  const ids = new Set<string>();
  for (const r of raw) if (parseId('product', r.productId as string)) ids.add(r.productId as string);
  return ids;
}

/** priceItems over products already fetched (a batch fetches every operation's products at once). */
export function priceWith(products: Map<string, ProductRecord>, orderId: string, currency: string, raw: Record<string, unknown>[], pointer: (i: number) => string): ItemInput[] {
  const errors: FieldError[] = [];
  const items: ItemInput[] = [];
  raw.forEach((r, i) => {
    const productId = r.productId as string;
    const product = products.get(productId);
    if (!product) {
      errors.push({ pointer: `${pointer(i)}/productId`, detail: 'names no product' });
      return;
    }
    // v1 writes minor units; v2 a money object in the order's currency (the schema decided which).
    let unitPrice = typeof r.unitPrice === 'object' && r.unitPrice !== null ? parseMoney(r.unitPrice as Money, currency, `${pointer(i)}/unitPrice`, MAX_UNIT_PRICE) : (r.unitPrice as number | undefined);
    if (unitPrice === undefined) {
      if (product.currency !== currency) {
        errors.push({ pointer: `${pointer(i)}/unitPrice`, detail: `is required: the product is priced in ${product.currency}, the order in ${currency}` });
        return;
      }
      unitPrice = product.price;
    }
    items.push({ id: newId('item', partitionOf(orderId)), productId, quantity: r.quantity as number, unitPrice });
  });
  if (errors.length) throw new ApiError('validation-failed', 'Some items cannot be priced.', { errors });
  return items;
}

// ---- routes ----

const actionResponses = { 200: 'The order after the action.', ...problemResponses(404, 409, 412) };

function action(kind: 'order.pay' | 'order.cancel', verb: string): RouteDef {
  return route({
    method: 'POST',
    path: `${BASE}/{orderId}/${verb}`,
    operationId: `${verb}Order`,
    summary: `${verb[0]!.toUpperCase()}${verb.slice(1)} an order (offered while the order's \`${verb}\` link is present).`,
    tag: 'orders',
    scope: 'orders:write',
    body: { schema: emptySchema, required: false },
    responses: actionResponses,
    response: orderSchema,
    async handle(ctx) {
      const id = orderIdOf(ctx);
      return orderOutcome(ctx, await ctx.bus.call({ kind, ...target(ctx, id), ...guards(ctx) }));
    },
    replay: { partition: (ctx) => partitionOf(orderIdOf(ctx)), outcome: (ctx, reply) => orderOutcome(ctx, reply as OrderRecord) },
    v2: { response: orderSchemaV2 },
  });
}

/** A new order's answer: also what a keyed retry of the create replays. */
function createdOrder(ctx: Ctx, order: OrderRecord): Outcome {
  // The answer's id, not one minted for this request: a replay answers the first attempt's order.
  return orderOutcome(ctx, order, 201, `${baseOf(ctx.version)}/${order.id}`);
}

/** A new line item's answer, from the order the add returned. */
function addedItem(ctx: Ctx, order: OrderRecord): Outcome {
  // Items are only ever appended, so the one this write added is the last in its answer; a
  // replayed answer names the item of the first attempt.
  const item = order.items[order.items.length - 1]!;
  return {
    status: 201,
    body: renderItem(order, item, undefined, ctx.version),
    tag: { version: order.version, variant: `item:${item.id};${variantOf(undefined, new Set())}` },
    location: `${baseOf(ctx.version)}/${order.id}/items/${item.id}`,
    versioned: true,
  };
}

/** The list's query parameters: v2 has no top-level `currency` to keep. */
function listQuery(v: ApiVersion): RouteDef['query'] {
  return {
    status: { description: 'Only orders in this status.', schema: { type: 'string', enum: STATUSES } },
    sort: sortParam(ORDER_SORTS, '-createdAt'),
    fields: fieldsParam(orderFields(v)),
    expand: expandParam(ORDER_EXPANDS),
    ...LIST_PARAMS,
  };
}

export const orderRoutes: RouteDef[] = [
  route({
    method: 'GET',
    path: BASE,
    operationId: 'listOrders',
    summary: 'List orders, newest first by default.',
    tag: 'orders',
    scope: 'orders:read',
    query: listQuery('v1'),
    responses: { 200: 'A page of orders.', ...problemResponses(400) },
    response: collectionSchema(orderSchema),
    v2: { query: listQuery('v2'), response: collectionSchema(orderSchemaV2) },
    async handle(ctx) {
      const tenant = principalOf(ctx).tenant;
      const [status, { sort, dir }, limit, fields, expand] = parseAll(
        () => parseStatus(ctx.query),
        () => parseSort(ctx.query, ORDER_SORTS, '-createdAt'),
        () => parseLimit(ctx.query),
        () => parseFields(ctx.query, orderFields(ctx.version)),
        () => parseExpand(ctx.query, ORDER_EXPANDS),
      );
      const filterKey = `status=${status ?? ''}`;
      const sortKey = `${dir === 'desc' ? '-' : ''}${sort}`;
      const after = decodeCursor(ctx.query, 'orders', filterKey, sortKey, 'number');
      const { rows, hasMore } = await gatherPage<OrderRecord>(ctx.bus, 'order.list', { tenant, filter: status, sort, dir, after, limit, withChildren: expand.has('items') });
      const orders = rows.map((r) => r.record);
      const products = await expansionProducts(ctx, orders, expand);
      const last = rows[rows.length - 1];
      const links = pageLinks(baseOf(ctx.version), ctx.query, hasMore && last ? encodeCursor('orders', filterKey, sortKey, last.v, last.record.id) : undefined);
      const variants = orders.map((o) => orderVariant(o, fields, expand, products, ctx.version));
      return {
        status: 200,
        text: pageText(orders.map((o, i) => cachedRendering(o.id, o.version, variants[i]!, () => renderOrder(o, fields, expand, products, ctx.version))), hasMore, links),
        tag: { fingerprint: pageFingerprint(orders, variants.join(';'), hasMore, links) },
        versioned: true,
      };
    },
  }),

  route({
    method: 'POST',
    path: BASE,
    operationId: 'createOrder',
    summary: 'Create an order, optionally with its first items.',
    tag: 'orders',
    scope: 'orders:write',
    body: { schema: createSchema, readOnly: READ_ONLY },
    responses: { 201: 'The new order; Location names it.', ...problemResponses(400, 415, 422) },
    response: orderSchema,
    v2: { body: { schema: createSchemaV2, readOnly: READ_ONLY }, response: orderSchemaV2 },
    async handle(ctx) {
      const body = ctx.body as Record<string, unknown>;
      const id = newId('order', partitionForNew(ctx));
      const input = inputOf(body);
      const items = await priceItems(ctx, id, input.currency, (body.items as Record<string, unknown>[] | undefined) ?? [], (i) => `/items/${i}`);
      const order = await ctx.bus.call({ kind: 'order.create', tenant: principalOf(ctx).tenant, partition: partitionOf(id), id, input, items });
      return createdOrder(ctx, order);
    },
    replay: { partition: partitionForNew, outcome: (ctx, reply) => createdOrder(ctx, reply as OrderRecord) },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{orderId}`,
    operationId: 'getOrder',
    summary: 'Read an order. Send If-None-Match to revalidate.',
    tag: 'orders',
    scope: 'orders:read',
    query: { fields: fieldsParam(ORDER_FIELDS), expand: expandParam(ORDER_EXPANDS) },
    responses: { 200: 'The order.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400, 404) },
    response: orderSchema,
    v2: { query: { fields: fieldsParam(ORDER_FIELDS_V2), expand: expandParam(ORDER_EXPANDS) }, response: orderSchemaV2 },
    read(ctx) {
      const { fields, expand } = orderView(ctx);
      // Products are read from their own owners: that waits.
      if (expand.has('items.product')) return undefined;
      const order = ctx.bus.readNow(orderGet(ctx));
      return order && orderRead(ctx, order, fields, expand, undefined);
    },
    async handle(ctx) {
      const { fields, expand } = orderView(ctx);
      const order = await ctx.bus.call(orderGet(ctx));
      // Without items.product there is nothing to fetch, and no reason to wait a turn.
      const products = expand.has('items.product') ? await expansionProducts(ctx, [order], expand) : undefined;
      return orderRead(ctx, order, fields, expand, products);
    },
  }),

  route({
    method: 'PUT',
    path: `${BASE}/{orderId}`,
    operationId: 'replaceOrder',
    summary: 'Replace every writable member of an order (omitted optional members are cleared). Send If-Match to guard against lost updates.',
    tag: 'orders',
    scope: 'orders:write',
    body: { schema: replaceSchema, readOnly: [...READ_ONLY, 'items'] },
    responses: { 200: 'The replaced order.', ...problemResponses(404, 409, 412, 415, 422) },
    response: orderSchema,
    v2: { response: orderSchemaV2 },
    async handle(ctx) {
      const input = inputOf(ctx.body as Record<string, unknown>);
      return orderOutcome(ctx, await ctx.bus.call({ kind: 'order.replace', ...target(ctx, orderIdOf(ctx)), ...guards(ctx), input }));
    },
  }),

  route({
    method: 'PATCH',
    path: `${BASE}/{orderId}`,
    operationId: 'updateOrder',
    summary: 'Change some members of an order with a JSON Merge Patch (RFC 7396). Send If-Match to guard against lost updates.',
    tag: 'orders',
    scope: 'orders:write',
    body: { schema: patchSchema, readOnly: [...READ_ONLY, 'items'], mediaTypes: ['application/merge-patch+json', 'application/json'] },
    responses: { 200: 'The updated order.', ...problemResponses(404, 409, 412, 415, 422) },
    response: orderSchema,
    v2: { response: orderSchemaV2 },
    async handle(ctx) {
      const patch = ctx.body as OrderPatch;
      return orderOutcome(ctx, await ctx.bus.call({ kind: 'order.patch', ...target(ctx, orderIdOf(ctx)), ...guards(ctx), patch }));
    },
  }),

  route({
    method: 'DELETE',
    path: `${BASE}/{orderId}`,
    operationId: 'deleteOrder',
    summary: 'Delete a pending or cancelled order. A repeated call answers 404.',
    tag: 'orders',
    scope: 'orders:write',
    responses: { 204: 'Deleted.', ...problemResponses(404, 409, 412) },
    async handle(ctx) {
      await ctx.bus.call({ kind: 'order.delete', ...target(ctx, orderIdOf(ctx)), ...guards(ctx) });
      return { status: 204, cache: 'no-store' };
    },
  }),

  action('order.pay', 'pay'),
  action('order.cancel', 'cancel'),

  route({
    method: 'GET',
    path: `${BASE}/{orderId}/items`,
    operationId: 'listOrderItems',
    summary: 'List the line items of an order in the order they were added.',
    tag: 'orders',
    scope: 'orders:read',
    query: { fields: fieldsParam(ITEM_FIELDS), ...LIST_PARAMS },
    responses: { 200: 'A page of line items.', ...problemResponses(400, 404) },
    response: collectionSchema(itemSchema),
    v2: { response: collectionSchema(itemSchemaV2) },
    async handle(ctx) {
      const id = orderIdOf(ctx);
      const fields = parseFields(ctx.query, ITEM_FIELDS);
      const limit = parseLimit(ctx.query);
      const after = decodeCursor(ctx.query, 'order-items', id, 'added', 'number');
      const order = await ctx.bus.call({ kind: 'order.get', ...target(ctx, id) });
      const start = after ? order.items.findIndex((i) => i.id === after.id) + 1 : 0;
      if (after && start === 0) throw invalidParameter('cursor', 'names an item that is gone');
      const page = order.items.slice(start, start + limit);
      const hasMore = start + limit < order.items.length;
      const last = page[page.length - 1];
      const links = pageLinks(`${baseOf(ctx.version)}/${id}/items`, ctx.query, hasMore && last ? encodeCursor('order-items', id, 'added', start + page.length, last.id) : undefined);
      return {
        status: 200,
        body: { data: page.map((i) => project(renderItem(order, i, undefined, ctx.version), fields, new Set())), hasMore, _links: links },
        versioned: true,
        tag: { version: order.version, variant: `items;${variantOf(fields, new Set(), `s=${start};l=${limit}`)}` },
      };
    },
  }),

  route({
    method: 'POST',
    path: `${BASE}/{orderId}/items`,
    operationId: 'addOrderItem',
    summary: 'Add a line item to a pending order.',
    tag: 'orders',
    scope: 'orders:write',
    body: { schema: itemInputSchema, readOnly: ['id', 'orderId', 'createdAt', 'updatedAt', '_links'] },
    responses: { 201: 'The new line item; Location names it.', ...problemResponses(404, 409, 412, 415, 422) },
    response: itemSchema,
    v2: { body: { schema: itemInputSchemaV2, readOnly: ['id', 'orderId', 'createdAt', 'updatedAt', '_links'] }, response: itemSchemaV2 },
    async handle(ctx) {
      const id = orderIdOf(ctx);
      const t = target(ctx, id);
      // The item's price needs the order's currency; the actor re-checks the state in its turn.
      const current = await ctx.bus.call({ kind: 'order.get', ...t });
      const [item] = await priceItems(ctx, id, current.currency, [ctx.body as Record<string, unknown>], () => '');
      return addedItem(ctx, await ctx.bus.call({ kind: 'order.addItem', ...t, ...guards(ctx), item: item!, currency: current.currency }));
    },
    replay: { partition: (ctx) => partitionOf(orderIdOf(ctx)), outcome: (ctx, reply) => addedItem(ctx, reply as OrderRecord) },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{orderId}/items/{itemId}`,
    operationId: 'getOrderItem',
    summary: 'Read one line item.',
    tag: 'orders',
    scope: 'orders:read',
    query: { fields: fieldsParam(ITEM_FIELDS) },
    responses: { 200: 'The line item.', 304: 'The tag in If-None-Match is current.', ...problemResponses(404) },
    response: itemSchema,
    v2: { response: itemSchemaV2 },
    async handle(ctx) {
      const id = orderIdOf(ctx);
      const fields = parseFields(ctx.query, ITEM_FIELDS);
      const order = await ctx.bus.call({ kind: 'order.get', ...target(ctx, id) });
      const item = order.items.find((i) => i.id === ctx.params.itemId);
      if (!item) throw new ApiError('not-found', 'No line item with that id in this order.');
      return {
        status: 200,
        body: project(renderItem(order, item, undefined, ctx.version), fields, new Set()),
        versioned: true,
        tag: { version: order.version, variant: `item:${item.id};${variantOf(fields, new Set())}` },
      };
    },
  }),
];
