// storage/mapped-pages.ts against real LMDB: reads leave the data file's pages mapped (RSS), a
// budget takes them out again, and every record reads back the same afterwards. Serial: the
// budget is kept on the process's resident file pages, which every store in it adds to.

import { Buffer } from 'node:buffer';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { MappedPages, mappedRanges } from '../storage/mapped-pages.js';
import { Store, type TableSpec } from '../storage/store.js';
import { removeDir, ROOT, tempDir } from './helpers/edge-kit.js';

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
  const readAll = (each?: (i: number) => void): number => {
    let same = 0;
    let i = 0;
    for (const [id, data] of written) {
      if (blobs.get(id)?.data === data) same++;
      each?.(i++);
    }
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
  // Looked at every few reads: never more than a few reads' pages over, all the way through.
  let most = 0;
  t.is(
    readAll((i) => {
      if (i % 50 === 0) most = Math.max(most, mappedKb(file));
    }),
    COUNT,
  );
  t.true(most <= 6 * 1024, `${most} kB mapped at most`);
  t.true(mappedKb(file) <= 6 * 1024, `${mappedKb(file)} kB mapped`);
  t.true(store.mapped!.trims >= 3);
});

test.serial('anonymous memory that grows sets off no trim', async (t) => {
  const { store } = await filled(t, 4 * MB);
  const mapped = store.mapped!;
  mapped.trim();
  const trims = mapped.trims;
  // 64 MB written to, so resident: anonymous, not file-backed.
  const held = Array.from({ length: 64 }, () => Buffer.alloc(MB, 1));
  t.false(mapped.check());
  t.is(mapped.trims, trims);
  t.is(held.length, 64);
});

test.serial('once stopped, reads go on and are not looked at', async (t) => {
  const { store, file, readAll, reports } = await filled(t, 4 * MB);
  store.mapped!.stop();
  const trims = store.mapped!.trims;
  t.is(readAll(), COUNT);
  t.is(store.mapped!.trims, trims);
  t.false(store.mapped!.check());
  t.true(mappedKb(file) > 20 * 1024);
  t.deepEqual(reports, []);
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

test.serial('with no descriptor left, reads are answered and the look is skipped; the budget holds again once there are', async (t) => {
  const dir = await tempDir('mapped-fds');
  t.teardown(() => removeDir(dir));
  const store = JSON.stringify(join(ROOT, 'dist', 'storage', 'store.js'));
  // Writes 20 MB, fills every descriptor, reads it all back past the budget, frees some, reads again.
  const script = `
    const { Store } = await import(${store});
    const { openSync, closeSync } = await import('node:fs');
    const reports = [];
    const s = Store.open(${JSON.stringify(dir)}, { mappedBudgetBytes: 2 * 1024 * 1024, report: (p) => reports.push(p) });
    await s.ready;
    const blobs = s.table({ name: 'blobs', indexKeys: () => [] });
    const data = 'x'.repeat(10000);
    for (let i = 0; i < 2000; i += 100) {
      const w = [];
      for (let j = i; j < i + 100; j++) w.push({ table: blobs, id: 'b' + j, before: undefined, after: { id: 'b' + j, data: data + j } });
      await s.commit(w);
    }
    s.mapped.trim();
    const fds = [];
    try { for (;;) fds.push(openSync('/dev/null', 'r')); } catch (err) { if (err.code !== 'EMFILE') throw err; }
    let same = 0;
    for (let j = 0; j < 2000; j++) if (blobs.get('b' + j)?.data === data + j) same++;
    const starved = { same, trims: s.mapped.trims, skipped: s.mapped.skipped };
    for (const fd of fds.splice(0, 16)) closeSync(fd);
    same = 0;
    for (let j = 0; j < 2000; j++) if (blobs.get('b' + j)?.data === data + j) same++;
    console.log(JSON.stringify({ starved, same, trims: s.mapped.trims, reports }));
    process.exit(0);
  `;
  const run = spawnSync('bash', ['-c', `ulimit -n 128 && exec "${process.execPath}" --input-type=module -e "$0"`, script], { encoding: 'utf8', timeout: 60_000 });
  t.is(run.status, 0, run.stderr);
  const out = JSON.parse(run.stdout) as { starved: { same: number; trims: number; skipped: number }; same: number; trims: number; reports: string[] };
  t.is(out.starved.same, 2000, 'every read answered while no descriptor was left');
  t.true(out.starved.skipped > 0);
  t.is(out.same, 2000);
  t.true(out.trims > out.starved.trims, 'trimmed again once descriptors were free');
  t.is(out.reports.length, 1);
  t.regex(out.reports[0]!, /not looked at/);
});
