// Diagnostic for bench/webhook-fanout.ts: where a fan-out's time and CPU go. One event to 1,000
// endpoints on a receiver in this process, BENCH_ROUNDS rounds (default 40) 100 ms apart; each
// round prints when the order's POST was answered and when the 1st, 100th, 500th and last
// delivery arrived (ms after the POST was sent); at the end, the CPU each thread of the service
// spent per 1,000 deliveries over all rounds but the first quarter (warm-up). The main thread is
// the one whose id is the pid; the others are V8's workers (GC, compilation), libuv's pool
// (LMDB's commits and syncs), lmdb-js and the signing pool. No baseline: compare builds or
// node options (BENCH_SERVICE_NODE_ARGS) run after run.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { mintToken } from '../gateway/auth.js';
import { call, closeHttp, pool } from './lib/http.js';
import { threadCpuSeconds, threadNames } from './lib/proc.js';
import { genericTable } from './lib/report.js';
import { startService } from './lib/servers.js';
import { benchSecret } from './lib/token.js';

const ENDPOINTS = 1000;
const ROUNDS = Math.max(4, Number(process.env.BENCH_ROUNDS ?? 40));
const WARM = Math.floor(ROUNDS / 4);

const arrivals: number[] = [];
const receiver = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    arrivals.push(performance.now());
    res.writeHead(204).end();
  });
});
receiver.keepAliveTimeout = 30_000;
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
const service = await startService({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: '1', LOG_LEVEL: 'error' } });

try {
  const token = await mintToken(benchSecret, { sub: 'bench', tenant: 'bench-hooks', scope: 'orders:write webhooks:write' });
  const json = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  await pool(ENDPOINTS, 32, async (i) => {
    const r = await call(`${service.url}/v1/webhook-endpoints`, { method: 'POST', headers: json, body: JSON.stringify({ endpointUrl: `${receiverUrl}/hook/${i}`, eventTypes: ['order.created'] }) });
    if (r.status !== 201) throw new Error(`POST /v1/webhook-endpoints answered ${r.status}`);
  });
  const order = JSON.stringify({ currency: 'EUR', note: 'fan-out', metadata: { source: 'bench' } });
  const pid = service.procs[0]!.pid;
  let before = new Map<number, number>();
  const rows: (string | number)[][] = [];
  for (let r = 0; r < ROUNDS; r++) {
    if (r === WARM) before = threadCpuSeconds(pid);
    arrivals.length = 0;
    const t0 = performance.now();
    const answer = await call(`${service.url}/v1/orders`, { method: 'POST', headers: json, body: order });
    if (answer.status !== 201) throw new Error(`POST /v1/orders answered ${answer.status}`);
    const answered = performance.now() - t0;
    const end = t0 + 30_000;
    while (arrivals.length < ENDPOINTS) {
      if (performance.now() > end) throw new Error(`round ${r}: ${arrivals.length} of ${ENDPOINTS} deliveries within 30 s`);
      await sleep(5);
    }
    const at = (n: number): string => (arrivals[n - 1]! - t0).toFixed(1);
    rows.push([r + 1, answered.toFixed(1), at(1), at(100), at(500), at(ENDPOINTS)]);
    await sleep(100);
  }
  const after = threadCpuSeconds(pid);
  const names = threadNames(pid);
  console.log(`\n== webhook-fanout-threads ==  one event to ${ENDPOINTS} endpoints, ${ROUNDS} rounds`);
  console.log(genericTable(['round', 'POST answered ms', '1st ms', '100th ms', '500th ms', 'last ms'], rows));
  const perK = (s: number): number => Math.round(((s * 1000) / ((ROUNDS - WARM) * ENDPOINTS)) * 1000 * 10) / 10;
  const threads = [...after]
    .map(([tid, s]) => ({ tid, ms: perK(s - (before.get(tid) ?? 0)) }))
    .filter((x) => x.ms > 0)
    .sort((a, b) => b.ms - a.ms);
  const label = (tid: number): string => `${tid} ${tid === pid ? '(main)' : `(${names.get(tid) ?? '?'})`}`;
  console.log(genericTable(['thread', 'CPU ms per 1,000 deliveries'], threads.map((x) => [label(x.tid), x.ms])));
  const lasts = rows.slice(WARM).map((r) => Number(r[5])).sort((a, b) => a - b);
  console.log(`  service CPU per 1,000 deliveries: ${threads.reduce((n, x) => n + x.ms, 0).toFixed(1)} ms; median last arrival ${lasts[Math.floor(lasts.length / 2)]} ms after the POST`);
} finally {
  await service.stop();
  receiver.close();
  await closeHttp();
}
