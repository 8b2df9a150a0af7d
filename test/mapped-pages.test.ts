// storage/mapped-pages.ts against real LMDB: reads leave the data file's pages mapped (RSS), a
// budget takes them out again, and every record reads back the same afterwards. Serial: the
// budget is kept on the process's resident file pages, which every store in it adds to.

import { randomBytes } from 'node:crypto';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { MappedPages, mappedRanges } from '../storage/mapped-pages.js';
import { Store, type TableSpec } from '../storage/store.js';
import { removeDir, tempDir } from './helpers/edge-kit.js';

interface Blob {
  id: string;
  data: string;
}

const BLOBS: TableSpec<Blob> = { name: 'blobs', indexKeys: () => [] };
const COUNT = 3000;
const MB = 1024 * 1024;

/** kB of the data file resident in this process's mapping of it (smaps). */
function mappedKb(file: string): number {
  const path = realpathSync(file);
  let inside = false;
  let kb = 0;
  for (const line of readFileSync('/proc/self/smaps', 'latin1').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inside = line.endsWith(path);
    else if (inside && line.startsWith('Rss:')) kb += Number(/(\d+)/.exec(line)![1]);
  }
  return kb;
}

/** About 30 MB of records that do not compress, written and then all read once. */
async function filled(t: { teardown(fn: () => Promise<void>): void }, mappedBudgetBytes?: number) {
  const dir = await tempDir('mapped');
  const reports: string[] = [];
  const store = Store.open(dir, { mappedBudgetBytes, report: (problem) => reports.push(problem) });
  t.teardown(async () => {
    await store.close();
    await removeDir(dir);
  });
  await store.ready;
  const blobs = store.table(BLOBS);
  const written = new Map<string, string>();
  for (let i = 0; i < COUNT; i += 100) {
    const writes = [];
    for (let j = i; j < i + 100; j++) {
      const blob = { id: `b${j}`, data: randomBytes(7500).toString('base64') };
      written.set(blob.id, blob.data);
      writes.push({ table: blobs, id: blob.id, before: undefined, after: blob });
    }
    await store.commit(writes);
  }
  const readAll = (): number => {
    let same = 0;
    for (const [id, data] of written) if (blobs.get(id)?.data === data) same++;
    return same;
  };
  return { store, file: join(dir, 'state.mdb'), readAll, reports, written };
}

test.serial('without a budget, reads leave the file mapped', async (t) => {
  const { file, readAll } = await filled(t);
  t.is(readAll(), COUNT);
  t.true(mappedKb(file) > 25 * 1024, `${mappedKb(file)} kB mapped`);
});

test.serial('over the budget, a check takes the file out of the mapping, and every record reads back the same', async (t) => {
  const { store, file, readAll, reports } = await filled(t, 8 * MB);
  const mapped = store.mapped!;
  t.truthy(mapped);
  t.is(readAll(), COUNT);
  // Trimmed while reading; a check now trims whatever is left over the budget.
  mapped.check();
  t.true(mappedKb(file) <= 9 * 1024, `${mappedKb(file)} kB mapped`);
  t.true(mapped.trims >= 1);
  t.true(mapped.trimmedKb > 10 * 1024, `${mapped.trimmedKb} kB trimmed`);
  // Read again, through pages mapped anew, then trimmed by hand.
  t.is(readAll(), COUNT);
  t.true(mapped.trim());
  t.true(mappedKb(file) < 1024, `${mappedKb(file)} kB mapped after a trim`);
  t.is(readAll(), COUNT);
  // Under the budget nothing is done.
  mapped.trim();
  const trims = mapped.trims;
  t.false(mapped.check());
  t.is(mapped.trims, trims);
  t.deepEqual(reports, []);
});

test.serial('reads keep the budget as they go', async (t) => {
  const { store, file, readAll } = await filled(t, 4 * MB);
  t.is(readAll(), COUNT);
  // Looked at every few reads: at most a few reads' pages over.
  t.true(mappedKb(file) <= 5 * 1024, `${mappedKb(file)} kB mapped`);
  t.true(store.mapped!.trims >= 3);
});

test.serial('pages mapped by reads it is not told of are trimmed by the timer', async (t) => {
  const { store, file, written } = await filled(t, 4 * MB);
  const blobs = store.table(BLOBS);
  // Straight from lmdb-js, past the table: as the write thread reads the pages it changes.
  for (const id of written.keys()) blobs.db.get(id);
  t.true(mappedKb(file) > 20 * 1024, `${mappedKb(file)} kB mapped`);
  const deadline = Date.now() + 5000;
  while (mappedKb(file) > 5 * 1024 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  t.true(mappedKb(file) <= 5 * 1024, `${mappedKb(file)} kB mapped`);
});

test.serial('a file that is not mapped turns the budget off, said once', (t) => {
  const reports: string[] = [];
  const mapped = new MappedPages({ file: join(import.meta.dirname, 'no-such.mdb'), budgetBytes: MB, report: (p) => reports.push(p) });
  t.deepEqual(mappedRanges(join(import.meta.dirname, 'no-such.mdb')), []);
  t.false(mapped.trim());
  t.false(mapped.trim());
  t.false(mapped.check());
  t.is(reports.length, 1);
  t.regex(reports[0]!, /not mapped/);
  mapped.stop();
});
