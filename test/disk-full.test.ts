// A full disk fails the writes whose commit LMDB cannot make, and nothing else: the process keeps
// serving, every write it acknowledged is still there, it shuts down cleanly, and once there is
// room again writes succeed. The real service runs as a child process whose files
// may not grow past a few megabytes (RLIMIT_FSIZE), so its LMDB file fills as a disk would.

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

test.serial('a full disk fails the writes it cannot hold with 500 problems; the process serves on and keeps every acknowledged write', async (t) => {
  const tok = await token(SECRET, 'orders:read orders:write', { tenant: 'full' });
  const auth = { authorization: `Bearer ${tok}` };
  const json = { ...auth, 'content-type': 'application/json' };
  const full = await startChild(t.context.children, t.context.dir, SECRET, {}, { fileSizeLimit: LIMIT_BYTES });
  const pool = new Pool(full.url, { connections: PARALLEL });
  const acked = new Map<string, string>();
  const refused: { status: number; type: unknown }[] = [];
  try {
    // Big notes, so the file reaches its limit within a few hundred orders.
    for (let sent = 0; sent < MAX_REQUESTS && refused.length < 16; sent += PARALLEL) {
      await Promise.all(
        Array.from({ length: PARALLEL }, async (_, j) => {
          const note = `${sent + j} `.padEnd(1900, 'n');
          const res = await pool.request({ path: '/v1/orders', method: 'POST', headers: json, body: JSON.stringify({ currency: 'EUR', note }) });
          const body = (await res.body.json()) as { id?: string; type?: unknown };
          if (res.statusCode === 201) acked.set(body.id!, note);
          else refused.push({ status: res.statusCode, type: body.type });
        }),
      );
    }
    t.true(acked.size > 0, 'writes succeed until the disk is full');
    t.true(refused.length > 0, `the disk filled within ${MAX_REQUESTS} creates`);
    t.deepEqual(
      refused.filter((r) => r.status !== 500 || r.type !== '/problems/internal'),
      [],
      'a write the disk cannot hold is answered 500 internal',
    );
    t.is(full.child.exitCode, null, 'the process is still running');

    for (const [id, note] of acked) {
      const res = await pool.request({ path: `/v1/orders/${id}`, method: 'GET', headers: auth });
      const body = (await res.body.json()) as { note?: string };
      if (res.statusCode !== 200 || body.note !== note) t.fail(`${id}: ${res.statusCode}`);
    }

    // A small write may still fit in pages earlier commits freed (once no snapshot still read
    // holds them): either way it is answered, 201 or 500.
    const small = await pool.request({ path: '/v1/orders', method: 'POST', headers: json, body: '{"currency":"EUR"}' });
    const created = (await small.body.json()) as { id: string };
    t.true(small.statusCode === 201 || small.statusCode === 500, String(small.statusCode));
    if (small.statusCode === 201) acked.set(created.id, '');
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
    // With room again, writes succeed.
    const later = await reader.request({ path: '/v1/orders', method: 'POST', headers: json, body: '{"currency":"EUR"}' });
    await later.body.dump();
    t.is(later.statusCode, 201);
  } finally {
    await reader.close();
  }
});
