// storage/room.ts: clients' commits are refused while the data file's room would fall under
// STORAGE_RESERVE_MB, the service's own commits go on into the reserve, and the room is measured
// again rather than trusted past a shortfall. The store's refusal is checked against real LMDB;
// the file system's room is injected (a real full disk is in test/disk-full.test.ts).

import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { ApiError } from '../common/errors.js';
import { fileSizeLimit, measureRoom, Room } from '../storage/room.js';
import { commitCost, Store, type TableSpec } from '../storage/store.js';
import { removeDir, ROOT, tempDir } from './helpers/edge-kit.js';

const MB = 1024 * 1024;

function room(reserveBytes: number, free: { bytes: number; measures: number }): { room: Room; reports: string[] } {
  const reports: string[] = [];
  const r = new Room({
    file: '/nonexistent',
    reserveBytes,
    measure: () => {
      free.measures++;
      return free.bytes;
    },
    report: (problem) => reports.push(problem),
  });
  return { room: r, reports };
}

test("a client's commit goes ahead while the reserve stays whole, webhook deliveries while half is left, the service's own work while a quarter is", (t) => {
  const free = { bytes: 10 * MB, measures: 0 };
  const { room: r, reports } = room(4 * MB, free);
  t.true(r.admit(5 * MB, 'client'), '10 MB free, 5 MB taken: 5 MB left, over the 4 MB reserve');
  t.false(r.admit(2 * MB, 'client'), 'this one would leave 3 MB');
  t.true(r.admit(2 * MB, 'webhooks'), 'deliveries may take the reserve down to 2 MB');
  t.false(r.admit(1.5 * MB, 'webhooks'));
  t.true(r.admit(1.5 * MB, 'service'), "the service's own work down to 1 MB");
  t.false(r.admit(1 * MB, 'service'), 'the last quarter is kept for what estimates miss');
  t.true(r.admit(0.5 * MB, 'store'), "the store's opening commit may take it");
  // Asking counts nothing.
  t.true(r.has(0.5 * MB, 'store'));
  t.true(r.has(0.5 * MB, 'store'));
  t.false(r.has(0.5 * MB, 'service'));
  t.is(reports.length, 1);
  t.regex(reports[0]!, /short of room.*STORAGE_RESERVE_MB.*\(1 refused\)/);
});

test('a shortfall is measured again before a write is refused, once a commit has settled since or at most every 100 ms; admitted commits count until the measure after they settle; the shortage is told once, and its end past a quarter more than the reserve', async (t) => {
  const free = { bytes: 10 * MB, measures: 0 };
  const { room: r, reports } = room(4 * MB, free);
  const told = (): string[] => reports.map((p) => p.split(':')[0]!);
  t.true(r.admit(5 * MB, 'client'));
  t.is(free.measures, 1);
  // The disk has room again (a file deleted elsewhere), but not yet measured: still the old figure.
  free.bytes = 100 * MB;
  t.false(r.admit(2 * MB, 'client'), 'measured under 100 ms ago');
  t.is(free.measures, 1);
  t.deepEqual(told(), ['storage is short of room']);
  await new Promise((resolve) => setTimeout(resolve, 120));
  // Measured again: 100 MB, less the 5 MB admitted and not settled (not in the file's size yet).
  // 4.5 MB are left: admitted, but not yet told as room again.
  t.true(r.admit(90.5 * MB, 'client'));
  t.is(free.measures, 2);
  t.deepEqual(told(), ['storage is short of room']);
  r.settled(5 * MB);
  r.settled(90.5 * MB);
  await new Promise((resolve) => setTimeout(resolve, 120));
  // The file now holds what was admitted, and the disk has 10 MB: the measure tells.
  free.bytes = 10 * MB;
  t.true(r.admit(1 * MB, 'client'));
  t.is(free.measures, 3);
  t.deepEqual(told(), ['storage is short of room', 'storage has room again']);
  t.false(r.admit(6 * MB, 'client'));
  t.false(r.admit(6 * MB, 'client'));
  t.false(r.admit(6 * MB, 'client'));
  t.deepEqual(told(), ['storage is short of room', 'storage has room again', 'storage is short of room'], 'told once while it lasts');
});

