// storage/store.ts against real LMDB: transactions are all or nothing, and the record cache
// answers from memory, but never a record older than what LMDB holds, nor more than its budget.

import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { RECORD_CACHE_BYTES, Store, type Table, type TableSpec } from '../storage/store.js';
import { removeDir, ROOT, tempDir } from './helpers/edge-kit.js';

interface Doc {
  id: string;
  version: number;
  note: string;
  tags: string[];
}

const DOCS: TableSpec<Doc> = { name: 'docs', cached: true, indexKeys: () => [] };
const PLAIN: TableSpec<Doc> = { name: 'plain', indexKeys: () => [] };
const doc = (id: string, version: number, note = 'n'): Doc => ({ id, version, note, tags: ['a'] });

async function withStore(t: { teardown(fn: () => Promise<void>): void }): Promise<Store> {
  const dir = await tempDir('store');
  const store = Store.open(dir);
  t.teardown(async () => {
    await store.close();
    await removeDir(dir);
  });
  return store;
}

test('a commit that fails halfway writes nothing', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 1) }]);
  // A key LMDB refuses (over its 1978-byte limit) aborts the whole transaction, d1's update too.
  const long = 'k'.repeat(4000);
  await t.throwsAsync(
    store.commit([
      { table: docs, id: 'd1', before: docs.get('d1'), after: doc('d1', 2) },
      { table: docs, id: long, before: undefined, after: doc(long, 1) },
    ]),
  );
  t.is(docs.get('d1')!.version, 1);
});

test('a key that may be over the limit takes the rolled-back path and still commits when it fits', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  // 1,000 ASCII characters: over the sure bound (3 bytes a character), 1,001 bytes in fact.
  const long = 'k'.repeat(1000);
  await store.commit([
    { table: docs, id: 'd1', before: undefined, after: doc('d1', 1) },
    { table: docs, id: long, before: undefined, after: doc(long, 1) },
  ]);
  t.is(docs.get(long)!.version, 1);
  t.is(docs.get('d1')!.version, 1);
});

test('two commits made in one turn land in that order, whichever way each reaches LMDB', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  const long = 'k'.repeat(1000);
  for (let round = 0; round < 3; round++) {
    // The first takes the child-transaction path (a key that may be over the limit), the second
    // is queued as a block behind it; both write d1.
    const first = store.commit([
      { table: docs, id: 'd1', before: undefined, after: doc('d1', 2 * round + 1) },
      { table: docs, id: long, before: undefined, after: doc(long, round) },
    ]);
    const second = store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 2 * round + 2) }]);
    await Promise.all([first, second]);
    t.is(docs.get('d1')!.version, 2 * round + 2);
  }
});

test('-0 in an index key is stored as 0: listed in numeric order, read back as 0, and replaced on update', async (t) => {
  const store = await withStore(t);
  const PRICED: TableSpec<Doc> = { name: 'priced', indexKeys: (d) => [['price', d.version, d.id]] };
  const docs = store.table(PRICED);
  // JSON.parse('-0') is -0, and -0 passes `minimum: 0`.
  const negativeZero = JSON.parse('-0') as number;
  await store.commit([
    { table: docs, id: 'a', before: undefined, after: doc('a', 2) },
    { table: docs, id: 'b', before: undefined, after: doc('b', negativeZero) },
    { table: docs, id: 'c', before: undefined, after: doc('c', 1) },
  ]);
  const listed = () => store.scan(docs as Table<unknown>, { prefix: ['price'], after: undefined, reverse: false, limit: 10 });
  t.deepEqual(listed(), [
    { v: 0, id: 'b' },
    { v: 1, id: 'c' },
    { v: 2, id: 'a' },
  ]);
  await store.commit([{ table: docs, id: 'b', before: docs.get('b'), after: doc('b', 3) }]);
  t.deepEqual(listed().map((r) => r.id), ['c', 'a', 'b']);
});

