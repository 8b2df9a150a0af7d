// Webhook endpoints (CONTRACT §6 and §10): register, list, read, change, delete, rotate the
// signing secret, send a test ping, and list delivery attempts. Endpoints live in the tenant's
// partition (actors/webhooks.ts). Every answer about an endpoint is `Cache-Control: no-store`:
// the create and rotate answers hold a secret, and the others describe where secrets are used.
//
// The SSRF guard (actors/webhook-target.ts) runs here when a URL is registered or changed, and
// again at every delivery.

import { ApiError } from '../../common/errors.js';
import { newId, partitionFor } from '../../common/ids.js';
import { newSigningSecret } from '../../common/webhook-signature.js';
import type { DeliveryRecord, EndpointInput, EndpointPatch, EndpointRecord } from '../../proto/webhooks.js';
import { EVENT_TYPES } from '../../proto/webhooks.js';
import { parseTarget, registrationResolver, resolveTarget, TargetRefused, type Resolver } from '../../actors/webhook-target.js';
import { fieldsParam, LIST_PARAMS, sortParam, variantOf } from '../collection.js';
import { type Ctx, type JsonSchema, type Outcome, type RouteDef, guards, principalOf, route } from '../route.js';
import { collectionSchema, idParam, iso, linksSchema, plainListPage, problemResponses } from './common.js';

const BASE = '/v1/webhook-endpoints';
const NO_STORE = 'no-store';
/** Seconds a registration whose host got no DNS answer is told to wait (RESOLVE_DEADLINE_MS, and some). */
const UNRESOLVED_RETRY_AFTER_S = 5;
/** How long a rotated-out secret keeps signing beside the new one (CONTRACT §10). */
export const OLD_SECRET_MS = 24 * 3600_000;
const ENDPOINT_FIELDS = ['id', 'endpointUrl', 'eventTypes', 'apiVersion', 'status', 'description', 'disabledReason', 'createdAt', 'updatedAt'] as const;
const DELIVERY_FIELDS = ['id', 'eventId', 'eventType', 'status', 'attempts', 'nextAttemptAt', 'createdAt', 'updatedAt'] as const;
/** Endpoints and deliveries list by creation, newest first unless `sort=createdAt`. */
const BY_CREATION = ['createdAt'] as const;

const eventTypes: JsonSchema = {
  type: 'array',
  minItems: 1,
  maxItems: 50,
  uniqueItems: true,
  items: { type: 'string', enum: ['*', ...Object.keys(EVENT_TYPES)] },
  description: 'Event type names (GET /v1/event-types), or ["*"] for all.',
};
const writable = {
  endpointUrl: { type: 'string', minLength: 1, maxLength: 2048, description: 'https URL resolving to public addresses only.' },
  eventTypes,
  description: { type: ['string', 'null'], maxLength: 500, pattern: '^[^\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]*$' },
};
const createSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['endpointUrl', 'eventTypes'],
  properties: { ...writable, apiVersion: { type: 'string', enum: ['v1', 'v2'], description: 'Shape of `data` in deliveries (default v1).' } },
};
const patchSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: { ...writable, status: { type: 'string', enum: ['enabled', 'disabled'], description: '`enabled` re-enables a disabled endpoint.' } },
};
const endpointSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    ...writable,
    apiVersion: { type: 'string', enum: ['v1', 'v2'] },
    status: { type: 'string', enum: ['enabled', 'disabled'] },
    disabledReason: { type: ['string', 'null'], description: '`gone` (the receiver answered 410), `failing`, or `manual`.' },
    signingSecret: { type: 'string', description: 'Only in the create and rotate-secret answers.' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    _links: linksSchema,
  },
};
const deliverySchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    eventId: { type: 'string' },
    eventType: { type: 'string' },
    status: { type: 'string', enum: ['pending', 'delivered', 'failed'] },
    nextAttemptAt: { type: ['string', 'null'], format: 'date-time' },
    attempts: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          attempt: { type: 'integer' },
          at: { type: 'string', format: 'date-time' },
          outcome: { type: 'string', enum: ['delivered', 'retry', 'failed', 'disabled'] },
          responseStatus: { type: ['integer', 'null'] },
          error: { type: ['string', 'null'] },
          durationMs: { type: 'integer' },
        },
      },
    },
    _links: linksSchema,
  },
};

