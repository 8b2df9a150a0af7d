// Residual traffic on non-active routes (SPEC §9.3: retirement is gated by traffic, not by
// calendar). Gateways count calls in memory and flush them every second as `usage.add` to the
// owner of the route's partition, where one turn at a time adds them up in LMDB: per route, per
// UTC day, per principal. Every gateway's counts for a route meet at one owner, so the sums are
// cluster-wide without any coordination between gateways.

import type { RangeQuery, Table, TableSpec, Write } from '../storage/store.js';
import type { CommandOf, QueryOf, UsageRow } from '../proto/messages.js';
import type { Plan } from './batch.js';
import { ApiError } from '../common/errors.js';

export interface UsageRecord {
  id: string;
  /** Records must name a tenant and a version like every other; usage belongs to the operator. */
  tenant: string;
  version: number;
  route: string;
  day: string;
  principal: string;
  count: number;
}

// Routes, days and principals hold no control characters (route templates are ours; principals
// are token subjects, which the token check keeps free of them), so NUL separates them.
const usageId = (route: string, day: string, principal: string): string => `${route}\u0000${day}\u0000${principal}`;

export const USAGE: TableSpec<UsageRecord> = { name: 'usage', indexKeys: (r) => [[r.route, r.day, r.id]] };

/** The mailbox every count of one partition goes through: additions never race. */
export const usageLock = (partition: number): string => `usage\u0000${partition}`;

/** Most rows one read walks; a route × day × principal row is small, and reads are operator-only. */
const MAX_SCAN = 200_000;

export function planUsageAdd(cmd: CommandOf<'usage.add'>, table: Table<UsageRecord>): Plan {
  const byId = new Map<string, Write<UsageRecord>>();
  for (const c of cmd.counts) {
    const id = usageId(c.route, c.day, c.principal);
    const w = byId.get(id);
    const prior = w ? w.after : table.get(id);
    const after: UsageRecord = prior
      ? { ...prior, count: prior.count + c.n, version: prior.version + 1 }
      : { id, tenant: '', version: 1, route: c.route, day: c.day, principal: c.principal, count: c.n };
    if (w) w.after = after;
    else byId.set(id, { table, id, before: prior, after });
  }
  return { writes: [...byId.values()] as Write<unknown>[], reply: null };
}

/** The store's keyset scan of the usage index: positions after `after` under `prefix`, ascending. */
export type UsageScan = (q: Omit<RangeQuery, 'reverse'>) => { v: number | string; id: string }[];

// Sorts after every day and every id, so a scan positioned there goes on with the next route.
const PAST_ROUTE = '\uffff';

/**
 * Rows of this node, for one route or all, from `since` (a UTC day) on. Each route's walk starts
 * at its `since` day in the index (route, day, id), so older days cost nothing. A read that would
 * still pass `maxScan` rows fails rather than answer a partial sum: a count here may come out
 * high, never low.
 */
export function readUsage(q: QueryOf<'usage.read'>, scan: UsageScan, table: Table<UsageRecord>, maxScan = MAX_SCAN): UsageRow[] {
  const rows: UsageRow[] = [];
  const read = (route: string): void => {
    const hits = scan({ prefix: [route], after: q.since === undefined ? undefined : [q.since, ''], limit: maxScan - rows.length + 1 });
    if (rows.length + hits.length > maxScan) {
      throw new ApiError('payload-too-large', `Usage since ${q.since ?? 'the first day'} has more than ${maxScan} rows on one node; name a route or a later since.`);
    }
    for (const { id } of hits) {
      const r = table.get(id);
      if (r) rows.push({ route: r.route, day: r.day, principal: r.principal, count: r.count });
    }
  };
  if (q.route !== undefined) {
    read(q.route);
    return rows;
  }
  // One walk per route, found by skipping past the previous route's rows: routes are few.
  for (let next = scan({ prefix: [], after: undefined, limit: 1 })[0]; next !== undefined; next = scan({ prefix: [], after: [next.v, PAST_ROUTE], limit: 1 })[0]) {
    read(String(next.v));
  }
  return rows;
}
