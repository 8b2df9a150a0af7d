// Scenario: a mixed soak. BENCH_SOAK_SECONDS (60) of load on the service in embedded mode from
// BENCH_CONNECTIONS (64) loops, each owning its own orders (about 80% reads, 20% writes: see
// lib/soak-workload.ts), beside a hostile-input stream at a bounded rate in a tenant of its own
// (lib/hostile.ts). Then every acknowledged write is checked against the server, and the
// server's resident memory at the start and the end is compared.
//
// Targets (issue 2): 0 errors other than 429/503 with Retry-After, 0 lost acknowledged writes,
// flat memory. Memory is judged on the anonymous part of the RSS: LMDB maps its file, and the
// file pages it touches count in RSS and grow with the data written (README, "RSS"); they are
// the kernel's page cache, not the process's own memory.
//
// There is no baseline server here (STYLE 11 is about throughput ratios): the figures that
// matter are counts (errors, lost writes) and the memory trend, which do not need one.
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { call, closeHttp } from './lib/http.js';
import { hostileCases, hostileTokens, judgeHostile, outcomeLabel, type HostileCase, type HostileContext, type HostileVerdict } from './lib/hostile.js';
import { cpuSeconds, rss, type Rss } from './lib/proc.js';
import { genericTable, writeResults } from './lib/report.js';
import type { TargetOutcome } from './lib/scenario.js';
import { serviceBuilt, startService, type Subject } from './lib/servers.js';
import { Tally, type KindRow } from './lib/soak-tally.js';
import { Worker, prng, send, verify, type OrderState, type Product, type Shared, type Verification } from './lib/soak-workload.js';
import { benchSecret, mintToken } from './lib/token.js';

const SCENARIO = 'soak';

