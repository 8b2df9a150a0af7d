// What the soak counts: every answer by request kind and status, latency per kind and per group
// (reads, writes, hostile), and the errors with a few samples to read. One instance is shared by
// every loop of the run; nothing here blocks or allocates per request beyond a map lookup.
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks';

export type Group = 'read' | 'write' | 'hostile';

export interface ErrorSample {
  kind: string;
  reason: string;
  detail: string;
  atS: number;
}

interface KindStats {
  group: Group;
  statuses: Map<string, number>;
  errors: number;
  hist: RecordableHistogram;
}

export interface KindRow {
  kind: string;
  group: Group;
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  statuses: Record<string, number>;
  errors: number;
}

export interface GroupFigures {
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

const MAX_SAMPLES = 40;
const ms = (h: RecordableHistogram, p: number): number => (h.count === 0 ? 0 : Math.round(h.percentile(p) / 10) / 100);

export class Tally {
  private readonly kinds = new Map<string, KindStats>();
  private readonly groups = new Map<Group, RecordableHistogram>();
  readonly samples: ErrorSample[] = [];
  /** Errors by reason, over every kind. */
  readonly reasons = new Map<string, number>();
  errors = 0;

  constructor(private readonly startedAt: number) {}

  private kind(kind: string, group: Group): KindStats {
    let k = this.kinds.get(kind);
    if (!k) this.kinds.set(kind, (k = { group, statuses: new Map(), errors: 0, hist: createHistogram() }));
    return k;
  }

  /** One answer (or `socket`, `closed`, ... when there was none) and how long it took. */
  answer(kind: string, group: Group, status: string, elapsedMs: number): void {
    const k = this.kind(kind, group);
    k.statuses.set(status, (k.statuses.get(status) ?? 0) + 1);
    // Histograms take integers >= 1; microseconds keep sub-millisecond resolution.
    const us = Math.max(1, Math.round(elapsedMs * 1000));
    k.hist.record(us);
    let g = this.groups.get(group);
    if (!g) this.groups.set(group, (g = createHistogram()));
    g.record(us);
  }

  error(kind: string, group: Group, reason: string, detail: string): void {
    this.errors++;
    this.kind(kind, group).errors++;
    this.reasons.set(reason, (this.reasons.get(reason) ?? 0) + 1);
    if (this.samples.length < MAX_SAMPLES) {
      this.samples.push({ kind, reason, detail: detail.slice(0, 400), atS: Math.round((Date.now() - this.startedAt) / 100) / 10 });
    }
  }

  rows(seconds: number): KindRow[] {
    return [...this.kinds]
      .map(([kind, k]) => ({
        kind,
        group: k.group,
        requests: k.hist.count,
        rps: k.hist.count / seconds,
        p50Ms: ms(k.hist, 50),
        p99Ms: ms(k.hist, 99),
        maxMs: k.hist.count === 0 ? 0 : Math.round(k.hist.max / 10) / 100,
        statuses: Object.fromEntries([...k.statuses].sort(([a], [b]) => a.localeCompare(b))),
        errors: k.errors,
      }))
      .sort((a, b) => a.group.localeCompare(b.group) || b.requests - a.requests);
  }

  group(group: Group, seconds: number): GroupFigures {
    const h = this.groups.get(group);
    if (!h) return { requests: 0, rps: 0, p50Ms: 0, p99Ms: 0, maxMs: 0 };
    return { requests: h.count, rps: h.count / seconds, p50Ms: ms(h, 50), p99Ms: ms(h, 99), maxMs: Math.round(h.max / 10) / 100 };
  }
}
