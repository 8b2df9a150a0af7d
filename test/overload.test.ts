// Overload and dependency failure over real sockets (ARCHITECTURE property 7, SPEC §7.2): a
// request that cannot be served gets 503 `unavailable` with Retry-After, never a hang or a 500,
// a refused write leaves no trace, and the service serves again once the dependency is back.

import { setTimeout as delay } from 'node:timers/promises';
import test, { type ExecutionContext } from 'ava';
import { Api, callersOn, type Caller, type Reply } from './helpers/client.js';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { loadConfig } from '../common/config.js';
import { createLogger } from '../common/log.js';
import { startService } from '../gateway/app.js';
import { removeDir, ROOT, tempDir } from './helpers/edge-kit.js';
import { startNatsServer } from './helpers/nats-server.js';
import { startActorNode, startCluster, startEmbedded } from './helpers/service.js';

function versionOf(etag: string | undefined): number {
  const m = /^"(\d+)-/.exec(etag ?? '');
  if (!m) throw new Error(`not a version tag: ${etag}`);
  return Number(m[1]);
}

function assertUnavailable(t: ExecutionContext, res: Reply): void {
  t.is(res.status, 503, res.text);
  t.regex(res.headers['retry-after'] ?? '', /^\d+$/, 'Retry-After in whole seconds');
  t.is(res.json.type, '/problems/unavailable');
  t.is(res.json.traceId, res.headers['trace-id']);
}

/**
 * A caller of an embedded service started with `env`, and four more for the same tenant with
 * pools of their own (callersOn); all closed after `run`.
 */
async function withEmbedded(env: Record<string, string>, tenant: string, run: (c: Caller, more: Caller[]) => Promise<void>): Promise<void> {
  const service = await startEmbedded(env);
  const api = new Api(service.url, service.secret);
  try {
    const c = await api.as(tenant);
    const more = callersOn(c, Array.from({ length: 4 }, () => service.url));
    try {
      await run(c, more.callers);
    } finally {
      await more.close();
    }
  } finally {
    await api.close();
    await service.close();
  }
}

async function newOrder(t: ExecutionContext, c: Caller): Promise<string> {
  const created = await c.post('/v1/orders', { currency: 'EUR' });
  t.is(created.status, 201);
  return `/v1/orders/${created.json.id}`;
}

/**
 * 96 patches to one order from each caller, all at once: the acknowledged ones, after checking
 * that some were refused, each with a 503 `unavailable` and Retry-After.
 */
async function flood(t: ExecutionContext, callers: Caller[], href: string, why: string): Promise<Reply[]> {
  const answers = await Promise.all(callers.flatMap((c, j) => Array.from({ length: 96 }, (_, i) => c.patch(href, { note: `n${j}-${i}` }))));
  const refused = answers.filter((r) => r.status !== 200);
  t.true(refused.length > 0, why);
  for (const r of refused) assertUnavailable(t, r);
  return answers.filter((r) => r.status === 200);
}

test('a full mailbox is 503 with Retry-After, and the refused writes leave no trace', async (t) => {
  // One key, room for four: most have to be turned away.
  await withEmbedded({ MAILBOX_LIMIT: '4' }, 'overload', async (c) => {
    const href = await newOrder(t, c);
    const ok = await flood(t, [c], href, 'some writes found the mailbox full');
    const after = await c.get(href);
    t.is(versionOf(after.headers.etag), 1 + ok.length, 'exactly the acknowledged patches were applied');
    t.true(ok.some((r) => r.json.note === after.json.note), 'the last write standing is an acknowledged one');
  });
});

test('a write still queued at its deadline is 503 with Retry-After, and never runs after', async (t) => {
  // 10 ms for every bus call: writes to one order run one after another, each flushed to disk,
  // so of 160 at once the later ones wait longer than that, however fast the disk.
  await withEmbedded({ BUS_TIMEOUT_MS: '10' }, 'overload-deadline', async (c, more) => {
    const href = await newOrder(t, c);
    const ok = await flood(t, [c, ...more], href, 'some writes were still queued at their deadline');
    // Whatever was answered 503 must not happen later: a retry of it would then run it twice.
    // (A write whose turn had begun was answered when done, past its deadline if need be.)
    await delay(200);
    const after = await c.get(href);
    t.is(after.status, 200);
    t.is(versionOf(after.headers.etag), 1 + ok.length, 'exactly the acknowledged patches were applied');
  });
});

test('a keyed write refused with 503 is not kept under its key: the retry runs, once', async (t) => {
  await withEmbedded({ MAILBOX_LIMIT: '4' }, 'overload-keyed', async (c) => {
    let refusedOnce = false;
    // A cancel queued behind a burst of patches to its order finds the mailbox full (almost
    // always at once; a few orders are tried in case one burst drained too soon).
    for (let attempt = 0; attempt < 5 && !refusedOnce; attempt++) {
      const href = await newOrder(t, c);
      const key = { 'idempotency-key': `overload-${attempt}` };
      const burst = Array.from({ length: 64 }, (_, i) => c.patch(href, { note: `n${i}` }));
      const cancel = await c.post(`${href}/cancel`, undefined, key);
      await Promise.all(burst);
      if (cancel.status !== 503) {
        t.is(cancel.status, 200, cancel.text);
        continue;
      }
      refusedOnce = true;
      assertUnavailable(t, cancel);
      t.is((await c.get(href)).json.status, 'pending', 'the refused cancel did nothing');
      const retry = await c.post(`${href}/cancel`, undefined, key);
      t.is(retry.status, 200, `the retry runs: ${retry.text}`);
      t.is(retry.headers['idempotent-replayed'], undefined, 'and is no replay of the 503');
      t.is((await c.get(href)).json.status, 'cancelled');
      const again = await c.post(`${href}/cancel`, undefined, key);
      t.is(again.status, 200);
      t.is(again.headers['idempotent-replayed'], 'true', 'what is kept is the answer that ran');
    }
    t.true(refusedOnce, 'a keyed cancel met a full mailbox');
  });
});

