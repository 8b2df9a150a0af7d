// Message contracts for events and webhooks (issue 5, CONTRACT §6 and §10): the event catalogue,
// the records the actor host keeps (events, the outbox, endpoints, deliveries) and the commands
// and queries that reach them. proto/messages.ts adds these to its unions.

import type { Guarded, ListPage, ListQuery } from './messages.js';

/**
 * Every event type the service emits, with the operation that emits it. The README's table is
 * this list; GET /v1/event-types serves it.
 */
export const EVENT_TYPES = {
  'order.created': 'POST /v1/orders, and a create in POST /v1/orders/batch',
  'order.updated': 'PUT or PATCH /v1/orders/{orderId}, POST /v1/orders/{orderId}/items, and a patch in a batch',
  'order.paid': 'POST /v1/orders/{orderId}/pay',
  'order.cancelled': 'POST /v1/orders/{orderId}/cancel',
  'order.deleted': 'DELETE /v1/orders/{orderId}, and a delete in a batch (data: the order as it was)',
  'order.refunded': 'the refund that brings the refunded amount to the order total succeeds (after POST /v1/refunds)',
  'refund.created': 'POST /v1/refunds (the refund, pending)',
  'refund.succeeded': 'the processor completes a refund started by POST /v1/refunds',
  'refund.failed': 'the processor refuses a refund started by POST /v1/refunds',
  'user.created': 'POST /v1/users',
  'user.updated': 'PUT or PATCH /v1/users/{userId}',
  'user.deleted': 'DELETE /v1/users/{userId} (data: the user as it was)',
  'team.member.added': 'POST /v1/teams/{teamId}/members',
  'team.member.removed': 'DELETE /v1/teams/{teamId}/members/{userId} (data: the membership as it was)',
  'article.created': 'POST /v1/articles',
  'article.updated': 'PATCH /v1/articles/{articleId}',
  ping: 'POST /v1/webhook-endpoints/{endpointId}/test (sent to that endpoint only)',
} as const;

export type EventType = keyof typeof EVENT_TYPES;

/** The kind of resource an event's `data` holds, so one function can render it per API version. */
export type EventResource = 'order' | 'user' | 'membership' | 'article' | 'refund' | 'ping';

/** An event as stored: minted when the actor decides, committed with the change that emits it. */
export interface EventRecord {
  /** `evt_…`, in the partition of the resource that emitted it; a redelivery carries it again. */
  id: string;
  tenant: string;
  /** Events never change; the field lets the list helpers treat them like other records. */
  version: 1;
  type: EventType;
  resource: EventResource;
  /** ms since the epoch. */
  created: number;
  /** The full resource state as stored (the record, not a rendering). */
  data: unknown;
  /** A ping goes to this endpoint only, whatever its event types. */
  endpointId?: string;
}

/** A row of the outbox: an event not yet fanned out to the endpoints that want it. */
export interface OutboxEntry {
  id: string;
  tenant: string;
  created: number;
}

export type ApiVersion = 'v1' | 'v2';
export type EndpointStatus = 'enabled' | 'disabled';

export interface SigningSecret {
  secret: string;
  /** ms since the epoch after which it no longer signs; undefined while it is the current one. */
  expiresAt?: number;
}

export interface EndpointRecord {
  id: string;
  tenant: string;
  version: number;
  endpointUrl: string;
  eventTypes: string[];
  apiVersion: ApiVersion;
  status: EndpointStatus;
  description: string | null;
  /** Why it was disabled: 'gone' (a 410), 'failing' (no success for WEBHOOK_DISABLE_AFTER_HOURS), or 'manual'. */
  disabledReason: string | null;
  /** When it was created or last re-enabled: the failing clock never reaches back before it. */
  enabledAt?: number;
  /** The current secret first. Never rendered except in the create and rotate answers. */
  secrets: SigningSecret[];
  createdAt: number;
  updatedAt: number;
}

export interface EndpointInput {
  endpointUrl: string;
  eventTypes: string[];
  apiVersion: ApiVersion;
  description: string | null;
}

export interface EndpointPatch {
  endpointUrl?: string;
  eventTypes?: string[];
  status?: EndpointStatus;
  description?: string | null;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

export interface DeliveryAttempt {
  attempt: number;
  at: number;
  /** 'delivered', 'retry' (will be tried again), 'failed' (no more tries), or 'disabled'. */
  outcome: string;
  responseStatus: number | null;
  /** Why, when there was no HTTP answer (timeout, connection refused, a refused address). */
  error: string | null;
  durationMs: number;
}

/** One event to one endpoint: kept in the partition of the event, so its node dispatches it. */
export interface DeliveryRecord {
  id: string;
  tenant: string;
  version: number;
  endpointId: string;
  eventId: string;
  eventType: string;
  status: DeliveryStatus;
  /** When the next attempt is due (ms since the epoch); undefined once settled. */
  nextAttemptAt: number | undefined;
  attempts: DeliveryAttempt[];
  createdAt: number;
  updatedAt: number;
}

interface Base {
  tenant: string;
  partition: number;
}

export type WebhookCommand =
  | (Base & { kind: 'webhook.create'; id: string; input: EndpointInput; secret: string })
  | (Base & { kind: 'webhook.get'; id: string })
  | (Base & Guarded & { kind: 'webhook.patch'; id: string; patch: EndpointPatch })
  | (Base & Guarded & { kind: 'webhook.delete'; id: string })
  | (Base & Guarded & { kind: 'webhook.rotate'; id: string; secret: string; keepOldMs: number })
  | (Base & { kind: 'webhook.test'; id: string })
  /**
   * The dispatcher disables an endpoint (a 410, or failing too long), judged on the endpoint as it
   * was at `version`: a no-op once the endpoint has changed since. Older senders send no
   * version (mixed-version clusters in a rolling upgrade); then the endpoint is disabled as it is.
   */
  | (Base & { kind: 'webhook.disable'; id: string; reason: string; version?: number })
  | (Base & { kind: 'event.get'; id: string });

export type WebhookQuery =
  | { kind: 'webhook.list'; query: ListQuery }
  /** `filter` is the event type, or undefined for all. */
  | { kind: 'event.list'; query: ListQuery }
  /** `filter` is the endpoint id. */
  | { kind: 'delivery.list'; query: ListQuery };

export interface WebhookReplies {
  'webhook.create': EndpointRecord;
  'webhook.get': EndpointRecord;
  'webhook.patch': EndpointRecord;
  'webhook.delete': null;
  'webhook.rotate': EndpointRecord;
  'webhook.test': EventRecord;
  'webhook.disable': EndpointRecord;
  'event.get': EventRecord;
  'webhook.list': ListPage<EndpointRecord>;
  'event.list': ListPage<EventRecord>;
  'delivery.list': ListPage<DeliveryRecord>;
}
