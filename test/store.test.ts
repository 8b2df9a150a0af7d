// storage/store.ts against real LMDB.

import test from 'ava';
import { Store, type TableSpec } from '../storage/store.js';
import { removeDir, tempDir } from './helpers/edge-kit.js';

interface Doc {
  id: string;
  version: number;
  note: string;
  tags: string[];
}

const DOCS: TableSpec<Doc> = { name: 'docs', indexKeys: () => [] };
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