function renderEndpoint(e: EndpointRecord): Record<string, unknown> {
  const self = `${BASE}/${e.id}`;
  const links: Record<string, { href: string; method?: string }> = {
    self: { href: self },
    deliveries: { href: `${self}/deliveries` },
    rotateSecret: { href: `${self}/rotate-secret`, method: 'POST' },
  };
  // Offered only while it can be followed: a ping to a disabled endpoint is 409 (actors/webhooks.ts).
  if (e.status === 'enabled') links.test = { href: `${self}/test`, method: 'POST' };
  return {
    id: e.id,
    endpointUrl: e.endpointUrl,
    eventTypes: e.eventTypes,
    apiVersion: e.apiVersion,
    status: e.status,
    description: e.description,
    disabledReason: e.disabledReason,
    createdAt: iso(e.createdAt),
    updatedAt: iso(e.updatedAt),
    _links: links,
  };
}

function renderDelivery(d: DeliveryRecord): Record<string, unknown> {
  return {
    id: d.id,
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    nextAttemptAt: d.nextAttemptAt === undefined ? null : iso(d.nextAttemptAt),
    attempts: d.attempts.map((a) => ({ attempt: a.attempt, at: iso(a.at), outcome: a.outcome, responseStatus: a.responseStatus, error: a.error, durationMs: a.durationMs })),
    createdAt: iso(d.createdAt),
    updatedAt: iso(d.updatedAt),
    _links: { event: { href: `/v1/events/${d.eventId}` }, endpoint: { href: `${BASE}/${d.endpointId}` } },
  };
}

/** The answer that shows the secret: never cached, never rendered from the shared cache. */
function withSecret(e: EndpointRecord, status: number): Outcome {
  const out: Outcome = { status, body: { ...renderEndpoint(e), signingSecret: e.secrets[0]!.secret }, cache: NO_STORE };
  if (status === 201) out.location = `${BASE}/${e.id}`;
  return out;
}

function outcome(e: EndpointRecord): Outcome {
  return { status: 200, render: () => renderEndpoint(e), cacheKey: e.id, tag: { version: e.version, variant: variantOf(undefined, new Set()) }, cache: NO_STORE };
}

function home(ctx: Ctx): { tenant: string; partition: number } {
  const tenant = principalOf(ctx).tenant;
  return { tenant, partition: partitionFor(tenant) };
}

function endpointTarget(ctx: Ctx): { tenant: string; partition: number; id: string } {
  return { ...home(ctx), id: idParam(ctx, 'webhookEndpoint', 'endpointId', 'webhook endpoint') };
}

export interface WebhookRouteOptions {
  /** DNS for the registration check; tests inject one. */
  resolver?: Resolver;
}

