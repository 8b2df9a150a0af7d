// Residual traffic (SPEC §9.3): calls to non-active routes counted per principal and per day,
// summed durably at the owner of the route's partition, surviving a restart of the host.

import { join } from 'node:path';
import anyTest, { type TestFn } from 'ava';
import { loadConfig } from '../common/config.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost } from '../actors/host.js';
import { allRoutes } from '../gateway/app.js';
import { Authenticator } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import { LifecycleRegistry } from '../gateway/lifecycle.js';
import { createGateway } from '../gateway/pipeline.js';
import { commandsOf, MAX_COMMAND_BYTES, MAX_PENDING, UsageCounter, readUsage, summarize } from '../gateway/usage.js';
import { answerOf, removeDir, silentLog, tempDir, toRequest, token } from './helpers/edge-kit.js';
import { allPartitions } from '../common/partitions.js';
import { ApiError } from '../common/errors.js';
import { planUsageAdd, readUsage as readRows, USAGE, type UsageScan } from '../actors/usage.js';
import { Store } from '../storage/store.js';
import type { Bus } from '../common/bus.js';
import type { Command, UsageCount } from '../proto/messages.js';
import { packr } from '../common/nats-wire.js';

const test = anyTest as TestFn<{ dir: string }>;
const SECRET = 'usage-test-secret-0123456789abcdef';
const ROUTE = 'GET /v1/orders/{orderId}';
const ALL = allPartitions();

test.before(async (t) => {
  t.context = { dir: await tempDir('usage') };
});

test.after.always(async (t) => {
  await removeDir(t.context.dir);
});

test('calls to a deprecated route are counted per principal and per day, durably', async (t) => {
  const dataDir = join(t.context.dir, 'actors');
  const log = silentLog();
  let host = new ActorHost({ dataDir, partitions: ALL, mailboxLimit: 1000, log });
  let bus = new LocalBus(host, 5000);
  const clock = { now: Date.parse('2026-03-01T23:59:59Z') };
  const usage = new UsageCounter(bus, log);
  const registry = new LifecycleRegistry(() => clock.now, usage);
  const routes = allRoutes({}, registry);
  registry.bind(routes);
  registry.replace([{ method: 'GET', path: '/v1/orders/{orderId}', state: 'deprecated', deprecatedAt: '2026-01-01T00:00:00Z' }]);
  const gateway = createGateway({ routes, auth: new Authenticator(SECRET), bus: new BusClient(bus), config: loadConfig({ PORT: '0', DATA_DIR: t.context.dir }), log, lifecycle: registry });
  const get = async (sub: string | undefined, path = '/v1/orders/ord_ff00000000000000000000', tenant = 't1'): Promise<number> => {
    const headers: Record<string, string> = sub ? { authorization: `Bearer ${await token(SECRET, 'orders:read', { sub, tenant })}` } : {};
    return answerOf(await gateway.handle(toRequest({ method: 'GET', path, headers }))).status;
  };
  // Counted whatever the answer: 404 for alice, 401 for nobody.
  for (let i = 0; i < 3; i++) t.is(await get('alice'), 404);
  t.is(await get('bob'), 404);
  // Another tenant's caller of the same name is another caller.
  t.is(await get('bob', undefined, 't2'), 404);
  t.is(await get(undefined), 401);
  clock.now += 2000; // past midnight: a new day
  t.is(await get('alice'), 404);
  // Active routes are not counted.
  t.is(await get('carol', '/v2/orders/ord_ff00000000000000000000'), 404);
  await usage.close();
  gateway.close();
  await bus.close();
  await host.close();

  host = new ActorHost({ dataDir, partitions: ALL, mailboxLimit: 1000, log });
  bus = new LocalBus(host, 5000);
  try {
    const [route, ...others] = await readUsage(bus, { top: 10 });
    t.is(others.length, 0);
    t.is(route!.route, ROUTE);
    t.is(route!.total, 7);
    t.deepEqual(route!.callers, [
      { principal: '["t1","alice"]', count: 4, lastDay: '2026-03-02' },
      { principal: '["t1","bob"]', count: 1, lastDay: '2026-03-01' },
      { principal: '["t2","bob"]', count: 1, lastDay: '2026-03-01' },
      { principal: 'anonymous', count: 1, lastDay: '2026-03-01' },
    ]);
    const since = await readUsage(bus, { route: ROUTE, since: '2026-03-02', top: 10 });
    t.deepEqual(since[0]!.callers, [{ principal: '["t1","alice"]', count: 1, lastDay: '2026-03-02' }]);
    t.deepEqual(await readUsage(bus, { route: 'GET /v1/orders', top: 10 }), []);
  } finally {
    await bus.close();
    await host.close();
  }
});

