// gateway/resources/common.ts iso: the ISO 8601 form of a time in milliseconds, byte for byte
// what Date's toISOString gives, for every time it works out itself and every time it hands on.

import test from 'ava';
import fc from 'fast-check';
import { iso } from '../gateway/resources/common.js';

const YEAR_10000_MS = Date.UTC(10000, 0, 1);

test('every millisecond from 1970 to 9999 is written as toISOString writes it', (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: YEAR_10000_MS - 1 }), (ms) => {
      t.is(iso(ms), new Date(ms).toISOString());
    }),
    { numRuns: 20_000 },
  );
  // The edges of days, months, leap days and centuries.
  for (const [y, m, d] of [[1970, 0, 1], [1972, 1, 29], [1999, 11, 31], [2000, 1, 29], [2000, 2, 1], [2100, 1, 28], [2100, 2, 1], [2400, 1, 29], [9999, 11, 31]] as const) {
    for (const ms of [Date.UTC(y, m, d), Date.UTC(y, m, d, 23, 59, 59, 999)]) t.is(iso(ms), new Date(ms).toISOString());
  }
});

test('times outside those years, and fractions, are written by Date', (t) => {
  for (const ms of [-1, -62_198_755_200_000, YEAR_10000_MS, YEAR_10000_MS + 1, 1.5, 8.64e15]) t.is(iso(ms), new Date(ms).toISOString());
  t.throws(() => iso(Number.NaN), { instanceOf: RangeError });
});
