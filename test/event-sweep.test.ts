// The event sweep (EVENT_RETENTION_DAYS) under faults: a commit that fails is logged and the next
// sweep carries on, never an unhandled rejection (it runs from a timer, where one would end the
// process); and a host closing while a sweep of several chunks runs stops it and closes cleanly.

import test from 'ava';
import { ActorHost } from '../actors/host.js';
import { newId } from '../common/ids.js';
import { allPartitions } from '../common/partitions.js';
import type { BatchOp } from '../proto/messages.js';
import { capturingLog, failCommits, removeDir, tempDir } from './helpers/edge-kit.js';

const PARTITION = 11;
const input = { currency: 'EUR', customerId: null, note: null, metadata: {} };
const RETENTION_MS = 1000;

/** A host on `dir` whose clock the test moves, and the lines it logs. */
function hostOn(dir: string, clock: { now: number }, lines: string[]): ActorHost {
  return new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: capturingLog(lines), now: () => clock.now, eventRetentionMs: RETENTION_MS });
}

/** Creates `n` orders (one event each), a batch of at most 1,000 at a time. */
async function createOrders(host: ActorHost, n: number): Promise<void> {
  for (let done = 0; done < n; done += 1000) {
    const ops: BatchOp[] = Array.from({ length: Math.min(1000, n - done) }, (_, i) => ({ index: i, op: 'create', id: newId('order', PARTITION), input, items: [] }));
    const r = await host.handle({ kind: 'order.batch', tenant: 't1', partition: PARTITION, atomic: false, ops });
    if (!r.ok) throw new Error(`batch failed: ${r.error.code}`);
  }
}

test('a commit the event sweep cannot make is logged, and the next sweep removes what is due', async (t) => {
  const dir = await tempDir('event-sweep-fail');
  const clock = { now: 1_000_000_000 };
  const lines: string[] = [];
  const host = hostOn(dir, clock, lines);
  try {
    await createOrders(host, 3);
    clock.now += 5 * RETENTION_MS;
    failCommits(host, 1);
    t.is(await host.sweepEvents(), 0, 'resolved, not rejected');
    t.true(lines.some((l) => l.includes('the event sweep could not remove expired events')), lines.join('\n'));
    t.is(await host.sweepEvents(), 3);
    t.is(await host.sweepEvents(), 0);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});

test('a host closing while an event sweep of several chunks runs stops it, waits for it and closes cleanly', async (t) => {
  const dir = await tempDir('event-sweep-close');
  const clock = { now: 1_000_000_000 };
  const lines: string[] = [];
  const N = 2500;
  try {
    const host = hostOn(dir, clock, lines);
    await createOrders(host, N);
    clock.now += 5 * RETENTION_MS;
    const sweep = host.sweepEvents();
    t.is(host.sweepEvents(), sweep, 'one sweep at a time');
    await host.close();
    const first = await sweep;
    t.true(first < N, `stopped before the end: ${first} of ${N}`);
    // Opened again on the same data, the next sweep removes the rest, each event once.
    const again = hostOn(dir, clock, lines);
    try {
      t.is(first + (await again.sweepEvents()), N);
      t.is(await again.sweepEvents(), 0);
    } finally {
      await again.close();
    }
  } finally {
    await removeDir(dir);
  }
});

test('short of room, the event sweep halves its chunk until a chunk fits in the reserve, and stops quietly when none does', async (t) => {
  const dir = await tempDir('event-sweep-room');
  const clock = { now: 1_000_000_000 };
  const lines: string[] = [];
  const MB = 1024 * 1024;
  const free = { bytes: 1024 * MB };
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: capturingLog(lines), now: () => clock.now, eventRetentionMs: RETENTION_MS, storageReserveBytes: 64 * MB, measureStorageRoom: () => free.bytes });
  try {
    await createOrders(host, 1500);
    clock.now += 5 * RETENTION_MS;
    // 24 MB over the service's floor of 16: a chunk of 1000 events (about 32 MB by its estimate) does not fit, one of 250 does.
    free.bytes = 40 * MB;
    await new Promise((resolve) => setTimeout(resolve, 1100));
    t.is(await host.sweepEvents(), 1500);
    // A quarter of a MB over the floor: not even 16 events fit; the sweep ends without an error.
    free.bytes = 1024 * MB;
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await createOrders(host, 100);
    clock.now += 5 * RETENTION_MS;
    free.bytes = 16 * MB + MB / 4;
    await new Promise((resolve) => setTimeout(resolve, 1100));
    t.is(await host.sweepEvents(), 0);
    t.false(lines.some((l) => l.includes('could not remove')), lines.join('\n'));
    free.bytes = 1024 * MB;
    await new Promise((resolve) => setTimeout(resolve, 1100));
    t.is(await host.sweepEvents(), 100);
  } finally {
    await host.close();
    await removeDir(dir);
  }
});