test('cluster: with NATS gone every answer is a prompt 503 with Retry-After; once it is back the service serves again', async (t) => {
  const service = await startCluster();
  const api = new Api(service.url, service.secret);
  try {
    const c = await api.as('nats-down');
    const created = await c.post('/v1/orders', { currency: 'EUR' });
    t.is(created.status, 201);
    const href = `/v1/orders/${created.json.id}`;

    await service.nats!.kill();
    const started = Date.now();
    const answers = await Promise.all([
      c.get(href),
      c.post('/v1/orders', { currency: 'EUR' }),
      c.patch(href, { note: 'while down' }),
      c.get('/v1/orders'),
      // A partial batch none of whose groups could run is that 503 as a whole, not a 207 of them.
      c.post('/v1/orders/batch', { operations: [{ method: 'POST', body: { currency: 'EUR' } }, { method: 'PATCH', id: created.json.id, body: { note: 'batch' } }] }),
    ]);
    const took = Date.now() - started;
    for (const r of answers) assertUnavailable(t, r);
    // BUS_TIMEOUT_MS defaults to 5 s; a disconnected bus refuses at once rather than waiting it out.
    t.true(took < 6000, `answered within ${took} ms`);

    await service.nats!.restart();
    // Gateways and actor nodes reconnect by themselves; until they have, answers stay 503.
    const until = async (want: number, call: () => Promise<Reply>): Promise<Reply> => {
      const deadline = Date.now() + 20_000;
      for (;;) {
        const res = await call();
        if (res.status === want || Date.now() > deadline) return res;
        assertUnavailable(t, res);
        await delay(100);
      }
    };
    const read = await until(200, () => c.get(href));
    t.is(read.status, 200, `served again after NATS came back: ${read.text}`);
    t.not(read.json.note, 'while down', 'the refused patch did not happen later');
    const write = await until(201, () => c.post('/v1/orders', { currency: 'EUR' }));
    t.is(write.status, 201, write.text);
  } finally {
    await api.close();
    await service.close();
  }
});

test('cluster: a gateway and an actor node started while NATS is down wait for it; the gateway answers 503 with Retry-After meanwhile', async (t) => {
  const nats = await startNatsServer();
  t.teardown(() => nats.stop());
  const [nodeDir, gatewayDir] = await Promise.all([tempDir('late-node'), tempDir('late-gateway')]);
  t.teardown(() => Promise.all([removeDir(nodeDir), removeDir(gatewayDir)]));
  await nats.kill();

  // Both exited at once before ("cannot connect to NATS").
  let printed = '';
  const node = startActorNode(nats.url, 'late-node', '0-255', nodeDir, {}, (text) => (printed += text));
  const secret = randomBytes(32).toString('base64url');
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: gatewayDir, AUTH_JWT_SECRET: secret, LOG_LEVEL: 'silent', NATS_URL: nats.url });
  const gateway = await startService(config, createLogger('silent', 'test'));
  t.teardown(() => gateway.close());
  const api = new Api(gateway.url, secret);
  t.teardown(() => api.close());
  const c = await api.as('nats-late');
  assertUnavailable(t, await c.get('/v1/orders'));
  assertUnavailable(t, await c.post('/v1/orders', { currency: 'EUR' }));

  // The node has met the outage (it is not merely still starting) before NATS comes back.
  const waitedUntil = Date.now() + 15_000;
  while (!/cannot reach NATS at .*waiting for it/.test(printed) && Date.now() < waitedUntil) await delay(20);
  t.regex(printed, /cannot reach NATS at .*waiting for it/);
  await nats.restart();
  t.teardown(async () => (await node).stop());
  await node;
  const deadline = Date.now() + 20_000;
  let created: Reply;
  for (;;) {
    created = await c.post('/v1/orders', { currency: 'EUR' });
    if (created.status !== 503 || Date.now() > deadline) break;
    assertUnavailable(t, created);
    await delay(100);
  }
  t.is(created.status, 201, created.text);
  t.is((await c.get(`/v1/orders/${created.json.id}`)).status, 200);
});

test('cluster: an actor node waiting for NATS stops gracefully on SIGTERM', async (t) => {
  const nats = await startNatsServer();
  t.teardown(() => nats.stop());
  const dir = await tempDir('waiting-node');
  t.teardown(() => removeDir(dir));
  await nats.kill();
  const node = spawn(process.execPath, [join(ROOT, 'dist/actors/main.js')], {
    env: { PATH: process.env.PATH ?? '', NATS_URL: nats.url, NODE_ID: 'waiting', DATA_DIR: dir, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => node.kill('SIGKILL'));
  let printed = '';
  node.stdout.on('data', (d: Buffer) => (printed += d.toString()));
  node.stderr.on('data', (d: Buffer) => (printed += d.toString()));
  const end = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => node.once('exit', (code, signal) => resolve({ code, signal })));
  const until = Date.now() + 15_000;
  while (!/waiting for it/.test(printed) && Date.now() < until) await delay(20);
  t.regex(printed, /cannot reach NATS at .*waiting for it/);
  node.kill('SIGTERM');
  // Killed by the signal before (no handler was in place while it waited).
  t.deepEqual(await end, { code: 0, signal: null }, printed);
  t.regex(printed, /shutting down/);
});
