// Scenario: the lifecycle check and residual-traffic counting measured where they run, in the
// gateway's `handle()`, with no sockets and no load generator: GET of one order through the
// whole pipeline (auth from the token cache, route, lifecycle, read, render, ETag) in a loop,
// with the route active and then sunsetting (Deprecation, Sunset, Link, counted), alternating
// in rounds. The HTTP figure (lifecycle-get.ts) shares two cores with wrk and swings ±30% from
// round to round; this one isolates the cost the target is about. The pipeline is part of every
// request's cost, so the share measured here bounds the share of HTTP throughput from above.
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
import { LifecycleRegistry } from '../gateway/lifecycle.js';
import { UsageCounter } from '../gateway/usage.js';
import { createGateway } from '../gateway/pipeline.js';
import { writeResults } from './lib/report.js';
import { allPartitions } from '../common/partitions.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const CALLS = Number(process.env.BENCH_CALLS ?? 100_000);
const SECRET = 'lifecycle-handle-bench-secret-0123456789';

const dir = mkdtempSync(join(tmpdir(), 'bench-lifecycle-handle-'));
const log = createLogger('silent', 'bench');
const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 1000, log });
const bus = new LocalBus(host, 5000);
// The real counter: counts in memory, flushed to the actor host every second as usage.add.
const usage = new UsageCounter(bus, log);
usage.start();
const lifecycle = new LifecycleRegistry(Date.now, usage);
const routes = allRoutes({}, lifecycle);
lifecycle.bind(routes);
const config = loadConfig({ DATA_DIR: dir, RATE_LIMIT_PER_SECOND: '10000000', RATE_LIMIT_BURST: '10000000' });
const gateway = createGateway({ lifecycle, routes, auth: new Authenticator(SECRET), bus: new BusClient(bus), config, log });
const token = await mintToken(SECRET, { sub: 'bench', tenant: 'bench', scope: 'orders:read orders:write' });
const headers = { authorization: `Bearer ${token}` };
const req = (method: string, path: string, body?: string): GatewayRequest => ({
  method,
  path,
  query: '',
  headers: body ? { ...headers, 'content-type': 'application/json' } : headers,
  body: body ? Buffer.from(body) : undefined,
  remoteAddress: '127.0.0.1',
});

const created = await gateway.handle(req('POST', '/v1/orders', '{"currency":"EUR","items":[]}'));
if (created.status !== 201) throw new Error(`create answered ${created.status}`);
const path = created.headers.location!;
const entry = {
  method: 'GET',
  path: '/v1/orders/{orderId}',
  state: 'sunsetting',
  deprecatedAt: '2026-01-01T00:00:00Z',
  sunsetAt: '2027-01-01T00:00:00Z',
  successor: '/v2/orders/{orderId}',
  guide: '/docs/migration-v1-v2',
};

async function measure(): Promise<number> {
  const get = req('GET', path);
  const started = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) {
    const res = await gateway.handle(get);
    if (res.status !== 200) throw new Error(`GET answered ${res.status}`);
  }
  return Number(process.hrtime.bigint() - started) / 1e3 / CALLS; // µs per call
}

// Warm up both paths.
await measure();
lifecycle.replace([entry]);
await measure();

const pairs: { active: number; sunsetting: number }[] = [];
for (let round = 0; round < ROUNDS; round++) {
  // Alternate which half goes first, so drift over time falls on both alike.
  const order = round % 2 === 0 ? (['active', 'sunsetting'] as const) : (['sunsetting', 'active'] as const);
  const pair = { active: 0, sunsetting: 0 };
  for (const state of order) {
    lifecycle.replace(state === 'active' ? [] : [entry]);
    pair[state] = await measure();
  }
  pairs.push(pair);
}
const check = await gateway.handle(req('GET', path));
if (!check.headers.sunset && !('deprecation' in check.headers)) {
  // The last half may have been active; the sunsetting half must have carried the headers.
  lifecycle.replace([entry]);
  const again = await gateway.handle(req('GET', path));
  if (!again.headers.deprecation || !again.headers.sunset) throw new Error('the sunsetting entry did not apply');
}

const middle = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const median = middle(pairs.map((p) => p.sunsetting / p.active - 1));
const extraUs = middle(pairs.map((p) => p.sunsetting - p.active));
console.log(`\n== lifecycle-handle == ${ROUNDS} rounds of ${CALLS} in-process GETs per state`);
for (const p of pairs) console.log(`  active ${p.active.toFixed(2)} µs/call, sunsetting ${p.sunsetting.toFixed(2)} µs/call, overhead ${((p.sunsetting / p.active - 1) * 100).toFixed(1)}%`);
console.log(`  median overhead ${(median * 100).toFixed(1)}% of the in-process pipeline (${extraUs.toFixed(2)} µs a call); an HTTP GET costs the server several times the pipeline (sockets, uWS), so its share of HTTP throughput is smaller`);
writeResults('lifecycle-handle', {
  pairs,
  medianOverhead: median,
  medianExtraMicros: extraUs,
});
gateway.close();
await usage.close();
await host.close();
rmSync(dir, { recursive: true, force: true });