test('many commits queued in one turn, each with record shapes never seen before, are all stored whole', async (t) => {
  const dir = await tempDir('store-turn');
  t.teardown(() => removeDir(dir));
  let store = Store.open(dir);
  let docs = store.table(PLAIN);
  // Over a thousand puts of a known shape first: lmdb-js starts its write thread before the turn
  // ends, while the later commits, each with new shapes for msgpackr to store, are being queued.
  const shaped = (i: number, j: number) => (i < 260 ? doc(`s${i}-${j}`, i) : ({ ...doc(`s${i}-${j}`, i), [`m${i}_${j}`]: j } as Doc));
  const commits = [];
  for (let i = 0; i < 300; i++) {
    commits.push(store.commit([0, 1, 2, 3].map((j) => ({ table: docs, id: `s${i}-${j}`, before: undefined, after: shaped(i, j) }))));
  }
  await Promise.all(commits);
  await store.close();
  store = Store.open(dir);
  docs = store.table(PLAIN);
  try {
    for (let i = 0; i < 300; i++) for (let j = 0; j < 4; j++) t.deepEqual(docs.get(`s${i}-${j}`), shaped(i, j));
  } finally {
    await store.close();
  }
});

test('a table that keeps misses answers a missing id from memory until a write to it begins', async (t) => {
  const store = await withStore(t);
  const KEYS: TableSpec<Doc> = { name: 'keys', missesKept: true, indexKeys: () => [] };
  const keys = store.table(KEYS);
  t.is(keys.get('k1'), undefined);
  // Written behind the table's back, the miss is still what it answers: it answers from memory.
  const raw = keys.db as unknown as { put(id: string, value: Doc): Promise<boolean> };
  await raw.put('k1', doc('k1', 1));
  t.is(keys.get('k1'), undefined, 'the miss is kept');
  // A write through the store forgets it at once, and a read during the write keeps nothing.
  const writing = store.commit([{ table: keys, id: 'k1', before: undefined, after: doc('k1', 2) }]);
  t.is(keys.get('k1')!.version, 1, 'read from LMDB while the write is under way');
  await writing;
  t.is(keys.get('k1')!.version, 2);
  t.is(keys.get('k2'), undefined);
  const writingK2 = store.commit([{ table: keys, id: 'k2', before: undefined, after: doc('k2', 1) }]);
  t.is(keys.get('k2'), undefined, 'not there yet');
  await writingK2;
  t.is(keys.get('k2')!.version, 1, 'a miss read while its write was under way was not kept');
});

test('a cached record is frozen to its members, so a reader cannot change what others read', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 1) }]);
  const read = docs.get('d1')!;
  t.is(docs.get('d1'), read, 'the second read is the same object, from memory');
  t.throws(() => {
    (read as { note: string }).note = 'changed';
  });
  t.throws(() => {
    read.tags.push('b');
  });
  t.deepEqual(docs.get('d1'), doc('d1', 1));
});

test('every write replaces what the cache holds: updates and deletes are read at once', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 1) }]);
  const v1 = docs.get('d1')!;
  await store.commit([{ table: docs, id: 'd1', before: v1, after: doc('d1', 2, 'second') }]);
  t.is(docs.get('d1')?.note, 'second');
  await store.commit([{ table: docs, id: 'd1', before: docs.get('d1'), after: undefined }]);
  t.is(docs.get('d1'), undefined);
});

test('a read while a write commits sees the old record, and the new one once the write is done', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 1) }]);
  const v1 = docs.get('d1')!;
  for (let i = 2; i < 12; i++) {
    let done = false;
    const writing = store.commit([{ table: docs, id: 'd1', before: v1, after: doc('d1', i) }]).then(() => (done = true));
    // Reads all through the commit (before it is applied, between apply and commit, after) cache
    // whatever LMDB answers then; the commit must not leave an old one behind.
    while (!done) {
      const during = docs.get('d1')!.version;
      t.true(during === i - 1 || during === i, `read ${during} while writing ${i}`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await writing;
    t.is(docs.get('d1')!.version, i);
  }
});

test('a record is not kept while a commit of it is under way, so the cache never lags the index', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 1) }]);
  const v1 = docs.get('d1')!;
  t.true(docs.cacheBytes > 0);
  const writing = store.commit([{ table: docs, id: 'd1', before: v1, after: doc('d1', 2) }]);
  // Until the commit's promise settles, a read goes to LMDB and keeps nothing: were the old
  // version kept now, it could outlive the moment LMDB shows the new one to index scans.
  t.is(docs.get('d1')!.version, 1);
  t.is(docs.cacheBytes, 0);
  t.true(Object.isFrozen(docs.get('d1')));
  await writing;
  t.is(docs.get('d1')!.version, 2);
  t.true(docs.cacheBytes > 0, 'kept again once the commit is visible');
  // A commit that fails settles too: the record is kept again afterwards.
  await t.throwsAsync(store.commit([{ table: docs, id: 'd1', before: docs.get('d1'), after: doc('d1', 3) }, { table: docs, id: 'k'.repeat(4000), before: undefined, after: doc('x', 1) }]));
  t.is(docs.get('d1')!.version, 2);
  t.true(docs.cacheBytes > 0);
});

