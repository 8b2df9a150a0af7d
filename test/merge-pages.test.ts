// gateway/collection.ts: the owners' slices of a list merged into one page (mergePages), asked
// again past a slice an owner cut short to fit its reply (gatherPage). Paging through with the
// last row of each page as the next page's start must give every row once, in order, with every
// page but the last full, whatever the owners cut.

import test from 'ava';
import fc from 'fast-check';
import { gatherPage, mergePages } from '../gateway/collection.js';
import type { ListPage, ListQuery, Query, SortDir } from '../proto/messages.js';

type Row = { v: number | string; record: { id: string } };

/** Code point order (UTF-8 byte order, as LMDB's keys sort), numbers before strings. */
function compareValues(a: number | string, b: number | string): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  if (typeof a === 'number') return -1;
  if (typeof b === 'number') return 1;
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

/** A slice of `rows` (in `dir` order) for `q`: up to limit+1 rows after q.after, cut to `keep` of them when that is fewer. */
function slice(rows: Row[], q: ListQuery, keep: number, order: (a: Row, b: Row) => number): ListPage<{ id: string }> {
  const after = q.after;
  const next = rows.filter((r) => after === undefined || order(r, { v: after.v, record: { id: after.id } }) > 0).slice(0, q.limit + 1);
  return next.length > keep ? { rows: next.slice(0, keep), cut: true } : { rows: next };
}

// Sort values as lists meet them: numbers (createdAt, total), or strings in code point order,
// astral characters and U+E000 among them (a name sort).
const values = fc.oneof(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 30 }), fc.array(fc.constantFrom('a', 'b', 'ab', 'é', '\uE000', '😀', 'z'), { maxLength: 30 }));

test('paging through owners that cut their slices gives every row once, in order, and only the last page short', async (t) => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(values, { minLength: 1, maxLength: 4 }),
      fc.constantFrom<SortDir>('asc', 'desc'),
      fc.integer({ min: 1, max: 8 }),
      fc.array(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 50 }),
      async (owners, dir, limit, keeps) => {
        const sign = dir === 'asc' ? 1 : -1;
        const order = (a: Row, b: Row): number => sign * (compareValues(a.v, b.v) || compareValues(a.record.id, b.record.id));
        let n = 0;
        const stored = owners.map((vs) => (vs as (number | string)[]).map((v) => ({ v, record: { id: `r${String(n++).padStart(3, '0')}` } })).sort(order));
        const expected = stored.flat().sort(order).map((r) => r.record.id);
        let asked = 0;
        const bus = {
          gather: (q: Query): Promise<unknown[]> => {
            const query = (q as { query: ListQuery }).query;
            asked++;
            return Promise.resolve(stored.map((rows, i) => slice(rows, query, keeps[(asked + i) % keeps.length]!, order)));
          },
        };
        const got: string[] = [];
        let after: ListQuery['after'];
        for (let page = 0; ; page++) {
          if (page > expected.length + 1) return false; // no progress
          const { rows, hasMore } = await gatherPage<{ id: string }>(bus, 'order.list', { tenant: 't', filter: undefined, sort: 'createdAt', dir, after, limit, withChildren: false });
          got.push(...rows.map((r) => r.record.id));
          if (!hasMore) break;
          if (rows.length !== limit) return false;
          const last = rows[rows.length - 1]!;
          after = { v: last.v, id: last.record.id };
        }
        t.deepEqual(got, expected);
        return true;
      },
    ),
    { numRuns: 500 },
  );
});

test('a cut slice ends the merged page at its last row, and the page says there is more', (t) => {
  const row = (v: number, id: string): Row => ({ v, record: { id } });
  const cut: ListPage<{ id: string }> = { rows: [row(1, 'a'), row(3, 'c')], cut: true };
  const whole: ListPage<{ id: string }> = { rows: [row(2, 'b'), row(4, 'd')] };
  const merged = mergePages([cut, whole], 'asc', 10);
  t.deepEqual(merged.rows.map((r) => r.record.id), ['a', 'b', 'c']);
  t.true(merged.hasMore);
  t.true(merged.cut);
  const uncut = mergePages([{ rows: cut.rows }, whole], 'asc', 10);
  t.deepEqual(uncut.rows.length, 4);
  t.false(uncut.hasMore);
});