function envNum(name: string, fallback: number): number {
  const raw = process.env[name];
  const n = raw === undefined || raw === '' ? fallback : Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got '${raw}'`);
  return n;
}

const settings = {
  seconds: envNum('BENCH_SOAK_SECONDS', 60),
  warmupSeconds: envNum('BENCH_WARMUP', 2),
  connections: Math.max(1, envNum('BENCH_CONNECTIONS', 64)),
  seedOrdersPerLoop: envNum('BENCH_SOAK_SEED_ORDERS', 10),
  liveCap: Math.max(4, envNum('BENCH_SOAK_LIVE', 60)),
  hostileRps: envNum('BENCH_SOAK_HOSTILE_RPS', 20),
  hostileInFlight: Math.max(1, envNum('BENCH_SOAK_HOSTILE_INFLIGHT', 32)),
  seed: envNum('BENCH_SOAK_SEED', Date.now() % 1_000_000),
  maxBodyBytes: envNum('MAX_BODY_BYTES', 1_048_576),
  requestTimeoutMs: 10_000,
  sampleEverySeconds: 10,
};
// Flat: the process's own memory at the end within 25% (+20 MB of slack for heap sizing) of
// what it held once warm.
// Judged from mid-run: the first half holds the warm-up (JIT, and caches filling to their fixed
// budgets, the rendering cache's 32M characters above all), which is growth that stops.
const FLAT = { factor: 1.1, slackMb: 10 };

console.log(
  `\n== ${SCENARIO} ==  ${settings.seconds} s, ${settings.connections} loops (+ hostile stream at ${settings.hostileRps}/s), ` +
    `RSS 'start' after ${settings.warmupSeconds} s, seed ${settings.seed}`,
);
if (!serviceBuilt()) throw new Error('dist/gateway/main.js not built (npx tsc -p .)');

// Bounded whatever happens: seeding, the load, the hostile stream's slowest case and the checks.
const guard = setTimeout(
  () => {
    console.error(`  [bench] ${SCENARIO} exceeded its time budget; stopping`);
    process.exit(1); // lib/proc.ts kills the server on exit
  },
  (settings.seconds + 300) * 1000,
);
guard.unref();

interface Sample extends Rss {
  phase: string;
  atS: number;
}

const token = await mintToken();
const hostileToken = await mintToken(benchSecret, 'hostile');
const subject: Subject = await startService();
const pid = subject.procs[0]?.pid ?? 0;
const pool = new Pool(subject.url, { connections: settings.connections, pipelining: 1 });
const hostilePool = new Pool(subject.url, { connections: 8, pipelining: 1 });
const samples: Sample[] = [];
let loadStartedAt = performance.now();
const sample = (phase: string): void => {
  try {
    samples.push({ phase, atS: Math.round((performance.now() - loadStartedAt) / 100) / 10, ...rss(pid) });
  } catch {
    // the server is gone; that is reported below
  }
};

try {
  // ---- seeding (not timed) ----
  const products: Product[] = [];
  for (let i = 0; i < 8; i++) {
    const price = 100 * (i + 1) + 99;
    const r = await call(`${subject.url}/v1/products`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: `soak product ${i}`, price, currency: 'EUR' }),
    });
    if (r.status !== 201) throw new Error(`seeding a product answered ${r.status}: ${r.body.slice(0, 200)}`);
    products.push({ id: (JSON.parse(r.body) as { id: string }).id, price });
  }
  const shared: Shared = { plainVariant: undefined, recentIds: [], recentKeys: [] };
  const tally = new Tally(Date.now());
  const runId = settings.seed.toString(36);
  const rand = prng(settings.seed);
  const workers = Array.from(
    { length: settings.connections },
    (_, i) => new Worker(i, { pool, token, products, tally, shared, liveCap: settings.liveCap, runId, timeoutMs: settings.requestTimeoutMs }, Math.floor(rand() * 2 ** 32)),
  );
  for (const w of workers) {
    if (settings.seedOrdersPerLoop === 0) break;
    const operations = Array.from({ length: settings.seedOrdersPerLoop }, (_, j) => ({ method: 'POST', body: { currency: 'EUR', note: `seed-${w.index}-${j}` } }));
    const r = await call(`${subject.url}/v1/orders/batch`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ operations }),
    });
    const results = r.status === 207 ? ((JSON.parse(r.body) as { results: { status: number; id?: string; etag?: string }[] }).results ?? []) : [];
    if (results.length !== operations.length || results.some((x) => x.status !== 201 || !x.id)) {
      throw new Error(`seeding orders answered ${r.status}: ${r.body.slice(0, 300)}`);
    }
    shared.plainVariant ??= /^"\d+-([A-Za-z0-9_-]+)"$/.exec(results[0]?.etag ?? '')?.[1];
    w.adopt(
      results.map((x, j): OrderState => ({ id: x.id!, version: 1, note: `seed-${w.index}-${j}`, status: 'pending', items: 0, total: 0, deleted: false, last: 'seed', resynced: false })),
    );
    shared.recentIds.push(...results.slice(0, 4).map((x) => x.id!));
  }
  const own = await send(hostilePool, hostileToken, { method: 'POST', path: '/v1/orders', headers: { 'content-type': 'application/json' }, body: '{"currency":"EUR"}' }, 10_000);
  if (own.status !== 201) throw new Error(`seeding the hostile tenant's order answered ${own.status}`);
  const hostile: HostileContext = {
    port: Number(new URL(subject.url).port),
    pool: hostilePool,
    token: hostileToken,
    secret: benchSecret,
    maxBodyBytes: settings.maxBodyBytes,
    ownOrder: (JSON.parse(own.text) as { id: string }).id,
    shared,
    timeoutMs: settings.requestTimeoutMs,
  };
  const cases = hostileCases(await hostileTokens(benchSecret));
  console.log(`  seeded ${products.length} products and ${workers.reduce((a, w) => a + w.orders.length, 0)} orders; ${cases.length} hostile cases`);

  // ---- the load ----
  loadStartedAt = performance.now();
  sample('seeded');
  const endAt = loadStartedAt + settings.seconds * 1000;
  let stopReason = '';
  const keepGoing = (): boolean => stopReason === '' && performance.now() < endAt;
  const cpu0 = cpuSeconds(pid);
  const benchCpu0 = process.cpuUsage();
  const warm = setTimeout(() => sample('start'), settings.warmupSeconds * 1000);
  const every = setInterval(() => {
    sample(`t+${Math.round((performance.now() - loadStartedAt) / 1000)}s`);
    const dead = subject.procs.find((p) => p.exited());
    if (dead) stopReason = `${dead.name} ${dead.exitInfo()}`;
  }, settings.sampleEverySeconds * 1000);
  const verdicts = new Map<string, Partial<Record<HostileVerdict, number>>>();
  const hostileRun = hostileStream(hostile, cases, tally, verdicts, keepGoing);
  await Promise.all(workers.map((w) => w.run(keepGoing)));
  const loadSeconds = (performance.now() - loadStartedAt) / 1000;
  clearTimeout(warm);
  clearInterval(every);
  sample('end');
  const serverCpuPct = Math.round(((cpuSeconds(pid) - cpu0) / loadSeconds) * 100);
  const benchCpu = process.cpuUsage(benchCpu0);
  const benchCpuPct = Math.round(((benchCpu.user + benchCpu.system) / 1e6 / loadSeconds) * 100);
  const skipped = await hostileRun;
  const dead = subject.procs.find((p) => p.exited());
  if (dead) stopReason ||= `${dead.name} ${dead.exitInfo()}`;
  if (stopReason) tally.error('server', 'read', 'server stopped', `${stopReason}\n${subject.procs[0]?.tail() ?? ''}`);

  // ---- after the load: every acknowledged write ----
  const verifyStarted = performance.now();
  const v = stopReason ? undefined : await verify(pool, token, workers, settings.requestTimeoutMs);
  const verifySeconds = (performance.now() - verifyStarted) / 1000;
  sample('after checks');

  report({ tally, loadSeconds, serverCpuPct, benchCpuPct, workers, verdicts, skipped, v, verifySeconds, stopReason });
} finally {
  clearTimeout(guard);
  await pool.close();
  await hostilePool.close();
  await closeHttp();
  await subject.stop();
}

