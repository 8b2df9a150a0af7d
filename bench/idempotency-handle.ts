// Scenario: what an Idempotency-Key costs where the gateway and the owner spend it, with no sockets
// and no load generator (the HTTP figures in idempotency.ts share two cores with wrk and swing by
// a third from round to round). Two pairs, alternating in rounds:
// - a keyed create against a plain one, 64 at a time, durable, in CPU time per request over
//   every thread of the process (LMDB's write thread included);
// - a replay (the same key and body every time, answered from the gateway's kept answer) against
//   a GET of one order, one at a time, in wall time per call of `handle()`.
// The HTTP target (a replay at least as fast as a GET) also pays uWS for reading the POST's
// longer request and body; the second pair shows what the pipeline itself adds.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ActorHost } from '../actors/host.js';
import { loadConfig } from '../common/config.js';
import { LocalBus } from '../common/local-bus.js';
import { createLogger } from '../common/log.js';
import { allRoutes } from '../gateway/app.js';
import { Authenticator, mintToken } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import type { GatewayRequest } from '../gateway/http-types.js';
import { createGateway } from '../gateway/pipeline.js';
import { ORDER_BODY } from './lib/fixtures.js';
import { writeResults } from './lib/report.js';
import { allPartitions } from '../common/partitions.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const WRITES = Number(process.env.BENCH_WRITES ?? 10_000);
const CALLS = Number(process.env.BENCH_CALLS ?? 100_000);
const CONCURRENCY = 64;
const SECRET = 'idempotency-handle-bench-secret-0123456789';

const dir = mkdtempSync(join(tmpdir(), 'bench-idempotency-handle-'));
const log = createLogger('silent', 'bench');
const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 1000, log });
const config = loadConfig({ DATA_DIR: dir, RATE_LIMIT_PER_SECOND: '10000000', RATE_LIMIT_BURST: '10000000' });
const gateway = createGateway({ routes: allRoutes(), auth: new Authenticator(SECRET), bus: new BusClient(new LocalBus(host, 5000)), config, log });
const token = await mintToken(SECRET, { sub: 'bench', tenant: 'bench', scope: 'orders:read orders:write' });
// The headers wrk sends, and what each request kind adds to them.
const base = { authorization: `Bearer ${token}`, host: '127.0.0.1:8080' };
const body = Buffer.from(ORDER_BODY);
const post = (extra: Record<string, string>): GatewayRequest => ({
  method: 'POST',
  path: '/v1/orders',
  query: '',
  headers: { ...base, 'content-type': 'application/json', 'content-length': String(body.length), ...extra },
  body,
  remoteAddress: '',
});

let serial = 0;
/** CPU µs per durable create, CONCURRENCY at a time; each request has a header of its own, as in idempotency.ts. */
async function writes(header: 'idempotency-key' | 'x-request-id'): Promise<number> {
  let left = WRITES;
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (left-- > 0) {
        const res = await gateway.handle(post({ [header]: `bench-${serial++}` }));
        if (res.status !== 201) throw new Error(`create answered ${res.status}`);
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / WRITES;
}

/** Wall µs per call of handle(), one at a time. */
async function calls(req: GatewayRequest, status: number): Promise<number> {
  const started = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) {
    const res = await gateway.handle(req);
    if (res.status !== status) throw new Error(`${req.method} answered ${res.status}`);
  }
  return Number(process.hrtime.bigint() - started) / 1e3 / CALLS;
}

const replay = post({ 'idempotency-key': 'bench-replay' });
const created = await gateway.handle(replay);
if (created.status !== 201) throw new Error(`create answered ${created.status}`);
const get: GatewayRequest = { method: 'GET', path: created.headers.location!, query: '', headers: base, body: undefined, remoteAddress: '' };
const replayed = await gateway.handle(replay);
if (replayed.headers['idempotent-replayed'] !== 'true') throw new Error('the second request under the key was not a replay');

// Warm up every path.
await writes('x-request-id');
await writes('idempotency-key');
await calls(get, 200);
await calls(replay, 201);

const rounds: { plainCpuUs: number; keyedCpuUs: number; getUs: number; replayUs: number }[] = [];
for (let round = 0; round < ROUNDS; round++) {
  // Alternate which of each pair goes first, so drift over time falls on both alike.
  const first = round % 2 === 0;
  const r = { plainCpuUs: 0, keyedCpuUs: 0, getUs: 0, replayUs: 0 };
  if (first) r.plainCpuUs = await writes('x-request-id');
  r.keyedCpuUs = await writes('idempotency-key');
  if (!first) r.plainCpuUs = await writes('x-request-id');
  if (first) r.getUs = await calls(get, 200);
  r.replayUs = await calls(replay, 201);
  if (!first) r.getUs = await calls(get, 200);
  rounds.push(r);
}

const middle = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const keyedRatio = middle(rounds.map((r) => r.keyedCpuUs / r.plainCpuUs));
const replayRatio = middle(rounds.map((r) => r.replayUs / r.getUs));
console.log(`\n== idempotency-handle == ${ROUNDS} rounds: ${WRITES} creates of each kind (${CONCURRENCY} at a time), ${CALLS} calls of each read`);
for (const r of rounds) {
  console.log(
    `  CPU per create: plain ${r.plainCpuUs.toFixed(1)} µs, keyed ${r.keyedCpuUs.toFixed(1)} µs (${(r.keyedCpuUs / r.plainCpuUs).toFixed(2)}x)` +
      ` | handle(): GET ${r.getUs.toFixed(2)} µs, replay ${r.replayUs.toFixed(2)} µs (${(r.replayUs / r.getUs).toFixed(2)}x)`,
  );
}
console.log(`  median: a keyed create costs ${keyedRatio.toFixed(2)}x a plain one in CPU; a replay's handle() takes ${replayRatio.toFixed(2)}x a GET's`);
writeResults('idempotency-handle', { rounds, medianKeyedCpuRatio: keyedRatio, medianReplayHandleRatio: replayRatio });
gateway.close();
await host.close();
rmSync(dir, { recursive: true, force: true });
