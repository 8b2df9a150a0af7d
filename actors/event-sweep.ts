// EVENT_RETENTION_DAYS: events are readable (GET /v1/events) for that long, then forgotten. Like
// the idempotency sweep, it reads the oldest first and deletes a bounded chunk per transaction,
// so one sweep never holds the write lock long, whatever the backlog. Events never change, so no
// turn is needed: nothing else writes an event after it is committed.

import type { EventRecord } from '../proto/webhooks.js';
import type { Store, Table } from '../storage/store.js';
import { EVENTS_BY_AGE } from './events.js';

export async function sweepEvents(store: Store, events: Table<EventRecord>, cutoff: number, chunk: number): Promise<number> {
  let removed = 0;
  for (;;) {
    const due = store.scan(events as Table<unknown>, { prefix: EVENTS_BY_AGE, after: undefined, reverse: false, limit: chunk });
    const writes = [];
    for (const { v, id } of due) {
      if (typeof v !== 'number' || v >= cutoff) break;
      writes.push({ table: events as Table<unknown>, id, before: events.get(id), after: undefined });
    }
    if (!writes.length) return removed;
    await store.commit(writes);
    removed += writes.length;
    if (writes.length < chunk) return removed;
  }
}