/** The hostile cases in turn, one every 1/rate seconds, never more than a bound in flight. */
async function hostileStream(
  h: HostileContext,
  cases: HostileCase[],
  tally: Tally,
  verdicts: Map<string, Partial<Record<HostileVerdict, number>>>,
  keepGoing: () => boolean,
): Promise<number> {
  if (settings.hostileRps <= 0) return 0;
  const inFlight = new Set<Promise<void>>();
  const interval = 1000 / settings.hostileRps;
  let next = performance.now();
  let i = 0;
  let skipped = 0;
  const runOne = async (c: HostileCase): Promise<void> => {
    const t0 = performance.now();
    const outcome = await c.run(h).catch((err: unknown) => ({ closed: false, violation: `bench exception: ${String(err)}` }));
    tally.answer(c.name, 'hostile', outcomeLabel(outcome), performance.now() - t0);
    const { verdict, reason } = judgeHostile(c, outcome);
    const counts = verdicts.get(c.name) ?? {};
    counts[verdict] = (counts[verdict] ?? 0) + 1;
    verdicts.set(c.name, counts);
    if (verdict === 'violation') tally.error(c.name, 'hostile', `hostile: ${reason ?? ''}`, `expected ${c.expect.join(' or ')}`);
  };
  while (keepGoing()) {
    if (inFlight.size < settings.hostileInFlight) {
      const p: Promise<void> = runOne(cases[i++ % cases.length]!).finally(() => inFlight.delete(p));
      inFlight.add(p);
    } else {
      skipped++;
    }
    next += interval;
    await sleep(Math.max(0, next - performance.now()));
  }
  await Promise.all(inFlight);
  return skipped;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function statusText(statuses: Record<string, number>): string {
  return Object.entries(statuses)
    .map(([s, n]) => `${s}:${n}`)
    .join(' ');
}

function report(r: {
  tally: Tally;
  loadSeconds: number;
  serverCpuPct: number;
  benchCpuPct: number;
  workers: Worker[];
  verdicts: Map<string, Partial<Record<HostileVerdict, number>>>;
  skipped: number;
  v: Verification | undefined;
  verifySeconds: number;
  stopReason: string;
}): void {
  const { tally, loadSeconds, v } = r;
  const kinds = tally.rows(loadSeconds);
  const normal = kinds.filter((k) => k.group !== 'hostile');
  const hostileRows = kinds.filter((k) => k.group === 'hostile');
  const errorsOf = (rows: KindRow[]): number => rows.reduce((a, k) => a + k.errors, 0);
  const normalErrors = errorsOf(normal);
  const hostileErrors = errorsOf(hostileRows);

  console.log(`\n  normal loops: status counts per request kind over ${fmt(loadSeconds, 1)} s`);
  console.log(
    genericTable(
      ['kind', 'group', 'requests', 'rps', 'p50 ms', 'p99 ms', 'max ms', 'errors', 'statuses'],
      normal.map((k) => [k.kind, k.group, fmt(k.requests), fmt(k.rps), k.p50Ms.toFixed(2), k.p99Ms.toFixed(2), k.maxMs.toFixed(1), k.errors, statusText(k.statuses)]),
    ),
  );
  const groups = { read: tally.group('read', loadSeconds), write: tally.group('write', loadSeconds), hostile: tally.group('hostile', loadSeconds) };
  console.log(
    genericTable(
      ['group', 'requests', 'rps', 'p50 ms', 'p99 ms', 'max ms'],
      Object.entries(groups).map(([g, x]) => [g, fmt(x.requests), fmt(x.rps), x.p50Ms.toFixed(2), x.p99Ms.toFixed(2), x.maxMs.toFixed(1)]),
    ),
  );
  const shed = r.workers.reduce((a, w) => a + w.shed, 0);
  const resyncs = r.workers.reduce((a, w) => a + w.resyncs, 0);
  console.log(`  server cpu ${r.serverCpuPct}%, bench process cpu ${r.benchCpuPct}% (100 = one core); shed (429/503 with Retry-After) ${shed}; re-reads after an unknown outcome ${resyncs}`);

  console.log(`\n  hostile stream: ${fmt(groups.hostile.requests)} requests, ${r.skipped} ticks skipped at the in-flight bound`);
  console.log(
    genericTable(
      ['case', 'n', 'statuses', 'expected', 'other 4xx', 'closed (doc.)', 'violations', 'max ms'],
      hostileRows
        .sort((a, b) => a.kind.localeCompare(b.kind))
        .map((k) => {
          const c = r.verdicts.get(k.kind) ?? {};
          return [k.kind, k.requests, statusText(k.statuses), c.expected ?? 0, c['other 4xx'] ?? 0, c['closed (documented)'] ?? 0, c.violation ?? 0, k.maxMs.toFixed(1)];
        }),
    ),
  );

  console.log('\n  server RSS (MB): flat is judged on anon; file is LMDB pages mapped in, growing with the data written');
  console.log(genericTable(['phase', 't s', 'rss', 'anon', 'file'], samples.map((s) => [s.phase, s.atS.toFixed(1), s.rssMb.toFixed(1), s.anonMb.toFixed(1), s.fileMb.toFixed(1)])));
  const start = samples.find((s) => s.phase === 'start');
  const end = samples.find((s) => s.phase === 'end');
  // A leak grows for as long as the load runs; a cache filling to its budget flattens. The second
  // half of the run tells them apart whatever the warm-up was (printed, not a target).
  const half = samples.filter((s) => s.phase.startsWith('t+') && s.atS <= loadSeconds / 2).pop();
  if (half && end) {
    console.log(`  anon RSS over the second half of the load: ${half.anonMb} MB at ${half.atS} s, ${end.anonMb} MB at the end (${end.anonMb >= half.anonMb ? '+' : ''}${(end.anonMb - half.anonMb).toFixed(1)} MB)`);
  }

  if (v) {
    console.log(
      `\n  acknowledged writes: ${fmt(v.checked)} orders checked in ${fmt(r.verifySeconds, 1)} s (${fmt(v.resynced)} followed the server after an unknown outcome); ` +
        `${v.lost} lost; ${v.unlisted} missing from their status list, ${v.misfiled} listed under the wrong status; ` +
        `${v.unknownListed} listed orders no loop knows (creates whose answer was lost); ${v.checkErrors} check requests failed`,
    );
    for (const s of v.samples) console.log(`    lost ${s.id}: expected ${s.expected}; found ${s.found}`);
  } else {
    console.log(`\n  acknowledged writes: not checked (${r.stopReason})`);
  }

  if (tally.errors > 0) {
    console.log(`\n  errors: ${normalErrors} on the normal loops, ${hostileErrors} on the hostile stream; by reason:`);
    for (const [reason, n] of [...tally.reasons].sort((a, b) => b[1] - a[1])) console.log(`    ${n}  ${reason}`);
    console.log('  first samples:');
    for (const s of tally.samples.slice(0, 15)) console.log(`    [${s.atS}s] ${s.kind}: ${s.reason}: ${s.detail.split('\n')[0]}`);
    const tail = subject.procs[0]?.tail();
    if (tail) console.log(`  server's last output:\n${tail.split('\n').slice(-10).join('\n')}`);
  }

  const lost = v ? v.lost + v.unlisted + v.misfiled : null;
  const limit = half ? half.anonMb * FLAT.factor + FLAT.slackMb : undefined;
  const targets: TargetOutcome[] = [
    { label: '0 errors (normal loops and hostile stream; 429/503 with Retry-After excepted)', measured: tally.errors, pass: tally.errors === 0 },
    { label: `0 lost acknowledged writes (of ${v ? fmt(v.checked) : '?'} orders checked, and their status lists)`, measured: lost, pass: lost === null ? null : lost === 0 },
    {
      label: `flat memory: anon RSS at the end <= ${FLAT.factor} x mid-run + ${FLAT.slackMb} MB (start ${start?.anonMb ?? '?'} MB, mid-run ${half?.anonMb ?? '?'} MB, end ${end?.anonMb ?? '?'} MB)`,
      measured: end?.anonMb ?? null,
      pass: limit === undefined || !end ? null : end.anonMb <= limit,
    },
  ];
  console.log('');
  for (const t of targets) {
    const verdict = t.pass === null ? 'n/a ' : t.pass ? 'PASS' : 'FAIL';
    console.log(`  target ${verdict}  ${t.label}${t.measured === null ? '' : `  (measured ${t.measured})`}`);
  }
  const file = writeResults(SCENARIO, {
    settings: { ...settings, generator: 'undici (in the bench process)' },
    loadSeconds,
    serverCpuPct: r.serverCpuPct,
    benchCpuPct: r.benchCpuPct,
    groups,
    kinds,
    hostile: Object.fromEntries(r.verdicts),
    hostileSkipped: r.skipped,
    shed,
    resyncs,
    rss: samples,
    secondHalfAnonMb: half && end ? { from: half.anonMb, to: end.anonMb } : null,
    verification: v ?? null,
    errors: { total: tally.errors, normal: normalErrors, hostile: hostileErrors, reasons: Object.fromEntries(tally.reasons), samples: tally.samples },
    targets,
  });
  console.log(`  written to ${file}`);
}