test('a room that cannot be measured holds nothing back, and says so', (t) => {
  const reports: string[] = [];
  const r = new Room({
    file: '/nonexistent',
    reserveBytes: MB,
    measure: () => {
      throw new Error('statfs failed');
    },
    report: (p) => reports.push(p),
  });
  t.true(r.admit(10 * MB, 'client'));
  t.regex(reports[0]!, /could not be measured/);
});

test("the file-size limit is read from /proc's format; unlimited or unreadable is no limit", (t) => {
  const limits = (v: string): string => `Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax file size             ${v}              unlimited            bytes     \n`;
  t.is(fileSizeLimit(limits('3145728')), 3145728);
  t.is(fileSizeLimit(limits('unlimited')), Infinity);
  t.is(fileSizeLimit(''), Infinity);
  t.is(fileSizeLimit(limits('x')), Infinity);
});

test('the room of a real file: its file system\'s free bytes, or the size limit less the file', async (t) => {
  const dir = await tempDir('room');
  t.teardown(() => removeDir(dir));
  const store = Store.open(dir);
  await store.ready;
  await store.close();
  const file = `${dir}/state.mdb`;
  const free = measureRoom(file, Infinity);
  t.true(free > 0);
  t.true(measureRoom(file, 64 * MB) < 64 * MB);
  t.true(measureRoom(file, 64 * MB) <= free);
});

interface Doc {
  id: string;
  note: string;
}
const DOCS: TableSpec<Doc> = { name: 'docs', indexKeys: (d) => [[d.note]] };

test("a store short of room refuses a client's commit with a 503 and Retry-After and writes nothing; the service's own commits and reads go on", async (t) => {
  const dir = await tempDir('room-store');
  const free = { bytes: 100 * MB };
  const reports: string[] = [];
  const store = Store.open(dir, { reserveBytes: 10 * MB, measureRoom: () => free.bytes, report: (p) => reports.push(p) });
  t.teardown(async () => {
    await store.close();
    await removeDir(dir);
  });
  await store.ready;
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', note: 'kept' } }]);
  // Another process fills the disk: seen at the next measure, within a second.
  free.bytes = 10 * MB;
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const err = await t.throwsAsync(store.commit([{ table: docs, id: 'd2', before: undefined, after: { id: 'd2', note: 'refused' } }]));
  t.true(err instanceof ApiError);
  t.is((err as ApiError).slug, 'unavailable');
  t.is((err as ApiError).extra.headers?.['retry-after'], '30');
  t.is(docs.get('d2'), undefined);
  t.deepEqual(store.scan(docs, { prefix: ['refused'], after: undefined, reverse: false, limit: 10 }), []);
  await store.commit([{ table: docs, id: 'd3', before: undefined, after: { id: 'd3', note: 'own' } }], { tier: 'service' });
  t.is(docs.get('d3')?.note, 'own');
  t.is(docs.get('d1')?.note, 'kept');
  t.is(reports.length, 1);
  t.regex(reports[0]!, /short of room/);
});