test('the cache keeps at most its byte budget, oldest out first; an uncached table returns fresh objects', async (t) => {
  const store = await withStore(t);
  const docs = store.table(DOCS);
  const plain = store.table(PLAIN);
  const big = 'x'.repeat(2000);
  const count = Math.ceil((3 * RECORD_CACHE_BYTES) / 2000);
  for (let i = 0; i < count; i += 500) {
    const writes = [];
    for (let j = i; j < Math.min(count, i + 500); j++) writes.push({ table: docs, id: `d${j}`, before: undefined, after: doc(`d${j}`, 1, big) });
    await store.commit(writes);
  }
  for (let i = 0; i < count; i++) t.is(docs.get(`d${i}`)!.id, `d${i}`);
  t.true(docs.cacheBytes > RECORD_CACHE_BYTES / 2, `${docs.cacheBytes} bytes kept`);
  t.true(docs.cacheBytes <= RECORD_CACHE_BYTES, `${docs.cacheBytes} bytes kept`);
  const last = docs.get(`d${count - 1}`);
  t.is(docs.get(`d${count - 1}`), last, 'the newest read is still kept');
  t.is(docs.get('d0')?.id, 'd0', 'an evicted record is read again from LMDB');

  await store.commit([{ table: plain, id: 'p1', before: undefined, after: doc('p1', 1) }]);
  const a = plain.get('p1')!;
  t.not(plain.get('p1'), a);
  t.false(Object.isFrozen(a));
  t.is(plain.cacheBytes, 0);
});

test('a record shape first seen in a failed commit is stored with the next record of that shape', async (t) => {
  const dir = await tempDir('store-shapes');
  t.teardown(() => removeDir(dir));
  let store = Store.open(dir);
  let docs = store.table(PLAIN);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: doc('d1', 1) }]);
  // A new shape (member names msgpackr stores once, as a shared structure) in a commit that fails.
  const shaped = (id: string): Doc => ({ ...doc(id, 1), colour: 'red', size: 3 }) as Doc;
  await t.throwsAsync(
    store.commit([
      { table: docs, id: 'd2', before: undefined, after: shaped('d2') },
      { table: docs, id: 'k'.repeat(4000), before: undefined, after: doc('k', 1) },
    ]),
  );
  await store.commit([{ table: docs, id: 'd3', before: undefined, after: shaped('d3') }]);
  await store.close();
  // Read back by a fresh process's view of the file: the shape must have been stored durably.
  store = Store.open(dir);
  docs = store.table(PLAIN);
  try {
    t.deepEqual(docs.get('d3'), shaped('d3'));
    t.is(docs.get('d2'), undefined);
    t.deepEqual(docs.get('d1'), doc('d1', 1));
  } finally {
    await store.close();
  }
});

test('with a store open, an unhandled rejection still ends the process, one that only looks like a failed commit too', async (t) => {
  const dir = await tempDir('store-unhandled');
  try {
    const store = join(ROOT, 'dist', 'storage', 'store.js');
    const run = (reason: string) =>
      spawnSync(process.execPath, ['--input-type=module', '-e', `const { Store } = await import(${JSON.stringify(store)}); Store.open(${JSON.stringify(dir)}); Promise.reject(${reason});`], { encoding: 'utf8', timeout: 20_000 });
    const plain = run("new Error('a bug of ours')");
    t.is(plain.status, 1);
    t.regex(plain.stderr, /a bug of ours/);
    // lmdb-js's message and a commitError, but no failure Store.commit saw: not let go.
    const lookalike = run("Object.assign(new Error('Commit failed (see commitError for details)'), { commitError: Promise.resolve() })");
    t.is(lookalike.status, 1);
    t.regex(lookalike.stderr, /Commit failed/);
    const notAnError = run("'just a string'");
    t.is(notAnError.status, 1);
    t.regex(notAnError.stderr, /just a string/);
  } finally {
    await removeDir(dir);
  }
});
