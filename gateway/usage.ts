// Counting calls to non-active routes without slowing them (issue 6 §4): the hot path adds one
// to a Map entry; once a second (and at shutdown) the counts go to the owner of each route's
// partition as `usage.add` commands (one per partition, or more for a large flush), where actors/usage.ts sums them durably. In
// cluster mode every gateway flushes to the same owner, so the sums cover the whole cluster.

import { Buffer } from 'node:buffer';
import type { Bus } from '../common/bus.js';
import { fromWire } from '../common/errors.js';
import { partitionFor } from '../common/ids.js';
import type { Logger } from '../common/log.js';
import type { UsageCount, UsageRow } from '../proto/messages.js';
import type { UsageSink } from './lifecycle.js';

const DAY_MS = 86_400_000;
/**
 * Most distinct (route, day, principal) counts held: between flushes, and in all kept while the
 * owner is away; past it, new principals share one count per route and day.
 */
export const MAX_PENDING = 50_000;
const OVERFLOW = '(others)';

export class UsageCounter implements UsageSink {
  // Today's counts by route, then by principal: the hot path builds no key string. A day that
  // ends before a flush moves whole to `earlier`.
  private today = new Map<string, Map<string, number>>();
  private earlier: UsageCount[] = [];
  private size = 0;
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private day = { start: 0, end: 0, name: '' };

  constructor(
    private readonly bus: Bus,
    private readonly log: Logger,
  ) {}

  count(route: string, principal: string, now: number): void {
    if (now < this.day.start || now >= this.day.end) this.turnDay(now);
    let byPrincipal = this.today.get(route);
    if (!byPrincipal) this.today.set(route, (byPrincipal = new Map()));
    const n = byPrincipal.get(principal);
    if (n !== undefined) byPrincipal.set(principal, n + 1);
    else if (this.size < MAX_PENDING) {
      byPrincipal.set(principal, 1);
      this.size++;
    } else byPrincipal.set(OVERFLOW, (byPrincipal.get(OVERFLOW) ?? 0) + 1);
  }

  start(intervalMs = 1000): void {
    this.timer ??= setInterval(() => {
      this.flush().catch((err: unknown) => this.log.error({ err }, 'usage flush failed'));
    }, intervalMs).unref();
  }

  /** Sends what was counted; counts a failed send could not deliver are kept for the next flush. */
  flush(): Promise<void> {
    this.flushing ??= this.send().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.flushing;
    await this.flush();
  }

  private turnDay(now: number): void {
    for (const c of this.drainToday()) this.earlier.push(c);
    const start = now - (now % DAY_MS);
    this.day = { start, end: start + DAY_MS, name: new Date(start).toISOString().slice(0, 10) };
  }

  private drainToday(): UsageCount[] {
    const out: UsageCount[] = [];
    for (const [route, byPrincipal] of this.today) for (const [principal, n] of byPrincipal) out.push({ route, day: this.day.name, principal, n });
    this.today = new Map();
    this.size = 0;
    return out;
  }

  private async send(): Promise<void> {
    // Counts kept from failed flushes merge with new ones: however long the owner is away, this
    // holds one entry per (route, day, principal), at most MAX_PENDING of them; more principals
    // are counted under OVERFLOW, so no call goes uncounted.
    const merged = new Map<string, UsageCount>();
    const add = (c: UsageCount): void => {
      let key = `${c.route}\u0000${c.day}\u0000${c.principal}`;
      let seen = merged.get(key);
      if (!seen && merged.size >= MAX_PENDING) {
        key = `${c.route}\u0000${c.day}\u0000${OVERFLOW}`;
        seen = merged.get(key);
        c = { ...c, principal: OVERFLOW };
      }
      if (seen) seen.n += c.n;
      else merged.set(key, { ...c });
    };
    for (const c of this.earlier) add(c);
    for (const c of this.drainToday()) add(c);
    this.earlier = [];
    const batch = [...merged.values()];
    if (batch.length === 0) return;
    const byPartition = new Map<number, UsageCount[]>();
    for (const c of batch) {
      const p = partitionFor(c.route);
      let list = byPartition.get(p);
      if (!list) byPartition.set(p, (list = []));
      list.push(c);
    }
    await Promise.all(
      [...byPartition].flatMap(([partition, counts]) => commandsOf(counts).map((part) => [partition, part] as const)).map(async ([partition, counts]) => {
        const r = await this.bus.send({ kind: 'usage.add', tenant: '', partition, counts }).catch((err: unknown) => ({ ok: false as const, error: { code: 'unavailable' as const, detail: String(err) } }));
        if (r.ok) return;
        // Kept for the next flush (the owner sums repeats). A send that timed out may still have
        // been applied, so a count can come out high, never low: retirement is gated on traffic,
        // and errs on the safe side.
        this.log.warn({ partition, detail: r.error.detail }, 'usage counts not flushed; retrying');
        for (const c of counts) this.earlier.push(c);
      }),
    );
  }
}

