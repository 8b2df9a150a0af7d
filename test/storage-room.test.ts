// storage/room.ts: clients' commits are refused while the data file's room would fall under
// STORAGE_RESERVE_MB, the service's own commits go on into the reserve, and the room is measured
// again rather than trusted past a shortfall. The store's refusal is checked against real LMDB;
// the file system's room is injected (a real full disk is in test/disk-full.test.ts).

import test from 'ava';
import { ApiError } from '../common/errors.js';
import { fileSizeLimit, measureRoom, Room } from '../storage/room.js';
import { commitCost, Store, type TableSpec } from '../storage/store.js';
import { removeDir, tempDir } from './helpers/edge-kit.js';

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

test("a client's commit goes ahead while the reserve stays whole; the service's own down to the last byte", (t) => {
  const free = { bytes: 10 * MB, measures: 0 };
  const { room: r, reports } = room(4 * MB, free);
  t.true(r.admit(5 * MB, false), '10 MB free, 5 MB taken: 5 MB left, over the 4 MB reserve');
  t.false(r.admit(2 * MB, false), 'this one would leave 3 MB');
  t.true(r.admit(2 * MB, true), 'the service may take the reserve');
  t.true(r.admit(3 * MB, true));
  t.false(r.admit(1, true), 'but not more than there is');
  t.is(reports.length, 1);
  t.regex(reports[0]!, /short of room.*STORAGE_RESERVE_MB/);
});

test('a shortfall is measured again before a write is refused, at most every 100 ms; settled commits stop counting at the next measure', async (t) => {
  const free = { bytes: 10 * MB, measures: 0 };
  const { room: r, reports } = room(4 * MB, free);
  t.true(r.admit(5 * MB, false));
  t.is(free.measures, 1);
  // The disk has room again (a file deleted elsewhere), but not yet measured: still the old figure.
  free.bytes = 100 * MB;
  t.false(r.admit(2 * MB, false), 'measured under 100 ms ago');
  t.is(free.measures, 1);
  await new Promise((resolve) => setTimeout(resolve, 120));
  // Measured again: 100 MB, less the 5 MB admitted and not settled (not in the file's size yet).
  t.true(r.admit(90 * MB, false));
  t.is(free.measures, 2);
  t.false(r.admit(2 * MB, false), '100 - 5 - 90 leaves under the reserve');
  r.settled(5 * MB);
  r.settled(90 * MB);
  await new Promise((resolve) => setTimeout(resolve, 120));
  // The file now holds what was admitted: the measure tells.
  free.bytes = 10 * MB;
  t.true(r.admit(5 * MB, false));
  t.deepEqual(
    reports.map((p) => p.split(':')[0]),
    ['storage is short of room', 'storage has room again', 'storage is short of room', 'storage has room again'],
  );
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
  t.true(r.admit(10 * MB, false));
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
  const store = Store.open(dir, { reserveBytes: 10 * MB, measureRoom: () => free.bytes });
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
  await store.commit([{ table: docs, id: 'd3', before: undefined, after: { id: 'd3', note: 'own' } }], { essential: true });
  t.is(docs.get('d3')?.note, 'own');
  t.is(docs.get('d1')?.note, 'kept');
});

test('a commit is costed high: whole pages for a large record, a path of pages per table it touches', (t) => {
  const a = {};
  const b = {};
  const small = commitCost([{ db: a, key: 'k1', bytes: new Uint8Array(100) }]);
  t.true(small >= 100 + 4 * 4096, String(small));
  const large = commitCost([{ db: a, key: 'k1', bytes: new Uint8Array(10_000) }]);
  t.true(large >= 3 * 4096 + 4 * 4096, String(large));
  t.true(commitCost([{ db: a, key: 'k1', bytes: new Uint8Array(100) }, { db: b, key: ['t', 1], bytes: undefined }]) >= small + 4 * 4096);
});
