// Scenario: what an Idempotency-Key costs (issue targets): a POST with a fresh key against a plain
// POST, and a replay (the same key and body every time, so every request after the first is
// answered from the stored result) against a GET of one order. All four run against the service
// in the same run, so the figures are ratios between them. The same four run against the cluster
// too (gateway, one actor node, nats-server), where a keyed request's bus calls each cross NATS;
// the targets are the embedded figures. Bare uWS answers the replay and the GET with fixed bytes,
// for what the POST's reading alone costs (no target).
import { closeHttp } from './lib/http.js';
import { ORDER_BODY } from './lib/fixtures.js';
import { createOrder } from './lib/orders.js';
import { compare, finish, only, printRun, settings, type Request } from './lib/scenario.js';
import { startCeiling, startCluster, startService } from './lib/servers.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'idempotency';
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();
const auth = { authorization: `Bearer ${token}` };
const post = { ...auth, 'content-type': 'application/json' };

const replay: Request = { method: 'POST', paths: ['/v1/orders'], headers: { ...post, 'idempotency-key': 'bench-replay' }, body: ORDER_BODY, expectStatus: 201 };

const rows = await compare(
  only([
    // The same replay and GET requests answered by bare uWS with fixed bytes: what reading the
    // POST's longer head and its body costs uWS before any code of the service runs.
    { kind: 'uws-ceiling', start: startCeiling },
    { kind: 'service', start: () => startService() },
    { kind: 'service-cluster', start: () => startCluster(token) },
  ]),
  async (subject) => {
    if (subject.kind === 'uws-ceiling') {
      return [
        { scenario: 'post replay', request: replay },
        { scenario: 'get order', request: { method: 'GET', paths: ['/v1/orders/ord_ceiling'], headers: auth, expectStatus: 200 } },
      ];
    }
    const order = await createOrder(subject.url, token);
    return [
      // The plain POST gets a fresh header too (one the service ignores), so the generator does the
      // same work per request on both sides and the ratio is the service's alone.
      {
        scenario: 'post plain',
        request: { method: 'POST', paths: ['/v1/orders'], headers: post, body: ORDER_BODY, expectStatus: 201, uniqueHeader: 'x-request-id' },
      },
      {
        scenario: 'post keyed',
        request: { method: 'POST', paths: ['/v1/orders'], headers: post, body: ORDER_BODY, expectStatus: 201, uniqueHeader: 'idempotency-key' },
      },
      { scenario: 'post replay', request: replay },
      { scenario: 'get order', request: { method: 'GET', paths: [order.path], headers: auth, expectStatus: 200 } },
    ];
  },
  s,
  SCENARIO,
);

// No target: how far uWS alone sets a replay behind a GET, beside how far the service's replay is.
const rps = (server: string, scenario: string): number | undefined => rows.find((r) => r.server === server && r.scenario === scenario)?.result?.rps;
const replayVsGet = (server: string): number | null => {
  const [replayed, got] = [rps(server, 'post replay'), rps(server, 'get order')];
  return replayed !== undefined && got !== undefined ? replayed / got : null;
};
const structural = { ceilingReplayVsGet: replayVsGet('uws-ceiling'), serviceReplayVsGet: replayVsGet('service') };

finish(SCENARIO, s, rows, [
  // "costs at most 1.2x" in time per request is at least 1/1.2 = 0.83x in requests per second.
  { label: 'keyed POST >= 0.83x plain POST rps (costs <= 1.2x)', server: 'service', scenario: 'post keyed', metric: 'ratioVsScenario', baseline: 'post plain', op: '>=', value: 1 / 1.2 },
  { label: 'replayed POST >= 1.0x GET rps', server: 'service', scenario: 'post replay', metric: 'ratioVsScenario', baseline: 'get order', op: '>=', value: 1 },
], structural);
if (structural.ceilingReplayVsGet !== null) {
  const service = structural.serviceReplayVsGet === null ? '' : `; the service's replay ${structural.serviceReplayVsGet.toFixed(2)}x its GET`;
  console.log(`  bare uWS answers the replay's request at ${structural.ceilingReplayVsGet.toFixed(2)}x the rate of the GET's${service}`);
}
await closeHttp();
