// Refunds and operations (CONTRACT §6, §8). Starting a refund is asynchronous: POST /v1/refunds
// is checked at once in the order's turn (the order is paid, the amount fits in what is left)
// and answers 202 with the operation that processes it; clients poll the operation, honouring
// Retry-After, until it succeeds (with `_links.result` to the refund) or fails (with `error`).
//
// The refund and its operation are minted in the order's partition, so each is one hop to read,
// and a retry with the same Idempotency-Key meets the first answer at that owner: the same
// operation, and no second job.

import { ApiError, isProblemSlug } from '../../common/errors.js';
import { newId, parseId, partitionOf } from '../../common/ids.js';
import type { OperationRecord, RefundRecord } from '../../proto/messages.js';
import { REFUND_SORTS } from '../../actors/refunds.js';
import { LIST_PARAMS, fieldsParam, invalidParameter, parseFields, project, sortParam, variantOf } from '../collection.js';
import { problemBody } from '../problem.js';
import { type Ctx, type JsonSchema, type Outcome, type QueryParam, type RouteDef, principalOf, route } from '../route.js';
import { moneyFor, moneyInputSchema, moneySchema, parseMoney, type Money } from '../money.js';
import { apiVariant, versionPath, type ApiVersion } from '../versions.js';
import { UNICODE_TEXT, collectionSchema, currencySchema, idParam, iso, linksSchema, plainListPage, problemResponses, target } from './common.js';
import { MAX_ORDER_TOTAL } from './orders.js';

const BASE = '/v1/refunds';
const OPERATIONS = '/v1/operations';
const REFUND_FIELDS = ['id', 'orderId', 'amount', 'currency', 'reason', 'status', 'failureReason', 'createdAt', 'updatedAt'] as const;
// v2 writes the amount as a money object, which names its currency (CONTRACT §9).
const REFUND_FIELDS_V2 = REFUND_FIELDS.filter((f) => f !== 'currency');
const refundFields = (v: ApiVersion): readonly string[] => (v === 'v1' ? REFUND_FIELDS : REFUND_FIELDS_V2);
// A refund of any part of any order: up to the largest total an order can have.
const MAX_REFUND_MINOR = MAX_ORDER_TOTAL;
const ORDER_ID_LENGTH = 26;

const createSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['orderId'],
  properties: {
    orderId: { type: 'string', minLength: ORDER_ID_LENGTH, maxLength: ORDER_ID_LENGTH, pattern: '^ord_[0-9a-z]+$', description: 'A paid order.' },
    amount: { type: 'integer', minimum: 1, maximum: MAX_REFUND_MINOR, description: 'Minor units of the order currency; defaults to everything left to refund.' },
    reason: { type: ['string', 'null'], minLength: 1, maxLength: 500, pattern: UNICODE_TEXT },
  },
};

const createSchemaV2: JsonSchema = {
  ...createSchema,
  properties: { ...(createSchema.properties as object), amount: moneyInputSchema('In the order\'s currency; defaults to everything left to refund.', MAX_REFUND_MINOR) },
};

const refundSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    orderId: { type: 'string' },
    amount: { type: 'integer', description: 'Minor units of `currency`.' },
    currency: currencySchema,
    reason: { type: ['string', 'null'] },
    status: { type: 'string', enum: ['pending', 'succeeded', 'failed'] },
    failureReason: { type: ['string', 'null'], description: 'Why the payment processor refused it, when failed.' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    _links: linksSchema,
  },
};

const refundSchemaV2: JsonSchema = {
  ...refundSchema,
  properties: Object.fromEntries(
    Object.entries({ ...(refundSchema.properties as Record<string, JsonSchema>), amount: moneySchema }).filter(([k]) => k !== 'currency'),
  ),
};

const operationSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    type: { type: 'string', enum: ['refund'] },
    status: { type: 'string', enum: ['pending', 'running', 'succeeded', 'failed'] },
    error: { type: 'object', description: 'The problem (RFC 9457), when failed.' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    finishedAt: { type: ['string', 'null'], format: 'date-time' },
    _links: { ...linksSchema, description: '`self`, `order`, and `result` (the refund) once succeeded.' },
  },
};

/** A refund as API version `v` writes it: minor units and a currency (v1), or a money object (v2). Links are v1's. */
export function renderRefund(r: RefundRecord, v: ApiVersion = 'v1'): Record<string, unknown> {
  return {
    id: r.id,
    orderId: r.orderId,
    amount: moneyFor(r.amount, r.currency, v),
    ...(v === 'v1' ? { currency: r.currency } : {}),
    reason: r.reason,
    status: r.status,
    failureReason: r.failureReason,
    createdAt: iso(r.createdAt),
    updatedAt: iso(r.updatedAt),
    _links: { self: { href: `${BASE}/${r.id}` }, order: { href: `/v1/orders/${r.orderId}` }, operation: { href: `${OPERATIONS}/${r.operationId}` } },
  };
}

function renderOperation(op: OperationRecord): Record<string, unknown> {
  const links: Record<string, { href: string }> = { self: { href: `${OPERATIONS}/${op.id}` }, order: { href: `/v1/orders/${op.orderId}` } };
  if (op.status === 'succeeded') links.result = { href: `${BASE}/${op.refundId}` };
  const rep: Record<string, unknown> = { id: op.id, type: op.type, status: op.status };
  if (op.error) rep.error = problemBody(isProblemSlug(op.error.code) ? op.error.code : 'internal', op.error.detail, op.error.errors);
  rep.createdAt = iso(op.createdAt);
  rep.updatedAt = iso(op.updatedAt);
  rep.finishedAt = op.finishedAt === null ? null : iso(op.finishedAt);
  rep._links = links;
  return rep;
}

