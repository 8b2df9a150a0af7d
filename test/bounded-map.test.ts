// common/bounded-map.ts: the oldest entries go first once the weights pass the budget, whatever
// mix of sets, replacements and deletes came before, including many more than fit in the queue's
// compaction thresholds.

import test from 'ava';
import fc from 'fast-check';
import { BoundedMap } from '../common/bounded-map.js';

test('over the budget the oldest entries go first; weight 1 per entry bounds the count', (t) => {
  const m = new BoundedMap<string, number>(3);
  for (const [i, k] of ['a', 'b', 'c', 'd'].entries()) m.set(k, i);
  t.deepEqual([...m.entries()], [['b', 1], ['c', 2], ['d', 3]]);
  t.is(m.size, 3);
  t.is(m.weight, 3);
  t.is(m.get('a'), undefined);
  t.deepEqual(m.oldest(), ['b', 1]);
});

test('replacing a key makes it the newest; a delete frees its weight', (t) => {
  const m = new BoundedMap<string, string>(10);
  m.set('a', 'x', 4);
  m.set('b', 'y', 4);
  m.set('a', 'z', 4); // a is now the newest
  t.deepEqual([...m.entries()], [['b', 'y'], ['a', 'z']]);
  m.set('c', 'v', 4); // over 10: b, the oldest, goes
  t.deepEqual([...m.entries()], [['a', 'z'], ['c', 'v']]);
  t.is(m.weight, 8);
  t.true(m.delete('c'));
  t.true(m.delete('a'));
  t.false(m.delete('a'));
  t.is(m.weight, 0);
  t.is(m.oldest(), undefined);
  m.set('c', 'w', 10);
  t.deepEqual([...m.entries()], [['c', 'w']]);
});

test('an entry heavier than the whole budget is not kept, and pushes nothing out', (t) => {
  const m = new BoundedMap<string, number>(5);
  m.set('a', 1, 2);
  m.set('huge', 2, 6);
  t.deepEqual([...m.entries()], [['a', 1]]);
  t.is(m.weight, 2);
});

test('clear empties it, and it fills again from there', (t) => {
  const m = new BoundedMap<number, number>(2);
  for (let i = 0; i < 5000; i++) m.set(i, i);
  m.clear();
  t.is(m.size, 0);
  t.is(m.weight, 0);
  m.set(1, 1);
  m.set(2, 2);
  m.set(3, 3);
  t.deepEqual([...m.entries()], [[2, 2], [3, 3]]);
});

test('keys replaced and deleted many times over are still evicted oldest first', (t) => {
  // Thousands of replacements of a few keys leave thousands of stale places in the queue; the
  // queue is rebuilt from the map, and eviction goes on in the right order afterwards.
  const m = new BoundedMap<string, number>(1000);
  for (let i = 0; i < 20_000; i++) m.set(`k${i % 10}`, i);
  for (let i = 0; i < 5_000; i++) {
    m.set(`d${i}`, i);
    m.delete(`d${i}`);
  }
  t.deepEqual([...m.entries()].map(([k]) => k), ['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9']);
  t.deepEqual(m.oldest(), ['k0', 19_990]);
  for (let i = 0; i < 995; i++) m.set(`n${i}`, i);
  // 1005 entries of weight 1 do not fit 1000: the five oldest went.
  t.deepEqual([...m.entries()].slice(0, 5).map(([k]) => k), ['k5', 'k6', 'k7', 'k8', 'k9']);
  t.is(m.size, 1000);
});

type Op = { kind: 'set'; key: number; weight: number } | { kind: 'delete'; key: number } | { kind: 'get'; key: number };

/** The obvious implementation, kept as the model: a Map in insertion order, oldest first out. */
class Model {
  readonly map = new Map<number, { value: number; weight: number }>();
  weight = 0;
  constructor(private readonly budget: number) {}
  set(key: number, value: number, weight: number): void {
    this.delete(key);
    if (weight > this.budget) return;
    this.map.set(key, { value, weight });
    this.weight += weight;
    while (this.weight > this.budget) this.delete(this.map.keys().next().value!);
  }
  delete(key: number): void {
    const e = this.map.get(key);
    if (e === undefined) return;
    this.map.delete(key);
    this.weight -= e.weight;
  }
}

test('any sequence of sets, deletes and gets leaves the same entries, in the same order, as the model', (t) => {
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('set' as const), key: fc.integer({ min: 0, max: 3000 }), weight: fc.integer({ min: 1, max: 40 }) }) },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('delete' as const), key: fc.integer({ min: 0, max: 3000 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('get' as const), key: fc.integer({ min: 0, max: 3000 }) }) },
  );
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 2000 }), fc.array(op, { maxLength: 6000 }), (budget, ops) => {
      const m = new BoundedMap<number, number>(budget);
      const model = new Model(budget);
      ops.forEach((o, i) => {
        if (o.kind === 'set') {
          m.set(o.key, i, o.weight);
          model.set(o.key, i, o.weight);
        } else if (o.kind === 'delete') {
          m.delete(o.key);
          model.delete(o.key);
        } else {
          if (m.get(o.key) !== model.map.get(o.key)?.value) throw new Error(`get ${o.key} after op ${i}`);
        }
        if (m.weight !== model.weight || m.size !== model.map.size) throw new Error(`weight or size differ after op ${i}`);
        const first = model.map.entries().next().value;
        const oldest = m.oldest();
        if ((first === undefined) !== (oldest === undefined) || (first && oldest && (first[0] !== oldest[0] || first[1].value !== oldest[1]))) {
          throw new Error(`oldest differs after op ${i}`);
        }
      });
      const want = [...model.map].map(([k, e]) => [k, e.value]);
      if (JSON.stringify([...m.entries()]) !== JSON.stringify(want)) throw new Error('entries differ at the end');
    }),
    { numRuns: 60 },
  );
  t.pass('60 runs of up to 6000 operations matched the model');
});
