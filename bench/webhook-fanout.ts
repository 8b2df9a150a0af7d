// Scenario: one event fanned out to 1,000 webhook endpoints on one local receiver (issue 5).
// Measured end to end, from the write that emits the event to the receiver counting the last
// delivery: the outbox, the fan-out into durable delivery records, rendering, signing (batched),
// the POSTs and each outcome's commit. Baseline, same run: the dispatcher's own HTTP client
// (actors/webhook-send.ts) POSTing the same number of unsigned bodies of the same size to the
// same receiver, from this process, with nothing stored.
//
// Targets: >= 10,000 signed deliveries/s, and >= 0.5x the unsigned baseline.
//
// Wall-clock rates on a shared 2-core machine move with whatever else runs; CPU time moves less.
// So each phase also reports CPU ms per 1,000 deliveries: the service process (all its threads:
// the HTTP write, fan-out, signing pool, LMDB, the client) for the signed ones, this process
// (the client alone) for the unsigned ones, and the receiver in both.
import { setTimeout as sleep } from 'node:timers/promises';
import { WebhookSender } from '../actors/webhook-send.js';
import { mintToken } from '../gateway/auth.js';
import { call, closeHttp, pool } from './lib/http.js';
import { benchEntry } from './lib/paths.js';
import { cpuSeconds, startProcess } from './lib/proc.js';
import { genericTable, writeResults } from './lib/report.js';
import type { TargetOutcome } from './lib/scenario.js';
import { startService } from './lib/servers.js';
import { benchSecret } from './lib/token.js';

const SCENARIO = 'webhook-fanout';
const ENDPOINTS = Number(process.env.BENCH_WEBHOOK_ENDPOINTS ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const BURST = Number(process.env.BENCH_WEBHOOK_BURST ?? 10);

console.log(`\n== ${SCENARIO} ==  ${ENDPOINTS} endpoints on one receiver, ${ROUNDS} single-event rounds and a burst of ${BURST} events`);

const receiverCmd = benchEntry('baselines/webhook-receiver.js');
const receiver = await startProcess({ name: 'webhook-receiver', ...receiverCmd, env: { PORT: '0', HOST: '127.0.0.1' } });
const service = await startService({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: '1', LOG_LEVEL: 'error' } });

/** The receiver's count and the time (epoch ms) its last request arrived. */
async function counted(): Promise<{ count: number; at: number }> {
  const [count, at] = (await call(`${receiver.url}/count`)).body.split(' ').map(Number);
  return { count: count!, at: at! };
}

async function received(): Promise<number> {
  return (await counted()).count;
}

/** Epoch ms, comparable with the receiver's clock (same machine). */
const clock = (): number => performance.timeOrigin + performance.now();

/** Waits until the receiver has counted `n`; when the n-th request arrived (epoch ms). */
async function reach(n: number, limitMs = 120_000): Promise<number> {
  const end = clock() + limitMs;
  for (;;) {
    const c = await counted();
    if (c.count >= n) return c.at;
    if (clock() > end) throw new Error(`the receiver counted ${c.count} of ${n} within ${limitMs} ms`);
    await sleep(20);
  }
}

