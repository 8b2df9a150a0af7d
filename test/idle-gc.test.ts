// The idle collector: one collection once the loop has been idle for a whole interval after being
// busy, none while it stays idle, none below the heap floor, and nothing at all without a `gc`.

import test from 'ava';
import { collectWhenIdle } from '../common/idle-gc.js';

const INTERVAL = 200;
// Well above what an idle test worker does (its own reporting), well below a spin.
const IDLE = 0.1;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Keeps the loop busy (a synchronous spin) for most of an interval, a turn at a time. */
async function busyFor(ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const turn = Date.now() + 20;
    while (Date.now() < turn) {
      // spin
    }
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test.serial('after a busy spell, one collection once the loop is idle, and none while it stays idle', async (t) => {
  let calls = 0;
  let trims = 0;
  const collector = collectWhenIdle({ intervalMs: INTERVAL, idleUtilization: IDLE, gc: () => calls++, trim: () => trims++, heapBytes: () => 1e9, minHeapBytes: 1 });
  try {
    // Whatever the test process did before (loading modules) may count as one busy spell.
    await sleep(INTERVAL * 4);
    const before = calls;
    t.true(before <= 1);
    await sleep(INTERVAL * 3);
    t.is(calls, before, 'idle throughout: nothing');
    await busyFor(INTERVAL * 3);
    await sleep(INTERVAL * 4);
    t.is(calls, before + 1);
    await sleep(INTERVAL * 3);
    t.is(calls, before + 1, 'idle since: no second collection');
    await busyFor(INTERVAL * 3);
    await sleep(INTERVAL * 4);
    t.is(calls, before + 2, 'busy again, then idle: collected again');
    t.is(collector.collections, before + 2);
    t.is(trims, calls, 'the allocator is trimmed after each collection');
  } finally {
    collector.stop();
  }
});

test.serial('a collection that takes longer than the idle share of an interval does not set off another', async (t) => {
  let calls = 0;
  // Each collection spins for half an interval: five times the idle share.
  const slowGc = (): void => {
    calls++;
    const until = Date.now() + INTERVAL / 2;
    while (Date.now() < until) {
      // spin
    }
  };
  const collector = collectWhenIdle({ intervalMs: INTERVAL, idleUtilization: IDLE, gc: slowGc, heapBytes: () => 1e9, minHeapBytes: 1 });
  try {
    await busyFor(INTERVAL * 3);
    await sleep(INTERVAL * 4);
    const after = calls;
    t.true(after >= 1);
    await sleep(INTERVAL * 6);
    t.is(calls, after, 'idle since its collection: no other');
  } finally {
    collector.stop();
  }
});

test.serial('no collection while the heap is under the floor', async (t) => {
  let calls = 0;
  const collector = collectWhenIdle({ intervalMs: INTERVAL, idleUtilization: IDLE, gc: () => calls++, heapBytes: () => 10, minHeapBytes: 1000 });
  try {
    await busyFor(INTERVAL * 3);
    await sleep(INTERVAL * 4);
    t.is(calls, 0);
  } finally {
    collector.stop();
  }
});

test('without a gc function it does nothing', (t) => {
  const saved = (globalThis as { gc?: unknown }).gc;
  delete (globalThis as { gc?: unknown }).gc;
  try {
    const collector = collectWhenIdle({ intervalMs: INTERVAL });
    t.is(collector.collections, 0);
    collector.stop();
  } finally {
    if (saved !== undefined) (globalThis as { gc?: unknown }).gc = saved;
  }
});
