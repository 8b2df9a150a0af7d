// Cluster mode: a partition is served only by the store that holds its data (a real nats-server
// with JetStream, real actor node processes). A node with another DATA_DIR whose range overlaps
// stops at start, whether the owner runs or is down; the owner restarts on its own DATA_DIR; a
// copy of that directory is the same store; releasing the partitions lets another store serve them.

import { execFile } from 'node:child_process';
import { cp } from 'node:fs/promises';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import test from 'ava';
import { connect, DiscardPolicy, StringCodec, type KV, type NatsConnection } from 'nats';
import { ConfigError } from '../common/config.js';
import { bucket, claimPartitions, PARTITION_OWNERS_BUCKET, releasePartitions } from '../common/nats-partition-owners.js';
import { startActorNode } from './helpers/service.js';
import { startNatsServer } from './helpers/nats-server.js';
import { removeDir, tempDir } from './helpers/edge-kit.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const run = promisify(execFile);

/** The bucket as `bucket` opens it, with `create` replaced: a stand-in for what other nodes or JetStream do meanwhile. */
function withCreate(create: (target: KV, key: string, value: Uint8Array) => Promise<number>) {
  return async (c: NatsConnection): Promise<KV> => {
    const kv = await bucket(c);
    return new Proxy(kv, {
      get(target, prop) {
        if (prop === 'create') return (key: string, value: Uint8Array) => create(target, key, value);
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  };
}

/** How an actor node that must not serve ends: its exit code and what it printed. */
async function refusedStart(natsUrl: string, nodeId: string, partitions: string, dataDir: string): Promise<{ code: number; printed: string }> {
  try {
    await run(process.execPath, [join(ROOT, 'dist', 'actors', 'main.js')], {
      env: { PATH: process.env.PATH ?? '', NATS_URL: natsUrl, NODE_ID: nodeId, DATA_DIR: dataDir, ACTOR_PARTITIONS: partitions, LOG_LEVEL: 'warn' },
      timeout: 20_000,
    });
    return { code: 0, printed: '' };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, printed: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

test('a node whose DATA_DIR does not hold its partitions stops at start, while their owner runs and while it is down', async (t) => {
  const nats = await startNatsServer();
  t.teardown(() => nats.stop());
  const dirs = { a: await tempDir('owners-a'), b: await tempDir('owners-b'), c: await tempDir('owners-c'), copy: await tempDir('owners-copy') };
  t.teardown(() => Promise.all(Object.values(dirs).map((d) => removeDir(d))));

  const a = await startActorNode(nats.url, 'a', '0-127', dirs.a);
  const running = await refusedStart(nats.url, 'b', '100-140', dirs.b);
  t.is(running.code, 2, running.printed);
  t.regex(running.printed, /partitions 100-127 \(claimed by node a\) belong to another store/);
  // Partitions no one holds yet (128-140) were not claimed by the node that stopped.
  const fresh = await startActorNode(nats.url, 'c', '128-140', dirs.c);
  await fresh.stop();

  // The owner gone (a crash: no goodbye), the other store still may not serve its partitions.
  await a.kill();
  const down = await refusedStart(nats.url, 'b', '0-10', dirs.b);
  t.is(down.code, 2, down.printed);
  t.regex(down.printed, /claimed by node a/);

  // The owner's own directory serves them again, under any node id; so does a copy of it.
  const back = await startActorNode(nats.url, 'a2', '0-127', dirs.a);
  await back.stop();
  await cp(dirs.a, dirs.copy, { recursive: true });
  const moved = await startActorNode(nats.url, 'moved', '0-63', dirs.copy);
  await moved.stop();

  // Released (the data lost for good), they are served by the next node that claims them.
  const released = await run(process.execPath, [join(ROOT, 'dist', 'actors', 'release-partitions.js'), '0-10'], { env: { PATH: process.env.PATH ?? '', NATS_URL: nats.url } });
  t.regex(released.stdout, /released 11 of 11 partitions/);
  const adopted = await startActorNode(nats.url, 'b', '0-10', dirs.b);
  await adopted.stop();
  const original = await refusedStart(nats.url, 'a', '0-127', dirs.a);
  t.is(original.code, 2, 'the old store no longer holds what was released');
  t.regex(original.printed, /partitions 0-10 \(claimed by node b\)/);
});

test('of two new stores claiming the same partitions at once, one takes them all and the other is refused, taking none', async (t) => {
  const nats = await startNatsServer();
  t.teardown(() => nats.stop());
  // Two connections, as two nodes have: the server takes their creates side by side.
  const [nc, other] = await Promise.all([connect({ servers: nats.url }), connect({ servers: nats.url })]);
  t.teardown(() => Promise.all([nc.close(), other.close()]));
  const all = Array.from({ length: 256 }, (_, i) => i);
  for (let round = 0; round < 5; round++) {
    // Started in one turn, the two claims' reads and creates interleave: each finds the
    // partitions free, and, creating them from opposite ends, each may create some first.
    const claims = await Promise.allSettled([claimPartitions(nc, `x${round}`, `x${round}`, all), claimPartitions(other, `y${round}`, `y${round}`, [...all].reverse())]);
    const won = claims.findIndex((c) => c.status === 'fulfilled');
    t.true(won >= 0, `round ${round}: ${claims.map((c) => (c.status === 'rejected' ? String(c.reason) : 'claimed')).join(' | ')}`);
    const lost = claims[1 - won]!;
    t.is(lost.status, 'rejected', `round ${round}`);
    const winner = won === 0 ? `x${round}` : `y${round}`;
    // It names what the winner held when it looked, all of them or those the winner had created
    // by then (the winner creates on after the loser gave back what it took).
    t.regex(String((lost as PromiseRejectedResult).reason), new RegExp(`partitions [0-9][0-9,-]* \\(claimed by node ${winner}\\)`));
    // Every record is the winner's: it claims them all again, the loser none.
    await claimPartitions(nc, winner, winner, all);
    t.is(await releasePartitions(nc, all), 256);
  }
});

test('a claim that loses part of a race gives back what it took, and stops naming the winner', async (t) => {
  const nats = await startNatsServer();
  t.teardown(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  t.teardown(() => nc.close());
  const codec = StringCodec();
  const all = Array.from({ length: 256 }, (_, i) => i);
  // Another node creates partitions 128-255 between this claim's read and its creates.
  const raced = new Set<string>();
  const racing = withCreate(async (target, key, value) => {
    if (Number(key.slice(1)) >= 128 && !raced.has(key)) {
      raced.add(key);
      await target.create(key, codec.encode(JSON.stringify({ store: 'other', node: 'other' })));
    }
    return target.create(key, value);
  });
  const err = await t.throwsAsync(claimPartitions(nc, 'mine', 'mine', all, () => {}, racing));
  t.regex(err?.message ?? '', /partitions 128-255 \(claimed by node other\)/);
  // None of 0-127 stayed with the store that was refused: another store may claim them.
  const kv = await bucket(nc);
  const owners = await Promise.all(all.map(async (p) => (await kv.get(`p${p}`))?.operation === 'PUT'));
  t.deepEqual(all.filter((p) => owners[p]), all.slice(128));
  await claimPartitions(nc, 'third', 'third', all.slice(0, 128));
});

test('JetStream without a leader is waited for; JetStream off, or a fault to fix, stops the claim at once', async (t) => {
  const nats = await startNatsServer();
  t.teardown(() => nats.stop());
  const nc = await connect({ servers: nats.url });
  t.teardown(() => nc.close());
  const failing = (err: object, times: number) => {
    let left = times;
    return async (c: typeof nc): Promise<KV> => {
      if (left-- > 0) throw Object.assign(new Error('from the test'), err);
      return bucket(c);
    };
  };
  // A cluster electing its leader answers 503 with err_code 10008: the claim waits and goes on.
  const warned: string[] = [];
  await claimPartitions(nc, 'waits', 'waits', [1, 2], (m) => warned.push(m), failing({ code: '503', api_error: { err_code: 10008 } }, 1));
  t.is(warned.length, 1);
  t.regex(warned[0]!, /for now .*trying again/);
  // Another node making the bucket at the same moment (seen as "subjects overlap with an existing
  // stream" when two nodes start on a new NATS at once): opened again, with nothing to tell.
  const quiet: string[] = [];
  await claimPartitions(nc, 'made', 'made', [4], (m) => quiet.push(m), failing({ message: 'subjects overlap with an existing stream', api_error: { err_code: 10065 } }, 2));
  t.deepEqual(quiet, []);
  // Always so, it is a fault after a few tries.
  const madeElsewhere = await t.throwsAsync(claimPartitions(nc, 'made2', 'made2', [6], () => {}, failing({ api_error: { err_code: 10058 } }, 10)));
  t.regex(madeElsewhere?.message ?? '', /cannot be read or written/);
  // No responders to a record's subject (the bucket's stream offline for a moment) passes too.
  const offline = new Set<string>();
  const streamOffline = withCreate((target, key, value) => {
    if (offline.has(key)) return target.create(key, value);
    offline.add(key);
    return Promise.reject(Object.assign(new Error('503'), { code: '503' }));
  });
  const waitedOffline: string[] = [];
  await claimPartitions(nc, 'offline', 'offline', [5], (m) => waitedOffline.push(m), streamOffline);
  t.is(waitedOffline.length, 1);
  // No responders to the JetStream API, asked to open the bucket: JetStream is off, a configuration error.
  const off = await t.throwsAsync(claimPartitions(nc, 'off', 'off', [3], () => {}, failing({ code: '503' }, 1)));
  t.true(off instanceof ConfigError);
  t.regex(off?.message ?? '', /run nats-server with JetStream/);
  // A bucket that refuses the records (here: one made elsewhere holding one message at most)
  // stops the claim, and what it took is given back.
  const jsm = await nc.jetstreamManager();
  await jsm.streams.delete(`KV_${PARTITION_OWNERS_BUCKET}`);
  await nc.jetstream().views.kv(PARTITION_OWNERS_BUCKET, { history: 1, max_bytes: -1, maxBucketSize: -1 });
  await jsm.streams.update(`KV_${PARTITION_OWNERS_BUCKET}`, { max_msgs: 1, discard: DiscardPolicy.New });
  const waited: string[] = [];
  const fault = await t.throwsAsync(claimPartitions(nc, 'full', 'full', [10, 11, 12], (m) => waited.push(m)));
  t.false(fault instanceof ConfigError);
  t.regex(fault?.message ?? '', /cannot be read or written: .*maximum messages/);
  t.deepEqual(waited, [], 'not waited for');
  const kv = await bucket(nc);
  t.deepEqual(await Promise.all([10, 11, 12].map(async (p) => (await kv.get(`p${p}`))?.operation === 'PUT')), [false, false, false]);
});