test('flushes from several gateways add up at the owner', async (t) => {
  const log = silentLog();
  const host = new ActorHost({ dataDir: join(t.context.dir, 'many'), partitions: ALL, mailboxLimit: 1000, log });
  const bus = new LocalBus(host, 5000);
  try {
    const a = new UsageCounter(bus, log);
    const b = new UsageCounter(bus, log);
    const now = Date.parse('2026-05-01T10:00:00Z');
    for (let i = 0; i < 1000; i++) a.count(ROUTE, `p${i % 7}`, now);
    for (let i = 0; i < 500; i++) b.count(ROUTE, 'p0', now);
    b.count('POST /v1/orders', 'p1', now);
    await Promise.all([a.flush(), b.flush(), a.flush()]);
    a.count(ROUTE, 'p0', now);
    await a.close();
    await b.close();
    const read = await readUsage(bus, { top: 2 });
    t.is(read[0]!.route, ROUTE);
    t.is(read[0]!.total, 1501);
    t.deepEqual(read[0]!.callers.map((c) => [c.principal, c.count]), [['p0', 143 + 500 + 1], ['p1', 143]]);
    t.is(read[1]!.total, 1);
  } finally {
    await bus.close();
    await host.close();
  }
});

test('summaries put the busiest route and caller first', (t) => {
  const s = summarize(
    [
      { route: 'B', day: '2026-01-01', principal: 'x', count: 1 },
      { route: 'A', day: '2026-01-01', principal: 'y', count: 2 },
      { route: 'A', day: '2026-01-02', principal: 'y', count: 3 },
      { route: 'A', day: '2026-01-01', principal: 'z', count: 4 },
    ],
    1,
  );
  t.deepEqual(s, [
    { route: 'A', total: 9, callers: [{ principal: 'y', count: 5, lastDay: '2026-01-02' }] },
    { route: 'B', total: 1, callers: [{ principal: 'x', count: 1, lastDay: '2026-01-01' }] },
  ]);
});

test('while the owner is away, the counts held stay bounded, and none is lost: the overflow shares one count', async (t) => {
  let up = false;
  const received: UsageCount[] = [];
  const bus = {
    send: (cmd: Command) => {
      if (!up) return Promise.resolve({ ok: false as const, error: { code: 'unavailable' as const, detail: 'away' } });
      if (cmd.kind === 'usage.add') received.push(...cmd.counts);
      return Promise.resolve({ ok: true as const, value: null });
    },
  } as unknown as Bus;
  const usage = new UsageCounter(bus, silentLog());
  const now = Date.UTC(2026, 10, 24, 12);
  let calls = 0;
  // Three flushes' worth of distinct callers, each flush failing: 150,000 principals in all.
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < MAX_PENDING; i++, calls++) usage.count('GET /v1/orders', `p${round}-${i}`, now);
    await usage.flush();
  }
  up = true;
  await usage.flush();
  t.true(received.length <= MAX_PENDING + 1, `${received.length} counts sent`);
  t.is(received.reduce((n, c) => n + c.n, 0), calls, 'every call counted');
  t.true(received.some((c) => c.principal === '(others)'));
});

test('a flush larger than one bus message goes as several: counts held while the owner was away all arrive once it is back', async (t) => {
  // As NATS answers a command over its max_payload (1 MiB unless raised): refused, not cut.
  const MAX_PAYLOAD = 1024 * 1024;
  let up = false;
  const received: UsageCount[] = [];
  let largest = 0;
  const bus = {
    send: (cmd: Command) => {
      if (!up) return Promise.resolve({ ok: false as const, error: { code: 'unavailable' as const, detail: 'away' } });
      const bytes = packr.pack(cmd).length;
      largest = Math.max(largest, bytes);
      if (bytes > MAX_PAYLOAD) return Promise.resolve({ ok: false as const, error: { code: 'unavailable' as const, detail: 'The request is too large to forward.' } });
      if (cmd.kind === 'usage.add') received.push(...cmd.counts);
      return Promise.resolve({ ok: true as const, value: null });
    },
  } as unknown as Bus;
  const usage = new UsageCounter(bus, silentLog());
  const now = Date.UTC(2026, 10, 24, 12);
  // Principals as long as a token may make them: megabytes for the one route's partition.
  const long = 'x'.repeat(240);
  const principals = 20_000;
  for (let i = 0; i < principals; i++) usage.count(ROUTE, `["${long}","${long}${i}"]`, now);
  await usage.flush(); // the owner away: kept
  up = true;
  await usage.flush();
  t.true(largest <= MAX_PAYLOAD, `a command of ${largest} bytes`);
  t.is(received.length, principals);
  t.is(new Set(received.map((c) => c.principal)).size, principals, 'each count once');
  await usage.flush();
  t.is(received.length, principals, 'nothing left to send again');
});

