// A 2xx for a write means it is on disk (CONTRACT §7, ARCHITECTURE property 2). The real
// process (`node dist/gateway/main.js`, embedded mode) takes a storm of creates, is SIGKILLed
// in the middle of it, and restarts on the same DATA_DIR: every order whose 201 reached the
// client must be there, byte for byte, and in the list. With Idempotency-Keys, every retry after
// the restart replays what committed and creates what did not: one order per key.

import anyTest, { type TestFn } from 'ava';
import { Pool } from 'undici';
import { exited, startChild, START_WITHIN_MS, useChildren, type ChildContext, type Running } from './helpers/child-service.js';
import { removeDir, tempDir, token } from './helpers/edge-kit.js';

const test = anyTest as TestFn<ChildContext>;
const SECRET = 'durability-test-secret-0123456789abcdef';
const LOOPS = 32;
const STORM_MAX_MS = 3000;

useChildren(test, 'durability');

function start(t: { context: ChildContext }, dir = t.context.dir): Promise<Running> {
  return startChild(t.context.children, dir, SECRET);
}

type Order = Record<string, unknown> & { id: string };

test.serial('every acknowledged create survives SIGKILL mid-storm, and the restart is prompt', async (t) => {
  const tok = await token(SECRET, 'orders:read orders:write', { tenant: 'storm' });
  const auth = { authorization: `Bearer ${tok}` };

  // ---- the storm ----
  const first = await start(t);
  t.true(first.startMs < START_WITHIN_MS);
  const pool = new Pool(first.url, { connections: LOOPS, pipelining: 1 });
  const acked = new Map<string, Order>();
  let stopped = false;
  let failures = 0;
  const loops = Array.from({ length: LOOPS }, async (_, loop) => {
    for (let i = 0; !stopped; i++) {
      try {
        const res = await pool.request({
          path: '/v1/orders',
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ currency: 'EUR', customerId: `cus-${loop}`, note: `storm ${loop}/${i}`, metadata: { loop: String(loop), i: String(i) } }),
        });
        const text = await res.body.text();
        // Only a 201 received whole counts as acknowledged.
        if (res.statusCode === 201) {
          const order = JSON.parse(text) as Order;
          acked.set(order.id, order);
        } else failures++;
      } catch {
        return; // the process is gone
      }
    }
  });

  const stormStart = Date.now();
  // Let the storm run until a good number of writes are acknowledged, then kill it mid-flight.
  while (Date.now() - stormStart < STORM_MAX_MS && acked.size < 2000) await new Promise((r) => setTimeout(r, 20));
  const ackedBeforeKill = acked.size;
  first.child.kill('SIGKILL');
  const death = await exited(first.child);
  stopped = true;
  await Promise.all(loops);
  await pool.destroy();
  t.is(death.signal, 'SIGKILL');
  t.is(failures, 0, 'no create was refused during the storm');
  t.true(ackedBeforeKill > 0, 'the storm got writes through before the kill');
  t.log(`${acked.size} creates acknowledged in ${Date.now() - stormStart} ms before SIGKILL`);

  // ---- the restart ----
  const restartAt = Date.now();
  const second = await start(t);
  t.true(second.startMs < START_WITHIN_MS, `restart took ${second.startMs} ms`);
  const reader = new Pool(second.url, { connections: 16 });
  try {
    const probe = await reader.request({ path: '/v1/orders?limit=1', method: 'GET', headers: auth });
    await probe.body.text();
    t.is(probe.statusCode, 200);
    t.true(Date.now() - restartAt < START_WITHIN_MS, `first answer ${Date.now() - restartAt} ms after the restart began`);

    // Every acknowledged order reads back exactly as it was acknowledged.
    const ids = [...acked.keys()];
    const missing: string[] = [];
    const changed: string[] = [];
    for (let at = 0; at < ids.length; at += 64) {
      await Promise.all(
        ids.slice(at, at + 64).map(async (id) => {
          const res = await reader.request({ path: `/v1/orders/${id}`, method: 'GET', headers: auth });
          const text = await res.body.text();
          if (res.statusCode !== 200) return void missing.push(`${id}: ${res.statusCode}`);
          const got = JSON.parse(text) as Order;
          const want = acked.get(id)!;
          for (const k of ['id', 'status', 'currency', 'total', 'customerId', 'note', 'metadata', 'createdAt', 'updatedAt', '_links']) {
            if (JSON.stringify(got[k]) !== JSON.stringify(want[k])) return void changed.push(`${id}.${k}`);
          }
        }),
      );
    }
    t.deepEqual(missing, [], 'acknowledged orders lost');
    t.deepEqual(changed, [], 'acknowledged orders changed');

    // The list index committed with each record: every acknowledged order is listed, once.
    const listed: string[] = [];
    let next: string | undefined = '/v1/orders?limit=100&sort=createdAt';
    while (next) {
      const res = await reader.request({ path: next, method: 'GET', headers: auth });
      const page = (await res.body.json()) as { data: { id: string }[]; _links: { next?: { href: string } } };
      listed.push(...page.data.map((o) => o.id));
      next = page._links.next?.href;
    }
    t.is(new Set(listed).size, listed.length, 'no order listed twice');
    const listedSet = new Set(listed);
    t.deepEqual(ids.filter((id) => !listedSet.has(id)), [], 'acknowledged orders missing from the list');
    // Writes that committed but whose answer was lost in the kill may exist too, no more than were in flight.
    t.true(listed.length - ids.length <= LOOPS, `${listed.length - ids.length} unacknowledged extras`);

    // The restarted process keeps taking writes.
    const res = await reader.request({
      path: '/v1/orders',
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ currency: 'EUR', note: 'after the crash' }),
    });
    await res.body.text();
    t.is(res.statusCode, 201);
  } finally {
    await reader.close();
  }

  // And it shuts down cleanly on SIGTERM.
  second.child.kill('SIGTERM');
  const bye = await Promise.race([exited(second.child), new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
  t.deepEqual(bye, { code: 0, signal: null });
});

