// Products: catalogue entries whose price is the default unit price of new line items.

import { ApiError } from '../../common/errors.js';
import { newId, parseId, partitionOf } from '../../common/ids.js';
import type { ProductPatch, ProductRecord } from '../../proto/messages.js';
import { PRODUCT_SORTS } from '../../actors/products.js';
import { LIST_PARAMS, fieldsParam, parseFields, project, sortParam, variantOf } from '../collection.js';
import { type Ctx, type JsonSchema, type Outcome, type RouteDef, partitionForNew, guards, principalOf, route } from '../route.js';
import { idParam, target, collectionSchema, currencySchema, newCurrencySchema, iso, linksSchema, problemResponses, READ_ONLY, plainListPage } from './common.js';

const BASE = '/v1/products';
const PRODUCT_FIELDS = ['id', 'name', 'price', 'currency', 'createdAt', 'updatedAt'] as const;

const writable = {
  // No control characters: names are index keys, and ordered-binary gives U+0000-U+0003 meaning.
  // No lone surrogates either: they have no UTF-8 form (see UNICODE_TEXT).
  name: { type: 'string', minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]+$' },
  price: { type: 'integer', minimum: 0, maximum: 1_000_000_000, description: 'Minor units of currency.' },
  currency: currencySchema,
};

const createSchema: JsonSchema = { type: 'object', additionalProperties: false, required: ['name', 'price', 'currency'], properties: { ...writable, currency: newCurrencySchema } };
const patchSchema: JsonSchema = { type: 'object', additionalProperties: false, properties: writable };

const productSchema: JsonSchema = {
  type: 'object',
  properties: { id: { type: 'string' }, ...writable, createdAt: { type: 'string', format: 'date-time' }, updatedAt: { type: 'string', format: 'date-time' }, _links: linksSchema },
};

export function renderProduct(p: ProductRecord): Record<string, unknown> {
  return {
    id: p.id,
    name: p.name,
    price: p.price,
    currency: p.currency,
    createdAt: iso(p.createdAt),
    updatedAt: iso(p.updatedAt),
    _links: { self: { href: `${BASE}/${p.id}` } },
  };
}

/** The caller's products among `ids`; ids that are malformed or absent are simply missing. */
export async function fetchProducts(ctx: Ctx, ids: Iterable<string>): Promise<Map<string, ProductRecord>> {
  const tenant = principalOf(ctx).tenant;
  const found = new Map<string, ProductRecord>();
  await Promise.all(
    [...ids].map(async (raw) => {
      const id = parseId('product', raw);
      if (!id) return;
      try {
        found.set(id, await ctx.bus.call({ kind: 'product.get', tenant, partition: partitionOf(id), id }));
      } catch (err) {
        if (!(err instanceof ApiError && err.slug === 'not-found')) throw err;
      }
    }),
  );
  return found;
}

function productIdOf(ctx: Ctx): string {
  return idParam(ctx, 'product', 'productId', 'product');
}

/** A new product's answer: also what a keyed retry of the create replays. */
function created(p: ProductRecord): Outcome {
  // The answer's id, not one minted for this request: a replay answers the first attempt's product.
  return outcome(p, 201, `${BASE}/${p.id}`);
}

function outcome(p: ProductRecord, status = 200, location?: string): Outcome {
  return { status, body: renderProduct(p), tag: { version: p.version, variant: variantOf(undefined, new Set()) }, ...(location ? { location } : {}) };
}

export const productRoutes: RouteDef[] = [
  route({
    method: 'GET',
    path: BASE,
    operationId: 'listProducts',
    summary: 'List products.',
    tag: 'products',
    scope: 'products:read',
    query: { sort: sortParam(PRODUCT_SORTS, '-createdAt'), fields: fieldsParam(PRODUCT_FIELDS), ...LIST_PARAMS },
    responses: { 200: 'A page of products.', ...problemResponses(400) },
    response: collectionSchema(productSchema),
    handle(ctx) {
      return plainListPage(ctx, { kind: 'product.list', base: BASE, sorts: PRODUCT_SORTS, fields: PRODUCT_FIELDS, stringSorts: ['name'], render: renderProduct });
    },
  }),

  route({
    method: 'POST',
    path: BASE,
    operationId: 'createProduct',
    summary: 'Create a product.',
    tag: 'products',
    scope: 'products:write',
    body: { schema: createSchema, readOnly: READ_ONLY },
    responses: { 201: 'The new product; Location names it.', ...problemResponses(415, 422) },
    response: productSchema,
    async handle(ctx) {
      const body = ctx.body as { name: string; price: number; currency: string };
      const id = newId('product', partitionForNew(ctx));
      const p = await ctx.bus.call({
        kind: 'product.create',
        tenant: principalOf(ctx).tenant,
        partition: partitionOf(id),
        id,
        input: { name: body.name, price: body.price, currency: body.currency },
      });
      return created(p);
    },
    replay: { partition: partitionForNew, outcome: (_ctx, reply) => created(reply as ProductRecord) },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{productId}`,
    operationId: 'getProduct',
    summary: 'Read a product.',
    tag: 'products',
    scope: 'products:read',
    query: { fields: fieldsParam(PRODUCT_FIELDS) },
    responses: { 200: 'The product.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400, 404) },
    response: productSchema,
    async handle(ctx) {
      const fields = parseFields(ctx.query, PRODUCT_FIELDS);
      const p = await ctx.bus.call({ kind: 'product.get', ...target(ctx, productIdOf(ctx)) });
      return {
        status: 200,
        render: () => project(renderProduct(p), fields, new Set()),
        cacheKey: p.id,
        tag: { version: p.version, variant: variantOf(fields, new Set()) },
      };
    },
  }),

  route({
    method: 'PATCH',
    path: `${BASE}/{productId}`,
    operationId: 'updateProduct',
    summary: 'Change some members of a product (JSON Merge Patch).',
    tag: 'products',
    scope: 'products:write',
    body: { schema: patchSchema, readOnly: READ_ONLY, mediaTypes: ['application/merge-patch+json', 'application/json'] },
    responses: { 200: 'The updated product.', ...problemResponses(404, 412, 415, 422) },
    response: productSchema,
    async handle(ctx) {
      return outcome(await ctx.bus.call({ kind: 'product.patch', ...target(ctx, productIdOf(ctx)), ...guards(ctx), patch: ctx.body as ProductPatch }));
    },
  }),

  route({
    method: 'DELETE',
    path: `${BASE}/{productId}`,
    operationId: 'deleteProduct',
    summary: 'Delete a product. Existing line items keep their price.',
    tag: 'products',
    scope: 'products:write',
    responses: { 204: 'Deleted.', ...problemResponses(404, 412) },
    async handle(ctx) {
      await ctx.bus.call({ kind: 'product.delete', ...target(ctx, productIdOf(ctx)), ...guards(ctx) });
      return { status: 204, cache: 'no-store' };
    },
  }),
];
