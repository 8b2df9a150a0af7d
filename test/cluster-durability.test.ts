// Cluster mode's half of ARCHITECTURE property 2: a 2xx for a write means it is on disk at the
// actor node that owns it. An actor node is SIGKILLed in the middle of a storm of creates sent
// through a gateway over a real nats-server, and started again on its data directory: every
// order whose 201 reached the client must be there, as acknowledged. While the node is gone, its
// half of the partitions answers 503 with Retry-After; nothing else is an error.

import test from 'ava';
import { setTimeout as delay } from 'node:timers/promises';
import { Api, type Reply } from './helpers/client.js';
import { startCluster } from './helpers/service.js';

const LOOPS = 32;
const STORM_MAX_MS = 4000;

type Order = Record<string, unknown> & { id: string };

test('every create acknowledged before an actor node is SIGKILLed is there after it restarts', async (t) => {
  const service = await startCluster();
  const api = new Api(service.url, service.secret);
  try {
    const c = await api.as('cluster-storm');
    const acked = new Map<string, Order>();
    const refused: Reply[] = [];
    let stopped = false;
    const loops = Array.from({ length: LOOPS }, async (_, loop) => {
      for (let i = 0; !stopped; i++) {
        const res = await c.post('/v1/orders', { currency: 'EUR', note: `storm ${loop}/${i}`, metadata: { loop: String(loop), i: String(i) } });
        // Only a 201 received whole counts as acknowledged.
        if (res.status === 201) acked.set(res.json.id as string, res.json as Order);
        else refused.push(res);
      }
    });

    const stormStart = Date.now();
    while (Date.now() - stormStart < STORM_MAX_MS && acked.size < 600) await delay(20);
    const ackedBeforeKill = acked.size;
    await service.killNode!('e2e-low');
    // The storm goes on for a while without the node: its partitions refuse, the others serve.
    await delay(300);
    stopped = true;
    await Promise.all(loops);
    t.true(ackedBeforeKill > 0, 'the storm got writes through before the kill');
    t.true(refused.length > 0, 'creates for the dead node were refused');
    for (const r of refused) {
      t.is(r.status, 503, r.text);
      t.regex(r.headers['retry-after'] ?? '', /^\d+$/);
    }
    t.log(`${acked.size} creates acknowledged, ${refused.length} refused while the node was down`);

    await service.restartNode!('e2e-low');
    // Every acknowledged order reads back as acknowledged, once the gateway knows the node again.
    const ids = [...acked.keys()];
    const missing: string[] = [];
    const changed: string[] = [];
    const deadline = Date.now() + 20_000;
    for (let at = 0; at < ids.length; at += 32) {
      await Promise.all(
        ids.slice(at, at + 32).map(async (id) => {
          let res = await c.get(`/v1/orders/${id}`);
          while (res.status === 503 && Date.now() < deadline) {
            await delay(50);
            res = await c.get(`/v1/orders/${id}`);
          }
          if (res.status !== 200) return void missing.push(`${id}: ${res.status}`);
          const want = acked.get(id)!;
          for (const k of ['id', 'status', 'currency', 'total', 'note', 'metadata', 'createdAt', 'updatedAt']) {
            if (JSON.stringify(res.json[k]) !== JSON.stringify(want[k])) return void changed.push(`${id}.${k}`);
          }
        }),
      );
    }
    t.deepEqual(missing, [], 'acknowledged orders lost');
    t.deepEqual(changed, [], 'acknowledged orders changed');
    // The restarted node takes writes again.
    let after: Reply | undefined;
    for (let i = 0; i < 40; i++) {
      after = await c.post('/v1/orders', { currency: 'EUR', note: 'after the crash' });
      if (after.status !== 201) break;
    }
    t.is(after?.status, 201, after?.text);
  } finally {
    await api.close();
    await service.close();
  }
});