test.serial('keyed creates killed mid-flight: after the restart every retry replays or creates, and no key makes two orders', async (t) => {
  const tok = await token(SECRET, 'orders:read orders:write', { tenant: 'keyed-storm' });
  const headers = (key: string) => ({ authorization: `Bearer ${tok}`, 'content-type': 'application/json', 'idempotency-key': key });
  const dir = await tempDir('durability-keyed');
  try {
    const first = await start(t, dir);
    const pool = new Pool(first.url, { connections: LOOPS, pipelining: 1 });
    const sent = new Map<string, string>(); // key -> body
    const acked = new Map<string, string>(); // key -> order id
    let stopped = false;
    const loops = Array.from({ length: LOOPS }, async (_, loop) => {
      for (let i = 0; !stopped; i++) {
        const key = `storm-${loop}-${i}`;
        const body = JSON.stringify({ currency: 'EUR', note: `keyed ${loop}/${i}` });
        sent.set(key, body);
        try {
          const res = await pool.request({ path: '/v1/orders', method: 'POST', headers: headers(key), body });
          const text = await res.body.text();
          if (res.statusCode === 201) acked.set(key, (JSON.parse(text) as Order).id);
        } catch {
          return; // the process is gone
        }
      }
    });
    const stormStart = Date.now();
    while (Date.now() - stormStart < STORM_MAX_MS && acked.size < 1000) await new Promise((r) => setTimeout(r, 20));
    first.child.kill('SIGKILL');
    await exited(first.child);
    stopped = true;
    await Promise.all(loops);
    await pool.destroy();
    t.true(acked.size > 0);

    const second = await start(t, dir);
    const retry = new Pool(second.url, { connections: 16 });
    try {
      const wrong: string[] = [];
      let replays = 0;
      const keys = [...sent.keys()];
      for (let at = 0; at < keys.length; at += 64) {
        await Promise.all(
          keys.slice(at, at + 64).map(async (key) => {
            const res = await retry.request({ path: '/v1/orders', method: 'POST', headers: headers(key), body: sent.get(key)! });
            const text = await res.body.text();
            if (res.statusCode !== 201) return void wrong.push(`${key}: ${res.statusCode} ${text}`);
            const id = (JSON.parse(text) as Order).id;
            const wasReplayed = res.headers['idempotent-replayed'] === 'true';
            if (wasReplayed) replays++;
            // An acknowledged create is on disk with its key: the retry must replay it.
            if (acked.has(key) && (!wasReplayed || acked.get(key) !== id)) wrong.push(`${key}: acknowledged as ${acked.get(key)}, retried as ${id} (replayed: ${wasReplayed})`);
          }),
        );
      }
      t.deepEqual(wrong, []);
      t.true(replays >= acked.size, `${replays} replays for ${acked.size} acknowledged keys`);

      // One order per key sent, whether its first attempt committed or not.
      let listed = 0;
      let next: string | undefined = '/v1/orders?limit=100';
      while (next) {
        const res = await retry.request({ path: next, method: 'GET', headers: { authorization: `Bearer ${tok}` } });
        const page = (await res.body.json()) as { data: unknown[]; _links: { next?: { href: string } } };
        listed += page.data.length;
        next = page._links.next?.href;
      }
      t.is(listed, sent.size, 'exactly one order per key');
      t.log(`${sent.size} keys sent, ${acked.size} acknowledged before SIGKILL, ${replays} replayed after the restart`);
    } finally {
      await retry.close();
      second.child.kill('SIGTERM');
      await exited(second.child);
    }
  } finally {
    await removeDir(dir);
  }
});