export function webhookRoutes(opts: WebhookRouteOptions = {}): RouteDef[] {
  const resolver = opts.resolver ?? registrationResolver;

  /**
   * The SSRF guard at registration: 422 saying what the URL must be, never where its host points
   * (CONTRACT §4, §10). A host whose name servers gave no answer (they failed, timed out, or
   * every lookup slot was taken) is not known to be wrong: 503, so the client tries again rather
   * than "fixing" a good URL, and the detail names no host either.
   */
  async function checkUrl(ctx: Ctx, raw: string): Promise<void> {
    const allow = ctx.config.webhookAllowPrivateTargets;
    try {
      // URL parsing would drop surrounding spaces and encode inner ones, yet the URL is stored
      // and shown as sent: refused, as Stripe refuses an invalid URL, rather than kept so.
      if (/\s/.test(raw)) throw new TargetRefused('must not contain whitespace');
      await resolveTarget(parseTarget(raw, allow), resolver, allow);
    } catch (err) {
      if (!(err instanceof TargetRefused)) throw err;
      if (err.unresolved) {
        throw new ApiError('unavailable', 'The endpoint URL\'s host could not be resolved just now; nothing was stored. Retry later.', { headers: { 'retry-after': String(UNRESOLVED_RETRY_AFTER_S) } });
      }
      throw new ApiError('validation-failed', `The endpoint URL ${err.message}.`, { errors: [{ pointer: '/endpointUrl', detail: err.message }] });
    }
  }

  return [
    route({
      method: 'GET',
      path: BASE,
      operationId: 'listWebhookEndpoints',
      summary: 'List webhook endpoints.',
      tag: 'webhooks',
      scope: 'webhooks:read',
      query: { sort: sortParam(BY_CREATION, '-createdAt'), fields: fieldsParam(ENDPOINT_FIELDS), ...LIST_PARAMS },
      responses: { 200: 'A page of endpoints (secrets are never listed).', ...problemResponses(400) },
      response: collectionSchema(endpointSchema),
      async handle(ctx) {
        const page = await plainListPage(ctx, { kind: 'webhook.list', base: BASE, sorts: BY_CREATION, fields: ENDPOINT_FIELDS, stringSorts: [], render: renderEndpoint });
        return { ...page, cache: NO_STORE };
      },
    }),

    route({
      method: 'POST',
      path: BASE,
      operationId: 'createWebhookEndpoint',
      summary: 'Register a webhook endpoint. The answer holds its signing secret, shown only here and on rotation.',
      tag: 'webhooks',
      scope: 'webhooks:write',
      body: { schema: createSchema, readOnly: ['id', 'status', 'signingSecret', 'createdAt', 'updatedAt', '_links'] },
      responses: { 201: 'The endpoint, with `signingSecret`; Location names it.', ...problemResponses(415, 422) },
      response: endpointSchema,
      async handle(ctx) {
        const body = ctx.body as { endpointUrl: string; eventTypes: string[]; apiVersion?: 'v1' | 'v2'; description?: string | null };
        await checkUrl(ctx, body.endpointUrl);
        const h = home(ctx);
        const input: EndpointInput = { endpointUrl: body.endpointUrl, eventTypes: body.eventTypes, apiVersion: body.apiVersion ?? 'v1', description: body.description ?? null };
        const e = await ctx.bus.call({ kind: 'webhook.create', ...h, id: newId('webhookEndpoint', h.partition), input, secret: newSigningSecret() });
        return withSecret(e, 201);
      },
      // The target's addresses are checked first (checkUrl, DNS): a retry is answered before that.
      replay: { partition: (ctx) => home(ctx).partition, outcome: (_ctx, reply) => withSecret(reply as EndpointRecord, 201), lookFirst: true },
    }),

    route({
      method: 'GET',
      path: `${BASE}/{endpointId}`,
      operationId: 'getWebhookEndpoint',
      summary: 'Read a webhook endpoint.',
      tag: 'webhooks',
      scope: 'webhooks:read',
      responses: { 200: 'The endpoint.', ...problemResponses(404) },
      response: endpointSchema,
      async handle(ctx) {
        return outcome(await ctx.bus.call({ kind: 'webhook.get', ...endpointTarget(ctx) }));
      },
    }),

    route({
      method: 'PATCH',
      path: `${BASE}/{endpointId}`,
      operationId: 'updateWebhookEndpoint',
      summary: 'Change the URL, the event types or the description, or set `status` (`enabled` re-enables).',
      tag: 'webhooks',
      scope: 'webhooks:write',
      body: { schema: patchSchema, readOnly: ['id', 'apiVersion', 'signingSecret', 'disabledReason', 'createdAt', 'updatedAt', '_links'], mediaTypes: ['application/merge-patch+json', 'application/json'] },
      responses: { 200: 'The endpoint.', ...problemResponses(404, 412, 415, 422) },
      response: endpointSchema,
      async handle(ctx) {
        const patch = ctx.body as EndpointPatch;
        if (patch.endpointUrl !== undefined) await checkUrl(ctx, patch.endpointUrl);
        return outcome(await ctx.bus.call({ kind: 'webhook.patch', ...endpointTarget(ctx), ...guards(ctx), patch }));
      },
    }),

    route({
      method: 'DELETE',
      path: `${BASE}/{endpointId}`,
      operationId: 'deleteWebhookEndpoint',
      summary: 'Delete a webhook endpoint; its pending deliveries are dropped.',
      tag: 'webhooks',
      scope: 'webhooks:write',
      responses: { 204: 'Deleted.', ...problemResponses(404, 412) },
      async handle(ctx) {
        await ctx.bus.call({ kind: 'webhook.delete', ...endpointTarget(ctx), ...guards(ctx) });
        return { status: 204, cache: NO_STORE };
      },
    }),

    route({
      method: 'POST',
      path: `${BASE}/{endpointId}/rotate-secret`,
      operationId: 'rotateWebhookSecret',
      summary: 'Issue a new signing secret; the previous one keeps signing beside it for 24 hours.',
      tag: 'webhooks',
      scope: 'webhooks:write',
      body: { schema: { type: 'object', additionalProperties: false, properties: {} }, required: false },
      responses: { 200: 'The endpoint, with the new `signingSecret`.', ...problemResponses(404, 412) },
      response: endpointSchema,
      async handle(ctx) {
        const e = await ctx.bus.call({ kind: 'webhook.rotate', ...endpointTarget(ctx), ...guards(ctx), secret: newSigningSecret(), keepOldMs: OLD_SECRET_MS });
        return withSecret(e, 200);
      },
      replay: { partition: (ctx) => home(ctx).partition, outcome: (_ctx, reply) => withSecret(reply as EndpointRecord, 200) },
    }),

    route({
      method: 'POST',
      path: `${BASE}/{endpointId}/test`,
      operationId: 'testWebhookEndpoint',
      keyHome: true,
      summary: 'Send a `ping` event to this endpoint (only).',
      tag: 'webhooks',
      scope: 'webhooks:write',
      body: { schema: { type: 'object', additionalProperties: false, properties: {} }, required: false },
      responses: { 202: 'The ping event, queued for delivery; Location names it.', ...problemResponses(404) },
      async handle(ctx) {
        const ping = await ctx.bus.call({ kind: 'webhook.test', ...endpointTarget(ctx) });
        return { status: 202, body: { id: ping.id, type: ping.type, created: iso(ping.created), _links: { self: { href: `/v1/events/${ping.id}` } } }, location: `/v1/events/${ping.id}`, cache: NO_STORE };
      },
    }),

    route({
      method: 'GET',
      path: `${BASE}/{endpointId}/deliveries`,
      operationId: 'listWebhookDeliveries',
      summary: 'Delivery attempts to this endpoint, newest delivery first: event, attempt number, outcome, response status, duration, next attempt time.',
      tag: 'webhooks',
      scope: 'webhooks:read',
      query: { sort: sortParam(BY_CREATION, '-createdAt'), fields: fieldsParam(DELIVERY_FIELDS), ...LIST_PARAMS },
      responses: { 200: 'A page of deliveries, each with its attempts.', ...problemResponses(400, 404) },
      response: collectionSchema(deliverySchema),
      async handle(ctx) {
        const t = endpointTarget(ctx);
        await ctx.bus.call({ kind: 'webhook.get', ...t }); // 404 for an endpoint that is not there
        const page = await plainListPage(ctx, { kind: 'delivery.list', base: `${BASE}/${t.id}/deliveries`, filter: t.id, sorts: BY_CREATION, fields: DELIVERY_FIELDS, stringSorts: [], render: renderDelivery });
        return { ...page, cache: NO_STORE };
      },
    }),
  ];
}
