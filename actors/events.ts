// Events and the transactional outbox (issue 5, ARCHITECTURE property 3). An actor emits an event
// with one line in its decision (`events: [emit('order.paid', 'order', next, now)]`); the host
// stores the event and an outbox row in the transaction that commits the change, so an
// acknowledged write's events exist exactly when the write does. The event id is minted here, at
// decide time, and stored: every delivery and redelivery carries that id.

import { newId, partitionOf } from '../common/ids.js';
import type { ListQuery } from '../proto/messages.js';
import type { EventRecord, EventResource, EventType, OutboxEntry } from '../proto/webhooks.js';
import type { TableSpec, Write, Table } from '../storage/store.js';
import { type ActorDef, existing } from './actor.js';
import type { CommandOf } from '../proto/messages.js';

// Tenants hold no control characters (the token check refuses them), so a NUL-led first key
// element cannot collide with a tenant's index keys.
const BY_AGE = '\u0000created';

/** An event of `type` carrying `data`, the full state of a record with an id (or of a ping). */
export function emit(type: EventType, resource: EventResource, data: { id: string; tenant: string }, now: number, endpointId?: string): EventRecord {
  const event: EventRecord = { id: newId('event', partitionOf(data.id)), tenant: data.tenant, version: 1, type, resource, created: now, data };
  if (endpointId !== undefined) event.endpointId = endpointId;
  return event;
}

export const EVENTS: TableSpec<EventRecord> = {
  name: 'events',
  indexKeys: (e) => [
    [e.tenant, '*', 'created', e.created, e.id],
    [e.tenant, e.type, 'created', e.created, e.id],
    // The retention sweep reads oldest first across tenants.
    [BY_AGE, e.created, e.id],
  ],
};

export const OUTBOX: TableSpec<OutboxEntry> = { name: 'outbox', indexKeys: (o) => [[o.created, o.id]] };

/** Reads of events: GET /v1/events/{id} and the list, filtered by type. */
export const eventActor: ActorDef<EventRecord, CommandOf<'event.get'>> = {
  table: EVENTS,
  isRead: () => true,
  listPrefix: (q: ListQuery) => [q.tenant, q.filter ?? '*', 'created'],
  decide: (_cmd, current) => ({ next: current, reply: existing(current, 'event') }),
};

/**
 * The writes that store `events`, and queue in the outbox those `deliverable` says someone may
 * be waiting for, for the change's transaction; `queued` says whether any was.
 */
export function eventWrites(
  events: readonly EventRecord[],
  tables: { events: Table<EventRecord>; outbox: Table<OutboxEntry> },
  deliverable: (e: EventRecord) => boolean,
): { writes: Write<unknown>[]; queued: boolean } {
  const writes: Write<unknown>[] = [];
  let queued = false;
  for (const e of events) {
    writes.push({ table: tables.events as Table<unknown>, id: e.id, before: undefined, after: e });
    if (!deliverable(e)) continue;
    writes.push({ table: tables.outbox as Table<unknown>, id: e.id, before: undefined, after: { id: e.id, tenant: e.tenant, created: e.created } });
    queued = true;
  }
  return { writes, queued };
}

/** The index prefix under which events are kept oldest first, for the retention sweep. */
export const EVENTS_BY_AGE: (string | number)[] = [BY_AGE];
