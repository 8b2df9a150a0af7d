// EVENT_RETENTION_DAYS: events are readable (GET /v1/events) for that long, then forgotten, and
// so are settled delivery records. Like the idempotency sweep, it reads the oldest first and
// deletes a bounded chunk per transaction, so one sweep never holds the write lock long, whatever
// the backlog. Neither changes once it is swept: an event never changes after its commit, and a
// settled delivery is never written again, so no turn is needed.

import type { DeliveryRecord, EventRecord } from '../proto/webhooks.js';
import { ApiError } from '../common/errors.js';
import type { IndexKey, Store, Table, Write } from '../storage/store.js';
import { EVENTS_BY_AGE } from './events.js';
import { SETTLED_DELIVERIES } from './webhooks.js';

/** The smallest chunk a sweep short of room tries before it waits for the next sweep. */
const SMALLEST_CHUNK = 16;

/**
 * Removes records whose age key (under `prefix`) is below `cutoff`, `size` per transaction,
 * until none is left or `stop` says so (the host is closing: its store must not be written after).
 * A chunk refused for want of room (storage/room.ts: a delete copies pages before it frees any)
 * is tried again at half the size, down to SMALLEST_CHUNK; then the sweep ends until the next.
 */
async function sweepOlder(store: Store, table: Table<unknown>, prefix: IndexKey, cutoff: number, size: number, stop: () => boolean): Promise<number> {
  let removed = 0;
  let chunk = size;
  while (!stop()) {
    const due = store.scan(table, { prefix, after: undefined, reverse: false, limit: chunk });
    const writes: Write<unknown>[] = [];
    for (const { v, id } of due) {
      if (typeof v !== 'number' || v >= cutoff) break;
      writes.push({ table, id, before: table.get(id), after: undefined });
    }
    if (!writes.length) return removed;
    try {
      await store.commit(writes, { tier: 'service' });
    } catch (err) {
      if (!(err instanceof ApiError && err.slug === 'unavailable')) throw err;
      if (chunk <= SMALLEST_CHUNK) return removed;
      chunk = Math.max(SMALLEST_CHUNK, chunk >> 1);
      continue;
    }
    removed += writes.length;
    if (writes.length < chunk) return removed;
  }
  return removed;
}

export async function sweepEvents(store: Store, tables: { events: Table<EventRecord>; deliveries: Table<DeliveryRecord> }, cutoff: number, chunk: number, stop: () => boolean): Promise<number> {
  const events = await sweepOlder(store, tables.events as Table<unknown>, EVENTS_BY_AGE, cutoff, chunk, stop);
  return events + (await sweepOlder(store, tables.deliveries as Table<unknown>, SETTLED_DELIVERIES, cutoff, chunk, stop));
}