const finished = (op: OperationRecord): boolean => op.status === 'succeeded' || op.status === 'failed';

/** How long a poller should wait: about one processing time, at least a second (RFC 9110 §10.2.3). */
function retryAfter(ctx: Ctx): string {
  return String(Math.max(1, Math.ceil(ctx.config.refundProcessingMs / 1000)));
}

function operationOutcome(ctx: Ctx, op: OperationRecord, status: number): Outcome {
  const out: Outcome = { status, render: () => renderOperation(op), cacheKey: op.id, tag: { version: op.version, variant: variantOf(undefined, new Set()) } };
  if (!finished(op)) out.headers = { 'retry-after': retryAfter(ctx) };
  if (status === 202) {
    out.location = versionPath(`${OPERATIONS}/${op.id}`, ctx.version);
    out.cache = 'no-store';
  }
  return out;
}

/** The list's query parameters; only the fields allow-list differs by version. */
function listQuery(v: ApiVersion): Record<string, QueryParam> {
  return {
    orderId: { description: 'Only the refunds of this order.', schema: { type: 'string', maxLength: 64 } },
    sort: sortParam(REFUND_SORTS, '-createdAt'),
    fields: fieldsParam(refundFields(v)),
    ...LIST_PARAMS,
  };
}

export const refundRoutes: RouteDef[] = [
  route({
    method: 'POST',
    path: BASE,
    operationId: 'createRefund',
    keyHome: true,
    summary: 'Refund a paid order, in full or in part. Asynchronous: answers 202 with the operation to poll.',
    tag: 'refunds',
    scope: 'refunds:write',
    body: { schema: createSchema },
    v2: { body: { schema: createSchemaV2 } },
    responses: {
      202: 'The operation processing the refund; Location names it, Retry-After says when to look.',
      ...problemResponses(409, 415, 422),
    },
    response: operationSchema,
    async handle(ctx) {
      const body = ctx.body as { orderId: string; amount?: number | Money; reason?: string | null };
      const orderId = parseId('order', body.orderId);
      if (!orderId) throw new ApiError('validation-failed', 'orderId names no order.', { errors: [{ pointer: '/orderId', detail: 'names no order' }] });
      const partition = partitionOf(orderId);
      const op = await ctx.bus.call({
        kind: 'refund.create',
        tenant: principalOf(ctx).tenant,
        partition,
        id: newId('refund', partition),
        orderId,
        operationId: newId('operation', partition),
        ...amountInput(body.amount),
        ...(ctx.version === 'v2' ? { majorUnits: true as const } : {}),
        reason: body.reason ?? null,
      });
      return operationOutcome(ctx, op, 202);
    },
  }),

  route({
    method: 'GET',
    path: BASE,
    operationId: 'listRefunds',
    summary: 'List refunds, newest first; `orderId` keeps one order\'s.',
    tag: 'refunds',
    scope: 'refunds:read',
    query: listQuery('v1'),
    v2: { query: listQuery('v2'), response: collectionSchema(refundSchemaV2) },
    responses: { 200: 'A page of refunds.', ...problemResponses(400) },
    response: collectionSchema(refundSchema),
    handle(ctx) {
      const raw = ctx.query.get('orderId');
      const filter = raw === null ? undefined : parseId('order', raw);
      if (raw !== null && !filter) throw invalidParameter('orderId', 'is not an order id');
      const v = ctx.version;
      return plainListPage(ctx, { kind: 'refund.list', base: BASE, filter, sorts: REFUND_SORTS, fields: refundFields(v), stringSorts: [], render: (r: RefundRecord) => renderRefund(r, v), variant: apiVariant(v) });
    },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{refundId}`,
    operationId: 'getRefund',
    summary: 'Read a refund.',
    tag: 'refunds',
    scope: 'refunds:read',
    query: { fields: fieldsParam(REFUND_FIELDS) },
    v2: { query: { fields: fieldsParam(REFUND_FIELDS_V2) }, response: refundSchemaV2 },
    responses: { 200: 'The refund.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400, 404) },
    response: refundSchema,
    async handle(ctx) {
      const v = ctx.version;
      const fields = parseFields(ctx.query, refundFields(v));
      const r = await ctx.bus.call({ kind: 'refund.get', ...target(ctx, idParam(ctx, 'refund', 'refundId', 'refund')) });
      return { status: 200, render: () => project(renderRefund(r, v), fields, new Set()), cacheKey: r.id, tag: { version: r.version, variant: variantOf(fields, new Set(), apiVariant(v)) } };
    },
  }),

  route({
    method: 'GET',
    path: `${OPERATIONS}/{operationId}`,
    operationId: 'getOperation',
    summary: `Poll an asynchronous operation. Retry-After while it is pending or running; kept for OPERATION_RETENTION_HOURS once finished.`,
    tag: 'refunds',
    scope: 'refunds:read',
    responses: { 200: 'The operation.', 304: 'The tag in If-None-Match is current.', ...problemResponses(404) },
    response: operationSchema,
    async handle(ctx) {
      const op = await ctx.bus.call({ kind: 'operation.get', ...target(ctx, idParam(ctx, 'operation', 'operationId', 'operation')) });
      return operationOutcome(ctx, op, 200);
    },
  }),
];

/** The amount of a start: v1 minor units, or a v2 money object read in the currency it names (checked against the order's by the actor). */
function amountInput(amount: number | Money | undefined): { amount: number | null; currency?: string } {
  if (amount === undefined) return { amount: null };
  if (typeof amount === 'number') return { amount };
  return { amount: parseMoney(amount, amount.currency, '/amount', MAX_REFUND_MINOR), currency: amount.currency };
}
