// Overload and dependency failure over real sockets (ARCHITECTURE property 7, SPEC §7.2): a
// request that cannot be served gets 503 `unavailable` with Retry-After, never a hang or a 500,
// a refused write leaves no trace, and the service serves again once the dependency is back.

import { setTimeout as delay } from 'node:timers/promises';
import test from 'ava';
import { Api, type Reply } from './helpers/client.js';
import { startCluster, startEmbedded } from './helpers/service.js';

function versionOf(etag: string | undefined): number {
  const m = /^"(\d+)-/.exec(etag ?? '');
  if (!m) throw new Error(`not a version tag: ${etag}`);
  return Number(m[1]);
}

function assertUnavailable(t: { is: (a: unknown, b: unknown, m?: string) => void; regex: (s: string, r: RegExp, m?: string) => void }, res: Reply): void {
  t.is(res.status, 503, res.text);
  t.regex(res.headers['retry-after'] ?? '', /^\d+$/, 'Retry-After in whole seconds');
  t.is(res.json.type, '/problems/unavailable');
  t.is(res.json.traceId, res.headers['trace-id']);
}

test('a full mailbox is 503 with Retry-After, and the refused writes leave no trace', async (t) => {
  const service = await startEmbedded({ MAILBOX_LIMIT: '4' });
  const api = new Api(service.url, service.secret);
  try {
    const c = await api.as('overload');
    const created = await c.post('/v1/orders', { currency: 'EUR' });
    t.is(created.status, 201);
    const href = `/v1/orders/${created.json.id}`;
    // 32 connections, one key, room for four: most have to be turned away.
    const answers = await Promise.all(Array.from({ length: 96 }, (_, i) => c.patch(href, { note: `n${i}` })));
    const ok = answers.filter((r) => r.status === 200);
    const refused = answers.filter((r) => r.status !== 200);
    t.true(refused.length > 0, 'some writes found the mailbox full');
    for (const r of refused) assertUnavailable(t, r);
    const after = await c.get(href);
    t.is(versionOf(after.headers.etag), 1 + ok.length, 'exactly the acknowledged patches were applied');
    t.true(ok.some((r) => r.json.note === after.json.note), 'the last write standing is an acknowledged one');
  } finally {
    await api.close();
    await service.close();
  }
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