test("under a real file-size limit, LMDB never meets it: clients' commits are refused first, and the service's own large commits (a thousand scattered updates, then deletes) fit in the reserve", async (t) => {
  const dir = await tempDir('room-limit');
  t.teardown(() => removeDir(dir));
  const store = JSON.stringify(join(ROOT, 'dist', 'storage', 'store.js'));
  // Records of about 150 bytes with an index entry each, 50 to a commit, until clients are
  // refused 12 MB short of the limit; then 1000 scattered updates and 400 deletes (each with its
  // index entry) of the service's own, which may go 9 MB into the reserve.
  const script = `
    process.on('SIGXFSZ', () => {});
    const { statSync } = await import('node:fs');
    const { Store } = await import(${store});
    const s = Store.open(${JSON.stringify(dir)}, { reserveBytes: 12 * 1024 * 1024, report: () => {} });
    await s.ready;
    const docs = s.table({ name: 'docs', indexKeys: (d) => [[d.n]] });
    const size = () => statSync(${JSON.stringify(join(dir, 'state.mdb'))}).size;
    const outcome = async (writes, tier) => {
      try { await s.commit(writes, { tier }); return 'ok'; }
      catch (err) { return err.slug === 'unavailable' ? 'refused' : 'failed: ' + err.message; }
    };
    let n = 0;
    let last = 'ok';
    while (last === 'ok' && n < 500000) {
      const w = [];
      for (let j = 0; j < 50; j++, n++) w.push({ table: docs, id: 'd' + n, before: undefined, after: { id: 'd' + n, n, note: 'x'.repeat(100) } });
      last = await outcome(w, 'client');
    }
    const created = n - 50;
    const pick = (k) => { const out = new Set(); while (out.size < k) out.add('d' + Math.floor(Math.random() * created)); return [...out]; };
    const sizes = [size()];
    const updates = await outcome(pick(1000).map((id) => ({ table: docs, id, before: docs.get(id), after: { ...docs.get(id), note: 'y'.repeat(100) } })), 'service');
    sizes.push(size());
    const deletes = await outcome(pick(400).map((id) => ({ table: docs, id, before: docs.get(id), after: undefined })), 'service');
    sizes.push(size());
    console.log(JSON.stringify({ created, last, updates, deletes, sizes }));
    await s.close();
    process.exit(0);
  `;
  const limit = 24_000_000;
  const run = spawnSync('prlimit', [`--fsize=${limit}`, '--', process.execPath, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 100_000 });
  t.is(run.status, 0, run.stderr);
  const out = JSON.parse(run.stdout) as { created: number; last: string; updates: string; deletes: string; sizes: number[] };
  t.is(out.last, 'refused', 'clients are refused before the limit');
  t.true(out.created > 20_000, String(out.created));
  t.is(out.updates, 'ok');
  t.is(out.deletes, 'ok');
  t.true(out.sizes.every((size) => size < limit - 1024 * 1024), String(out.sizes));
  t.notRegex(run.stderr, /Write error|Input\/output error|File too large/);
  t.log(`file ${out.sizes.join(' → ')} bytes; ${out.created} records`);
});

test('a commit is costed high: a page for each record it puts or removes, whole pages for a large record, a path of pages per table it touches', (t) => {
  const a = {};
  const b = {};
  const small = commitCost([{ db: a, key: 'k1', bytes: new Uint8Array(100) }]);
  t.true(small >= 100 + 4096 + 4 * 4096, String(small));
  const large = commitCost([{ db: a, key: 'k1', bytes: new Uint8Array(10_000) }]);
  t.true(large >= 3 * 4096 + 4096 + 4 * 4096, String(large));
  t.true(commitCost([{ db: a, key: 'k1', bytes: new Uint8Array(100) }, { db: b, key: ['t', 1], bytes: undefined }]) >= small + 4096 + 4 * 4096);
  // A delete costs a page too: the leaf it changes is copied.
  const deletes = commitCost(Array.from({ length: 1000 }, (_, i) => ({ db: a, key: `k${i}` })));
  t.true(deletes >= 1000 * 4096, String(deletes));
});

test('room held for commits to come is left free by other holds and other tiers, used by the webhook commits it is held for, and given back once', (t) => {
  const free = { bytes: 10 * MB, measures: 0 };
  const { room: r } = room(4 * MB, free);
  // Webhooks may go down to 2 MB: 8 MB above it.
  const release = r.hold(6 * MB, 'webhooks');
  t.truthy(release);
  t.is(r.hold(3 * MB, 'webhooks'), undefined, 'another hold sees what is held');
  t.false(r.has(3 * MB, 'webhooks'));
  t.false(r.admit(3.5 * MB, 'service'), "the service's own work leaves it free too: 10 - 6 - 3.5 is under its 1 MB floor");
  t.true(r.admit(5 * MB, 'webhooks'), 'the commits it is held for may use it');
  release!();
  release!();
  t.true(r.admit(1 * MB, 'service'), 'given back once: 10 - 5 - 1 leaves 4, over the 1 MB floor');
  t.false(r.admit(3.5 * MB, 'service'));
});
