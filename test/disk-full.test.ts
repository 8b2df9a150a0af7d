// A disk about to fill refuses clients' writes before LMDB can meet the full disk
// (storage/room.ts): each is answered 503 with Retry-After and changes nothing, LMDB never meets a
// failed write, the process keeps serving, every write it acknowledged is still there, it shuts
// down cleanly, and once there is room again writes succeed. The real service runs as a child
// process whose files may not grow past a few megabytes (RLIMIT_FSIZE), so its LMDB file fills
// as a disk would; STORAGE_RESERVE_MB is 1 to fit it. A commit LMDB itself fails is covered in
// test/storage-fatal.test.ts.

import anyTest, { type TestFn } from 'ava';
import { Pool } from 'undici';
import { exited, startChild, useChildren, type ChildContext } from './helpers/child-service.js';
import { token } from './helpers/edge-kit.js';

const test = anyTest as TestFn<ChildContext>;
const SECRET = 'disk-full-test-secret-0123456789abcdef';
const LIMIT_BYTES = 3 * 1024 * 1024;
const PARALLEL = 8;
const MAX_REQUESTS = 8000;

useChildren(test, 'disk-full');

test.serial('a disk about to fill refuses clients\' writes with 503 and Retry-After before LMDB meets it; the process serves on and keeps every acknowledged write', async (t) => {
  const tok = await token(SECRET, 'orders:read orders:write', { tenant: 'full' });
  const auth = { authorization: `Bearer ${tok}` };
  const json = { ...auth, 'content-type': 'application/json' };
  const full = await startChild(t.context.children, t.context.dir, SECRET, { STORAGE_RESERVE_MB: '1' }, { fileSizeLimit: LIMIT_BYTES });
  const pool = new Pool(full.url, { connections: PARALLEL });
  const acked = new Map<string, string>();
  let refusedKey: { key: string; note: string } | undefined;
  const refused: { status: number; type: unknown; retryAfter: unknown }[] = [];
  try {
    // Big notes, so the file reaches its limit within a few hundred orders.
    for (let sent = 0; sent < MAX_REQUESTS && refused.length < 16; sent += PARALLEL) {
      await Promise.all(
        Array.from({ length: PARALLEL }, async (_, j) => {
          const note = `${sent + j} `.padEnd(1900, 'n');
          const res = await pool.request({ path: '/v1/orders', method: 'POST', headers: json, body: JSON.stringify({ currency: 'EUR', note }) });
          const body = (await res.body.json()) as { id?: string; type?: unknown };
          if (res.statusCode === 201) acked.set(body.id!, note);
          else refused.push({ status: res.statusCode, type: body.type, retryAfter: res.headers['retry-after'] });
        }),
      );
    }
    t.true(acked.size > 0, 'writes succeed until the disk is full');
    t.true(refused.length > 0, `the disk filled within ${MAX_REQUESTS} creates`);
    t.deepEqual(
      refused.filter((r) => r.status !== 503 || r.type !== '/problems/unavailable' || r.retryAfter !== '30'),
      [],
      'a write refused for want of room is answered 503 unavailable, Retry-After: 30',
    );
    t.is(full.child.exitCode, null, 'the process is still running');
    t.regex(full.report(), /storage is short of room/, 'the shortage is logged');
    t.notRegex(full.report(), /Write error|Commit failed/, 'LMDB never met the full disk');

    // A keyed write refused is not kept: its retry, once there is room, runs (below). Near the
    // line a write may still fit as commits settle and the room is measured again: sent until
    // one is refused.
    for (let i = 0; i < 100 && refusedKey === undefined; i++) {
      const note = `keyed ${i} `.padEnd(1900, 'k');
      const res = await pool.request({ path: '/v1/orders', method: 'POST', headers: { ...json, 'idempotency-key': `disk-full-${i}` }, body: JSON.stringify({ currency: 'EUR', note }) });
      const body = (await res.body.json()) as { id?: string };
      if (res.statusCode === 201) acked.set(body.id!, note);
      else if (res.statusCode === 503) refusedKey = { key: `disk-full-${i}`, note };
      else t.fail(`a keyed write answered ${res.statusCode}`);
    }
    t.not(refusedKey, undefined, 'a keyed write is refused');

    for (const [id, note] of acked) {
      const res = await pool.request({ path: `/v1/orders/${id}`, method: 'GET', headers: auth });
      const body = (await res.body.json()) as { note?: string };
      if (res.statusCode !== 200 || body.note !== note) t.fail(`${id}: ${res.statusCode}`);
    }

  } catch (error) {
    // A dropped connection says little by itself: say how the child fared.
    throw new Error(`${String(error)}\n${full.report()}`, { cause: error });
  } finally {
    await pool.close();
  }

  full.child.kill('SIGTERM');
  const bye = await Promise.race([exited(full.child), new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
  t.deepEqual(bye, { code: 0, signal: null }, `it shuts down cleanly; ${full.report()}`);

  // Started again without the limit, on the same data: every acknowledged order is there.
  const again = await startChild(t.context.children, t.context.dir, SECRET);
  const reader = new Pool(again.url, { connections: PARALLEL });
  try {
    const missing: string[] = [];
    for (const id of acked.keys()) {
      const res = await reader.request({ path: `/v1/orders/${id}`, method: 'GET', headers: auth });
      await res.body.dump();
      if (res.statusCode !== 200) missing.push(id);
    }
    t.deepEqual(missing, [], 'acknowledged orders lost');
    // With room again, writes succeed, and the keyed write refused before runs now.
    const later = await reader.request({ path: '/v1/orders', method: 'POST', headers: json, body: '{"currency":"EUR"}' });
    await later.body.dump();
    t.is(later.statusCode, 201);
    const retried = await reader.request({ path: '/v1/orders', method: 'POST', headers: { ...json, 'idempotency-key': refusedKey!.key }, body: JSON.stringify({ currency: 'EUR', note: refusedKey!.note }) });
    const order = (await retried.body.json()) as { note?: string };
    t.is(retried.statusCode, 201);
    t.is(retried.headers['idempotent-replayed'], undefined);
    t.is(order.note, refusedKey!.note);
  } finally {
    await reader.close();
  }
});
