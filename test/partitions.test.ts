import test from 'ava';
import { PARTITIONS } from '../common/ids.js';
import { allPartitions, parsePartitions, toRanges } from '../common/partitions.js';

test('no spec means every partition', (t) => {
  const all = parsePartitions(undefined);
  t.is(all.length, PARTITIONS);
  t.is(all[0], 0);
  t.is(all[PARTITIONS - 1], PARTITIONS - 1);
});

test('allPartitions: a fresh set of every partition, or of all but those named', (t) => {
  const all = allPartitions();
  t.is(all.size, PARTITIONS);
  all.delete(0);
  t.is(allPartitions().size, PARTITIONS, 'each call makes its own set');
  const some = allPartitions(3, 200);
  t.is(some.size, PARTITIONS - 2);
  t.false(some.has(3));
  t.false(some.has(200));
  t.true(some.has(4));
});

test('ranges and single partitions, in any order, come back ascending', (t) => {
  t.deepEqual(parsePartitions('0-3'), [0, 1, 2, 3]);
  t.deepEqual(parsePartitions(' 200 , 5-6,255'), [5, 6, 200, 255]);
  t.deepEqual(toRanges(parsePartitions('128-191,0-63,64')), [[0, 64], [128, 191]]);
  t.deepEqual(toRanges([9, 3, 4, 5]), [[3, 5], [9, 9]]);
});

test('bad specs stop the process with a message naming the problem', (t) => {
  t.throws(() => parsePartitions(''), { message: /empty/ });
  t.throws(() => parsePartitions('0-256'), { message: /past the last partition, 255/ });
  t.throws(() => parsePartitions('10-2'), { message: /backwards/ });
  t.throws(() => parsePartitions('0-10,5-20'), { message: /partition 5 is named twice/ });
  t.throws(() => parsePartitions('a-b'), { message: /'a-b' is not a partition/ });
  t.throws(() => parsePartitions('1,,2'), { message: /'' is not a partition/ });
  t.throws(() => parsePartitions('-1'), { message: /not a partition/ });
});
