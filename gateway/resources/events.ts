// Events (CONTRACT §6, SPEC §6): the catalogue, and the events themselves, kept for
// EVENT_RETENTION_DAYS so receivers can reconcile what they missed. An event lives in the
// partition of the resource that emitted it (its id names it), so a read is one hop; the list
// asks every owner and merges, newest first, keyset-paginated, filtered by `type`.

import { partitionOf } from '../../common/ids.js';
import { EVENT_TYPES, type EventRecord } from '../../proto/webhooks.js';
import { fieldsParam, invalidParameter, LIST_PARAMS, sortParam, variantOf } from '../collection.js';
import { type JsonSchema, type RouteDef, principalOf, route } from '../route.js';
import { collectionSchema, idParam, linksSchema, plainListPage, problemResponses } from './common.js';
import { renderEvent } from './event-data.js';
import { apiVariant, versionPath, type ApiVersion } from '../versions.js';

const BASE = '/v1/events';
const EVENT_FIELDS = ['id', 'type', 'created', 'apiVersion', 'data'] as const;
const EVENT_SORTS = ['created'] as const;

const eventSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    type: { type: 'string', enum: Object.keys(EVENT_TYPES) },
    created: { type: 'string', format: 'date-time' },
    apiVersion: { type: 'string' },
    data: { type: 'object', description: 'The full resource, as the API version renders it.' },
    _links: linksSchema,
  },
};

/** An event as the version it is read under renders its data (CONTRACT §9), links included. */
function render(e: EventRecord, v: ApiVersion): Record<string, unknown> {
  return { ...renderEvent(e, v), _links: { self: { href: versionPath(`${BASE}/${e.id}`, v) } } };
}

export const eventRoutes: RouteDef[] = [
  route({
    method: 'GET',
    path: '/v1/event-types',
    operationId: 'listEventTypes',
    summary: 'The catalogue of event types, each with the operation that emits it.',
    tag: 'events',
    scope: undefined,
    responses: { 200: 'Every event type.' },
    response: collectionSchema({ type: 'object', properties: { type: { type: 'string' }, emittedBy: { type: 'string' } } }),
    async handle() {
      const data = Object.entries(EVENT_TYPES).map(([type, emittedBy]) => ({ type, emittedBy }));
      return { status: 200, body: { data, hasMore: false, _links: { self: { href: '/v1/event-types' } } }, tag: 'content', cache: 'public, max-age=3600' };
    },
  }),

  route({
    method: 'GET',
    path: BASE,
    operationId: 'listEvents',
    summary: 'Events of the last EVENT_RETENTION_DAYS, newest first.',
    tag: 'events',
    scope: 'events:read',
    query: {
      type: { description: 'Only events of this type.', schema: { type: 'string', enum: Object.keys(EVENT_TYPES) } },
      sort: sortParam(EVENT_SORTS, '-created'),
      fields: fieldsParam(EVENT_FIELDS),
      ...LIST_PARAMS,
    },
    responses: { 200: 'A page of events.', ...problemResponses(400) },
    response: collectionSchema(eventSchema),
    handle(ctx) {
      const type = ctx.query.get('type') ?? undefined;
      if (type !== undefined && !Object.hasOwn(EVENT_TYPES, type)) throw invalidParameter('type', 'is not an event type (GET /v1/event-types)');
      const v = ctx.version;
      return plainListPage(ctx, {
        kind: 'event.list',
        base: BASE,
        filter: type,
        sorts: EVENT_SORTS,
        defaultSort: '-created',
        fields: EVENT_FIELDS,
        stringSorts: [],
        render: (e: EventRecord) => render(e, v),
        variant: apiVariant(v),
      });
    },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{eventId}`,
    operationId: 'getEvent',
    summary: 'Read an event.',
    tag: 'events',
    scope: 'events:read',
    responses: { 200: 'The event.', ...problemResponses(404) },
    response: eventSchema,
    async handle(ctx) {
      const id = idParam(ctx, 'event', 'eventId', 'event');
      const e = await ctx.bus.call({ kind: 'event.get', tenant: principalOf(ctx).tenant, partition: partitionOf(id), id });
      const v = ctx.version;
      return { status: 200, render: () => render(e, v), cacheKey: e.id, tag: { version: e.version, variant: variantOf(undefined, new Set(), apiVariant(v)) }, versioned: true };
    },
  }),
];