test.serial('atomic batches killed mid-flight: after the restart each batch is there whole or not at all', async (t) => {
  const tok = await token(SECRET, 'orders:read orders:write', { tenant: 'atomic-storm' });
  const auth = { authorization: `Bearer ${tok}` };
  const SIZE = 5;
  const dir = await tempDir('durability-atomic');
  try {
    const first = await start(t, dir);
    const pool = new Pool(first.url, { connections: 16, pipelining: 1 });
    let acked = 0;
    let sent = 0;
    let stopped = false;
    const ackedBatches = new Set<string>();
    const loops = Array.from({ length: 16 }, async (_, loop) => {
      for (let i = 0; !stopped; i++) {
        const batch = `b-${loop}-${i}`;
        sent++;
        const operations = Array.from({ length: SIZE }, (_, j) => ({ method: 'POST', body: { currency: 'EUR', note: batch, metadata: { j: String(j) } } }));
        try {
          const res = await pool.request({ path: '/v1/orders/batch', method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ atomic: true, operations }) });
          await res.body.text();
          if (res.statusCode === 200) {
            acked++;
            ackedBatches.add(batch);
          }
        } catch {
          return;
        }
      }
    });
    const stormStart = Date.now();
    while (Date.now() - stormStart < STORM_MAX_MS && acked < 300) await new Promise((r) => setTimeout(r, 20));
    first.child.kill('SIGKILL');
    await exited(first.child);
    stopped = true;
    await Promise.all(loops);
    await pool.destroy();
    t.true(acked > 0);

    const second = await start(t, dir);
    const reader = new Pool(second.url, { connections: 4 });
    try {
      const perBatch = new Map<string, number>();
      let next: string | undefined = '/v1/orders?limit=100';
      while (next) {
        const res = await reader.request({ path: next, method: 'GET', headers: auth });
        const page = (await res.body.json()) as { data: { note: string }[]; _links: { next?: { href: string } } };
        for (const o of page.data) perBatch.set(o.note, (perBatch.get(o.note) ?? 0) + 1);
        next = page._links.next?.href;
      }
      const torn = [...perBatch].filter(([, n]) => n !== SIZE);
      t.deepEqual(torn, [], 'no batch is there in part');
      t.deepEqual([...ackedBatches].filter((b) => perBatch.get(b) !== SIZE), [], 'every acknowledged batch is there whole');
      t.log(`${sent} atomic batches sent, ${acked} acknowledged before SIGKILL, ${perBatch.size} found whole`);
    } finally {
      await reader.close();
      second.child.kill('SIGTERM');
      await exited(second.child);
    }
  } finally {
    await removeDir(dir);
  }
});
