// Ids (common/ids.ts): the time, partition and random parts, and ids derived from another id.

import test from 'ava';
import { derivedId, newId, parseId, partitionFor, partitionForPair, partitionOf } from '../common/ids.js';

test('a derived id is fixed by its base and name, keeps the base time and partition, and is a valid id of its kind', (t) => {
  const event = newId('event', 0xa7);
  const a = derivedId('delivery', event, 'we_one');
  t.is(derivedId('delivery', event, 'we_one'), a);
  t.not(derivedId('delivery', event, 'we_two'), a);
  t.not(derivedId('delivery', newId('event', 0xa7), 'we_one'), a);
  t.is(parseId('delivery', a), a);
  t.is(partitionOf(a), 0xa7);
  t.is(a.slice(4, 15), event.slice(4, 15));
});

test('derived ids of a thousand names under one base are all different and all well formed', (t) => {
  const event = newId('event');
  const ids = Array.from({ length: 1000 }, (_, i) => derivedId('delivery', event, `we_${i}`));
  t.is(new Set(ids).size, ids.length);
  t.true(ids.every((id) => parseId('delivery', id) === id));
});

test('a pair lands where the two joined by NUL land, so keyed creates keep their home across versions', (t) => {
  const pairs: [string, string][] = [['t1', 'k'], ['', ''], ['tenant_acme', 'b3f1c2a4-0d9e-4f51-9a3c-2e7d1f0b8c6a'], ['tenant-ü', 'ключ-🍕'], ['a', '']];
  for (let i = 0; i < 200; i++) pairs.push([`tenant-${i}`, `key-${i * 7919}`]);
  const spread = new Set<number>();
  for (const [a, b] of pairs) {
    t.is(partitionForPair(a, b), partitionFor(`${a}\u0000${b}`), `${a} / ${b}`);
    spread.add(partitionForPair(a, b));
  }
  // Not one constant: the pairs spread over many partitions.
  t.true(spread.size > 50);
  // Where keys created before partitionForPair existed live: the same FNV-1a over the joined
  // string, worked out by the code it replaced.
  t.is(partitionForPair('t1', 'k'), 171);
  t.is(partitionForPair('tenant_acme', 'b3f1c2a4-0d9e-4f51-9a3c-2e7d1f0b8c6a'), 111);
  t.is(partitionForPair('bench', 'instructions-7'), 194);
});

test('parseId takes exactly the prefix, 9 base-36 digits, 2 lowercase hex digits and 11 base-36 digits', (t) => {
  const shape = /^ord_[0-9a-z]{9}[0-9a-f]{2}[0-9a-z]{11}$/;
  const good = newId('order', 0xa7);
  t.is(parseId('order', good), good);
  t.is<string | undefined, string>(parseId('order', 'ord_0mwvrfbyq646b4bi76mh4b'), 'ord_0mwvrfbyq646b4bi76mh4b');
  // Every character of every part, one at a time, swapped for characters around its alphabet.
  const odd = ['/', ':', '`', '{', 'g', 'z', 'A', 'F', 'G', 'Z', '_', '-', '%', ' ', 'é', '\u0000'];
  let refused = 0;
  for (let i = 0; i < good.length; i++) {
    for (const c of odd) {
      const id = good.slice(0, i) + c + good.slice(i + 1);
      t.is(parseId('order', id) !== undefined, shape.test(id), id);
      if (!shape.test(id)) refused++;
    }
  }
  t.true(refused > 300);
  // The hex pair takes a-f only; the parts around it take g-z too.
  t.is(parseId('order', `${good.slice(0, 13)}g${good.slice(14)}`), undefined);
  t.truthy(parseId('order', `${good.slice(0, 12)}z${good.slice(13)}`));
  t.truthy(parseId('order', `${good.slice(0, 15)}z${good.slice(16)}`));
  for (const id of ['', 'ord_', good.slice(0, -1), `${good}0`, `prd_${good.slice(4)}`, `ORD_${good.slice(4)}`, `${good.slice(0, 4)}${good.slice(4).toUpperCase()}`]) {
    t.is(parseId('order', id), undefined, id);
  }
  t.is<string | undefined, string>(parseId('product', `prd_${good.slice(4)}`), `prd_${good.slice(4)}`);
  t.is<string | undefined, string>(parseId('team', `team_${good.slice(4)}`), `team_${good.slice(4)}`);
  t.is(parseId('team', `tea_${good.slice(4)}`), undefined);
});

test('new ids carry the time and the partition, sort by time, never repeat, and draw every random character alike', async (t) => {
  const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';
  const first = newId('order', 3);
  t.is(partitionOf(first), 3);
  t.is(parseId('order', first), first);
  t.true(Number.parseInt(first.slice(4, 13), 36) <= Date.now());
  await new Promise((resolve) => setTimeout(resolve, 5));
  const later = newId('order', 3);
  t.true(later.slice(4, 13) > first.slice(4, 13), 'a later millisecond sorts after');
  const seen = new Set<string>();
  const counts = new Map<string, number>();
  let misplaced = 0;
  for (let i = 0; i < 36_000; i++) {
    const id = newId('item', i % 256);
    if (partitionOf(id) !== i % 256) misplaced++;
    seen.add(id);
    for (const c of id.slice(-11)) counts.set(c, (counts.get(c) ?? 0) + 1);
  }
  t.is(misplaced, 0);
  t.is(seen.size, 36_000);
  // 396,000 characters, 11,000 expected of each (standard deviation about 103): every one within 5% of it.
  t.deepEqual([...counts.keys()].sort().join(''), ALPHABET);
  for (const [c, n] of counts) t.true(Math.abs(n - 11_000) < 550, `${c}: ${n}`);
});