try {
  const token = await mintToken(benchSecret, { sub: 'bench', tenant: 'bench-hooks', scope: 'orders:write webhooks:write webhooks:read events:read' });
  const json = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  await pool(ENDPOINTS, 32, async (i) => {
    const r = await call(`${service.url}/v1/webhook-endpoints`, { method: 'POST', headers: json, body: JSON.stringify({ endpointUrl: `${receiver.url}/hook/${i}`, eventTypes: ['order.created'] }) });
    if (r.status !== 201) throw new Error(`POST /v1/webhook-endpoints answered ${r.status}: ${r.body.slice(0, 200)}`);
  });
  const order = JSON.stringify({ currency: 'EUR', note: 'fan-out', metadata: { source: 'bench' } });
  const emit = async (): Promise<void> => {
    const r = await call(`${service.url}/v1/orders`, { method: 'POST', headers: json, body: order });
    if (r.status !== 201) throw new Error(`POST /v1/orders answered ${r.status}`);
  };

  // Warm-up: one full fan-out (JIT, sockets, the signing pool).
  let base = await received();
  await emit();
  await reach(base + ENDPOINTS);

  const servicePid = service.procs[0]!.pid;
  const cpu = (): { service: number; receiver: number; bench: number } => ({
    service: cpuSeconds(servicePid),
    receiver: cpuSeconds(receiver.pid),
    bench: process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6,
  });
  /** CPU ms per 1,000 deliveries of each process since `from`. */
  const perK = (from: ReturnType<typeof cpu>, n: number): { service: number; receiver: number; bench: number } => {
    const to = cpu();
    const k = (a: number, b: number): number => Math.round(((b - a) * 1e6) / n);
    return { service: k(from.service, to.service), receiver: k(from.receiver, to.receiver), bench: k(from.bench, to.bench) };
  };

  const single: number[] = [];
  const singleCpu0 = cpu();
  for (let r = 0; r < ROUNDS; r++) {
    base = await received();
    const t0 = clock();
    await emit();
    single.push((ENDPOINTS / (await reach(base + ENDPOINTS) - t0)) * 1000);
  }
  const singleCpu = perK(singleCpu0, ROUNDS * ENDPOINTS);
  base = await received();
  const burstCpu0 = cpu();
  const b0 = clock();
  await Promise.all(Array.from({ length: BURST }, emit));
  const burst = ((BURST * ENDPOINTS) / ((await reach(base + BURST * ENDPOINTS)) - b0)) * 1000;
  const burstCpu = perK(burstCpu0, BURST * ENDPOINTS);

  // The body a delivery carries, to size the unsigned baseline alike.
  const events = await call(`${service.url}/v1/events?limit=1`, { headers: json });
  const sample = JSON.stringify((JSON.parse(events.body) as { data: unknown[] }).data[0]);
  const sender = new WebhookSender({ timeoutMs: 10_000 });
  const address = { address: '127.0.0.1', family: 4 as const };
  const unsignedRound = async (n: number): Promise<number> => {
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: n }, async (_, i) => {
        const res = await sender.send(new URL(`${receiver.url}/hook/${i % ENDPOINTS}`), [address], {}, sample);
        if (res.status !== 204) throw new Error(`unsigned POST: ${res.status ?? res.error}`);
      }),
    );
    return (n / (performance.now() - t0)) * 1000;
  };
  await unsignedRound(ENDPOINTS); // warm-up
  const unsigned: number[] = [];
  const unsignedCpu0 = cpu();
  for (let r = 0; r < ROUNDS; r++) unsigned.push(await unsignedRound(ENDPOINTS));
  const unsignedCpu = perK(unsignedCpu0, ROUNDS * ENDPOINTS);
  const unsignedBurstCpu0 = cpu();
  const unsignedBurst = await unsignedRound(BURST * ENDPOINTS);
  const unsignedBurstCpu = perK(unsignedBurstCpu0, BURST * ENDPOINTS);
  sender.close();

  const best = (xs: number[]): number => Math.max(...xs);
  const rows = [
    ['one event to 1,000 endpoints, signed, end to end', Math.round(best(single)), single.map((x) => Math.round(x)).join(' ')],
    [`${BURST} events to 1,000 endpoints, signed, end to end`, Math.round(burst), ''],
    ['1,000 unsigned POSTs, same client and receiver', Math.round(best(unsigned)), unsigned.map((x) => Math.round(x)).join(' ')],
    [`${BURST * ENDPOINTS} unsigned POSTs, same client and receiver`, Math.round(unsignedBurst), ''],
  ];
  console.log(genericTable(['what', 'deliveries/s (best)', 'rounds'], rows));
  console.log(
    genericTable(
      ['CPU ms per 1,000 deliveries', 'sender', 'receiver'],
      [
        ['signed, one event at a time (service process)', singleCpu.service, singleCpu.receiver],
        [`signed, ${BURST} events at once (service process)`, burstCpu.service, burstCpu.receiver],
        ['unsigned, 1,000 at a time (client alone)', unsignedCpu.bench, unsignedCpu.receiver],
        [`unsigned, ${BURST * ENDPOINTS} at once (client alone)`, unsignedBurstCpu.bench, unsignedBurstCpu.receiver],
      ],
    ),
  );
  const ratio = best(single) / best(unsigned);
  const burstRatio = burst / unsignedBurst;
  const targets: TargetOutcome[] = [
    { label: 'one event to 1,000 endpoints >= 10,000 signed deliveries/s', measured: best(single), pass: best(single) >= 10_000 },
    { label: 'signed fan-out >= 0.5x unsigned POSTs (one event)', measured: ratio, pass: ratio >= 0.5 },
    { label: `signed fan-out >= 0.5x unsigned POSTs (${BURST} events)`, measured: burstRatio, pass: burstRatio >= 0.5 },
  ];
  for (const t of targets) console.log(`  target ${t.pass ? 'PASS' : 'FAIL'}  ${t.label}  (measured ${t.measured!.toFixed(2)})`);
  console.log(`  written to ${writeResults(SCENARIO, { endpoints: ENDPOINTS, single, burst, unsigned, unsignedBurst, cpuMsPerThousand: { single: singleCpu, burst: burstCpu, unsigned: unsignedCpu, unsignedBurst: unsignedBurstCpu }, bodyBytes: sample.length, targets })}`);
} finally {
  await service.stop();
  await receiver.stop();
  await closeHttp();
}