test('commandsOf cuts counts in order into runs of at most MAX_COMMAND_BYTES, as full as they go, none empty', (t) => {
  const counts: UsageCount[] = Array.from({ length: 5000 }, (_, i) => ({ route: ROUTE, day: '2026-11-30', principal: `["t","${'é'.repeat(100)}${i}"]`, n: 1 }));
  const runs = commandsOf(counts);
  t.deepEqual(runs.flat(), counts, 'every count once, in order');
  const bytes = (run: UsageCount[]): number => run.reduce((n, c) => n + Buffer.byteLength(c.route) + Buffer.byteLength(c.principal) + c.day.length + 32, 0);
  for (const run of runs) t.true(run.length > 0 && bytes(run) <= MAX_COMMAND_BYTES, `${run.length} counts, ${bytes(run)} bytes`);
  // Full: no two neighbours would have fitted in one.
  const total = bytes(counts);
  t.true(runs.length <= Math.ceil(total / MAX_COMMAND_BYTES) + 1, `${runs.length} runs for ${total} bytes`);
  t.true(runs.length > 1);
  t.deepEqual(commandsOf([]), []);
});

test('a read walks each route from its since day, so a table larger than one read keeps its newest days, and a read past the bound fails rather than answer low', async (t) => {
  const dir = await tempDir('usage-scan');
  const store = Store.open(dir);
  t.teardown(async () => {
    await store.close();
    await removeDir(dir);
  });
  const table = store.table(USAGE);
  const day = (d: number): string => `2026-03-${String(d).padStart(2, '0')}`;
  const counts: UsageCount[] = [];
  for (let d = 1; d <= 30; d++) counts.push({ route: ROUTE, day: day(d), principal: 'a', n: 1 }, { route: ROUTE, day: day(d), principal: 'b', n: 2 });
  for (let d = 26; d <= 30; d++) counts.push({ route: 'GET /v1/orders', day: day(d), principal: 'c', n: 3 });
  await store.commit(planUsageAdd({ kind: 'usage.add', tenant: '', partition: 0, counts }, table).writes);
  const scan: UsageScan = (range) => store.scan(table, { ...range, reverse: false });
  const MAX = 10;
  const read = (q: { route?: string; since?: string }): { day: string; route: string }[] => readRows({ kind: 'usage.read', ...q }, scan, table, MAX);

  // 65 rows in all, 10 a read: the newest five days of one route fill the read exactly.
  const newest = read({ route: ROUTE, since: day(26) });
  t.is(newest.length, 10);
  t.deepEqual([...new Set(newest.map((r) => r.day))], [day(26), day(27), day(28), day(29), day(30)]);
  // Every route, each from its own since day.
  const all = read({ since: day(28) });
  t.deepEqual(all.map((r) => `${r.route} ${r.day}`).sort(), [
    `GET /v1/orders ${day(28)}`, `GET /v1/orders ${day(29)}`, `GET /v1/orders ${day(30)}`,
    `${ROUTE} ${day(28)}`, `${ROUTE} ${day(28)}`, `${ROUTE} ${day(29)}`, `${ROUTE} ${day(29)}`, `${ROUTE} ${day(30)}`, `${ROUTE} ${day(30)}`,
  ].sort());
  // More rows than a read walks: refused, never a partial (low) sum.
  for (const q of [{ route: ROUTE, since: day(25) }, { since: day(26) }, {}]) {
    const err = t.throws(() => read(q), { instanceOf: ApiError }, JSON.stringify(q));
    t.is(err?.slug, 'payload-too-large');
    t.regex(err?.message ?? '', /more than 10 rows on one node; name a route or a later since/);
  }
});
