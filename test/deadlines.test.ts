// The deadline sweep both buses share: entries end at their deadline (never before) unless taken
// first, and the timer runs only while something waits.

import test from 'ava';
import { setTimeout as sleep } from 'node:timers/promises';
import { Admission } from '../common/bus.js';
import { DeadlineSweep, Deadlines, tickFor } from '../common/deadlines.js';

test('the tick is a tenth of the timeout, from 5 to 100 ms', (t) => {
  t.is(tickFor(10), 5);
  t.is(tickFor(300), 30);
  t.is(tickFor(5000), 100);
});

test('an entry expires once its deadline has passed, not before; a taken one never does', async (t) => {
  const expired: { key: string; at: number; deadline: number }[] = [];
  const sweep = new DeadlineSweep<string, { deadline: number }>(100, (e, key) => expired.push({ key, at: Date.now(), deadline: e.deadline }));
  const now = Date.now();
  sweep.add('soon', { deadline: now + 30 });
  sweep.add('later', { deadline: now + 120 });
  sweep.add('taken', { deadline: now + 30 });
  t.true(sweep.ticking);
  t.deepEqual(sweep.take('taken'), { deadline: now + 30 });
  t.is(sweep.take('taken'), undefined, 'taken once');

  // Polled rather than timed: on a busy machine a tick may come late, never early.
  for (let i = 0; i < 200 && expired.length < 2; i++) await sleep(10);
  t.deepEqual(
    expired.map((e) => e.key),
    ['soon', 'later'],
  );
  for (const e of expired) t.true(e.at >= e.deadline, `${e.key} expired ${e.deadline - e.at} ms early`);
  t.is(sweep.take('later'), undefined, 'an expired entry cannot be taken');
  t.false(sweep.ticking, 'the timer stops when nothing waits');

  sweep.add('again', { deadline: Date.now() + 10 });
  t.true(sweep.ticking, 'and starts again with the next entry');
  sweep.close();
  t.false(sweep.ticking);
});

test('a race answers the work, "unavailable" past the deadline, "internal" when the work throws', async (t) => {
  const deadlines = new Deadlines(50);
  t.deepEqual(await deadlines.race(Promise.resolve({ ok: true as const, value: 1 })), { ok: true, value: 1 });
  const started = Date.now();
  const late = await deadlines.race(new Promise<never>(() => {}));
  t.like(late, { ok: false, error: { code: 'unavailable' } });
  t.true(Date.now() - started >= 50);
  t.like(await deadlines.race(Promise.reject(new Error('boom'))), { ok: false, error: { code: 'internal' } });
  deadlines.close();
});

test('a write that started before its deadline is awaited past it; one that had not never starts', async (t) => {
  const deadlines = new Deadlines(20);
  // Started in time, done well after the deadline: its own answer, not 503.
  const running = new Admission();
  t.true(running.start());
  const done = deadlines.race(sleep(80).then(() => ({ ok: true as const, value: 'applied' })), running);
  t.deepEqual(await done, { ok: true, value: 'applied' });
  // Still waiting at the deadline: 503, and the turn that comes later is refused its start.
  const waiting = new Admission();
  const started = Date.now();
  const late = await deadlines.race(new Promise<never>(() => {}), waiting);
  t.like(late, { ok: false, error: { code: 'unavailable' } });
  t.true(Date.now() - started >= 20);
  t.false(waiting.start(), 'given up: the write must not run');
  deadlines.close();
});
