// Scenario: what the lifecycle check and residual-traffic counting cost a GET of one order
// (issue 6 target: at most 5%). Two service processes from the same build, measured in
// interleaved rounds: one with no lifecycle entries (every request misses one Map lookup), one
// whose DEPRECATIONS_FILE deprecates GET /v1/orders/{orderId} (every request builds the
// Deprecation/Sunset/Link headers, counts the caller, and the counts are flushed to LMDB once a
// second).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { call, closeHttp } from './lib/http.js';
import { createOrder } from './lib/orders.js';
import { compare, finish, only, printRun, settings, type Plan } from './lib/scenario.js';
import { startService, type Subject } from './lib/servers.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'lifecycle-get';
const ACTIVE = 'GET order, route active';
const DEPRECATED = 'GET order, route sunsetting + counted';
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();
const auth = { authorization: `Bearer ${token}` };

const dir = mkdtempSync(join(tmpdir(), 'bench-lifecycle-'));
const file = join(dir, 'deprecations.json');
writeFileSync(
  file,
  JSON.stringify([
    {
      method: 'GET',
      path: '/v1/orders/{orderId}',
      state: 'sunsetting',
      deprecatedAt: '2026-01-01T00:00:00Z',
      sunsetAt: '2030-01-01T00:00:00Z',
      successor: '/v2/orders/{orderId}',
      guide: '/docs/migration-v1-v2',
    },
  ]),
);

try {
  // The subjects started with the entry; compare() prepares and measures both in interleaved rounds.
  const withEntry = new WeakSet<Subject>();
  const rows = await compare(
    only([
      { kind: 'service', start: () => startService() },
      {
        kind: 'service',
        start: async () => {
          const subject = await startService({ env: { DEPRECATIONS_FILE: file } });
          withEntry.add(subject);
          return subject;
        },
      },
    ]),
    async (subject): Promise<Plan[]> => {
      const deprecated = withEntry.has(subject);
      const { path } = await createOrder(subject.url, token);
      const probe = await call(`${subject.url}${path}`, { headers: auth });
      if ((probe.headers.deprecation !== undefined) !== deprecated) throw new Error(`Deprecation header ${probe.headers.deprecation ?? 'absent'} on the ${deprecated ? 'deprecated' : 'active'} service`);
      return [{ scenario: deprecated ? DEPRECATED : ACTIVE, request: { method: 'GET', paths: [path], headers: auth, expectStatus: 200 } }];
    },
    s,
    SCENARIO,
  );
  finish(SCENARIO, s, rows, [
    { label: 'lifecycle check + counting costs <= 5% of GET order rps', server: 'service', scenario: DEPRECATED, metric: 'ratioVsScenario', baseline: ACTIVE, op: '>=', value: 0.95 },
  ]);
} finally {
  rmSync(dir, { recursive: true, force: true });
  await closeHttp();
}
