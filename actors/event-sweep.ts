// EVENT_RETENTION_DAYS: events are readable (GET /v1/events) for that long, then forgotten, and
// so are settled delivery records. Like the idempotency sweep, it reads the oldest first and
// deletes a bounded chunk per transaction, so one sweep never holds the write lock long, whatever
// the backlog. Neither changes once it is swept: an event never changes after its commit, and a
// settled delivery is never written again, so no turn is needed.

import type { DeliveryRecord, EventRecord } from '../proto/webhooks.js';
import type { IndexKey, Store, Table, Write } from '../storage/store.js';
import { EVENTS_BY_AGE } from './events.js';
import { SETTLED_DELIVERIES } from './webhooks.js';

/**
 * Removes records whose age key (under `prefix`) is below `cutoff`, `chunk` per transaction,
 * until none is left or `stop` says so (the host is closing: its store must not be written after).
 */
async function sweepOlder(store: Store, table: Table<unknown>, prefix: IndexKey, cutoff: number, chunk: number, stop: () => boolean): Promise<number> {
  let removed = 0;
  while (!stop()) {
    const due = store.scan(table, { prefix, after: undefined, reverse: false, limit: chunk });
    const writes: Write<unknown>[] = [];
    for (const { v, id } of due) {
      if (typeof v !== 'number' || v >= cutoff) break;
      writes.push({ table, id, before: table.get(id), after: undefined });
    }
    if (!writes.length) return removed;
    await store.commit(writes, { tier: 'service' });
    removed += writes.length;
    if (writes.length < chunk) return removed;
  }
  return removed;
}

export async function sweepEvents(store: Store, tables: { events: Table<EventRecord>; deliveries: Table<DeliveryRecord> }, cutoff: number, chunk: number, stop: () => boolean): Promise<number> {
  const events = await sweepOlder(store, tables.events as Table<unknown>, EVENTS_BY_AGE, cutoff, chunk, stop);
  return events + (await sweepOlder(store, tables.deliveries as Table<unknown>, SETTLED_DELIVERIES, cutoff, chunk, stop));
}
