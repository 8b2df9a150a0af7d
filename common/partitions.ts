import { PARTITIONS } from './ids.js';

// ACTOR_PARTITIONS names the partitions an actor node serves under static assignment, e.g.
// "0-127" or "0-63,128-191". A typo here would silently leave data unserved or doubly owned,
// so anything unexpected (overlaps included) stops the process with a message saying why.

const ALL: readonly number[] = Array.from({ length: PARTITIONS }, (_, p) => p);

/** The partitions a spec names, ascending. Undefined means all of them (embedded-style node). */
export function parsePartitions(spec: string | undefined): number[] {
  if (spec === undefined) return [...ALL];
  if (spec.trim() === '') throw new Error('ACTOR_PARTITIONS is empty: name partitions like "0-127" or "0-63,128-191"');
  const seen = new Set<number>();
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new Error(`ACTOR_PARTITIONS: '${part}' is not a partition or a range like 0-127`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi >= PARTITIONS) throw new Error(`ACTOR_PARTITIONS: '${part}' goes past the last partition, ${PARTITIONS - 1}`);
    if (lo > hi) throw new Error(`ACTOR_PARTITIONS: '${part}' runs backwards`);
    for (let p = lo; p <= hi; p++) {
      if (seen.has(p)) throw new Error(`ACTOR_PARTITIONS: partition ${p} is named twice`);
      seen.add(p);
    }
  }
  return [...seen].sort((a, b) => a - b);
}

/** Every partition but `except`: what a host owns in embedded mode (and tests, short of a few). */
export function allPartitions(...except: number[]): Set<number> {
  return new Set(except.length ? ALL.filter((p) => !except.includes(p)) : ALL);
}

/** Inclusive [first, last] runs, so an announcement stays a few bytes however many partitions a node has. */
export function toRanges(partitions: readonly number[]): [number, number][] {
  const sorted = [...new Set(partitions)].sort((a, b) => a - b);
  const ranges: [number, number][] = [];
  for (const p of sorted) {
    const last = ranges[ranges.length - 1];
    if (last && last[1] === p - 1) last[1] = p;
    else ranges.push([p, p]);
  }
  return ranges;
}

/** Partitions as ACTOR_PARTITIONS writes them (`0-63,128`): what parsePartitions reads back. */
export function formatPartitions(partitions: readonly number[]): string {
  return toRanges(partitions)
    .map(([lo, hi]) => (lo === hi ? `${lo}` : `${lo}-${hi}`))
    .join(',');
}

export function isPartition(p: unknown): boolean {
  return typeof p === 'number' && Number.isInteger(p) && p >= 0 && p < PARTITIONS;
}
