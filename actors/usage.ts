// Residual traffic on non-active routes (SPEC §9.3: retirement is gated by traffic, not by
// calendar). Gateways count calls in memory and flush them every second as `usage.add` to the
// owner of the route's partition, where one turn at a time adds them up in LMDB: per route, per
// UTC day, per principal. Every gateway's counts for a route meet at one owner, so the sums are
// cluster-wide without any coordination between gateways.

import type { Table, TableSpec, Write } from '../storage/store.js';
import type { CommandOf, QueryOf, UsageRow } from '../proto/messages.js';
import type { Plan } from './batch.js';

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

/** Rows of this node, for one route or all, from `since` (a UTC day) on. */
export function readUsage(q: QueryOf<'usage.read'>, scan: (prefix: (string | number)[], limit: number) => string[], table: Table<UsageRecord>): UsageRow[] {
  const ids = scan(q.route === undefined ? [] : [q.route], MAX_SCAN);
  const rows: UsageRow[] = [];
  for (const id of ids) {
    const r = table.get(id);
    if (!r || (q.since !== undefined && r.day < q.since)) continue;
    rows.push({ route: r.route, day: r.day, principal: r.principal, count: r.count });
  }
  return rows;
}
