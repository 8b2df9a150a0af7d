// The one place an event's `data` is rendered (CONTRACT §6, §9): the stored record through the
// same renderer its resource's GET uses, in the API version the reader asked for (a webhook
// endpoint's `apiVersion`, or the version of the events URL): money and links as that version
// writes them (CONTRACT §9).

import type { ArticleRecord, MembershipRecord, OrderRecord, RefundRecord, UserRecord } from '../../proto/messages.js';
import type { ApiVersion, EventRecord } from '../../proto/webhooks.js';
import { renderArticle } from './articles.js';
import { iso } from './common.js';
import { renderOrder } from './orders.js';
import { renderRefund } from './refunds.js';
import { renderMember } from './teams.js';
import { renderUser } from './users.js';
import { relink } from '../versions.js';

export function renderEventData(event: EventRecord, apiVersion: ApiVersion): unknown {
  switch (event.resource) {
    case 'order':
      return renderOrder(event.data as OrderRecord, undefined, new Set(['items']), undefined, apiVersion);
    case 'refund':
      return relink(renderRefund(event.data as RefundRecord, apiVersion), apiVersion);
    case 'user':
      return relink(renderUser(event.data as UserRecord), apiVersion);
    case 'membership':
      return relink(renderMember(event.data as MembershipRecord), apiVersion);
    case 'article': {
      const a = event.data as ArticleRecord;
      // An event carries the whole article: every translation, beside the default-language view.
      return relink({ ...renderArticle(a, a.defaultLanguage, ''), defaultLanguage: a.defaultLanguage, translations: a.translations }, apiVersion);
    }
    case 'ping':
      return { endpointId: (event.data as { id: string }).id };
  }
}

/** The event as JSON members: what GET /v1/events/{id} answers and a delivery's body holds. */
export function renderEvent(event: EventRecord, apiVersion: ApiVersion): Record<string, unknown> {
  return { id: event.id, type: event.type, created: iso(event.created), apiVersion, data: renderEventData(event, apiVersion) };
}

/** A delivery's body: the raw bytes that are signed (SPEC §6.1.4). */
export function eventBody(event: EventRecord, apiVersion: ApiVersion): string {
  return JSON.stringify(renderEvent(event, apiVersion));
}