/**
 * Most bytes of counts one `usage.add` carries. What a flush holds after the owner was away can
 * be MAX_PENDING principals of up to a few hundred bytes each, megabytes in one command: over
 * NATS max_payload (1 MiB by default) it was refused as too large at every flush, for good, and
 * every count for that partition with it. A quarter of the smallest max_payload the cluster runs
 * with leaves room for the envelope.
 */
export const MAX_COMMAND_BYTES = 256 * 1024;
// msgpack's framing of one count: a map header, four member names and the number.
const COUNT_OVERHEAD_BYTES = 32;

/** `counts` in order, cut into runs of at most MAX_COMMAND_BYTES each (UTF-8 as packed). */
export function commandsOf(counts: UsageCount[]): UsageCount[][] {
  const out: UsageCount[][] = [];
  let run: UsageCount[] = [];
  let bytes = 0;
  for (const c of counts) {
    const size = Buffer.byteLength(c.route) + Buffer.byteLength(c.principal) + c.day.length + COUNT_OVERHEAD_BYTES;
    if (run.length > 0 && bytes + size > MAX_COMMAND_BYTES) {
      out.push(run);
      run = [];
      bytes = 0;
    }
    run.push(c);
    bytes += size;
  }
  if (run.length > 0) out.push(run);
  return out;
}

export interface TopCaller {
  principal: string;
  count: number;
  lastDay: string;
}

export interface RouteUsage {
  route: string;
  total: number;
  callers: TopCaller[];
}

/** Sums per route and principal over every owner's rows, busiest first, `top` callers per route. */
export function summarize(rows: UsageRow[], top: number): RouteUsage[] {
  const routes = new Map<string, Map<string, TopCaller>>();
  for (const r of rows) {
    let callers = routes.get(r.route);
    if (!callers) routes.set(r.route, (callers = new Map()));
    const c = callers.get(r.principal);
    if (c) {
      c.count += r.count;
      if (r.day > c.lastDay) c.lastDay = r.day;
    } else {
      callers.set(r.principal, { principal: r.principal, count: r.count, lastDay: r.day });
    }
  }
  const out: RouteUsage[] = [];
  for (const [route, callers] of routes) {
    const all = [...callers.values()].sort((a, b) => b.count - a.count || a.principal.localeCompare(b.principal));
    out.push({ route, total: all.reduce((n, c) => n + c.count, 0), callers: all.slice(0, top) });
  }
  return out.sort((a, b) => b.total - a.total || a.route.localeCompare(b.route));
}

/** Residual traffic, cluster-wide: every owner node's rows, summed. */
export async function readUsage(bus: Bus, opts: { route?: string; since?: string; top: number }): Promise<RouteUsage[]> {
  const q: { kind: 'usage.read'; route?: string; since?: string } = { kind: 'usage.read' };
  if (opts.route !== undefined) q.route = opts.route;
  if (opts.since !== undefined) q.since = opts.since;
  const results = await bus.scatter(q);
  const rows: UsageRow[] = [];
  for (const r of results) {
    if (!r.ok) throw fromWire(r.error);
    rows.push(...(r.value as UsageRow[]));
  }
  return summarize(rows, opts.top);
}
