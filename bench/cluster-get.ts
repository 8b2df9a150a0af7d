// Scenario: GET one order in cluster mode: a gateway process and one actor node talking through
// a nats-server started on a random port (CONTRACT §1), all on this machine beside the load
// generator. The embedded service is measured too, to show what the NATS hop costs.
import { closeHttp } from './lib/http.js';
import { createOrder } from './lib/orders.js';
import { compare, finish, only, printRun, settings } from './lib/scenario.js';
import { startCeiling, startCluster, startFastify, startService } from './lib/servers.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'cluster-get';
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();

const rows = await compare(
  only([
    { kind: 'uws-ceiling', start: startCeiling },
    { kind: 'fastify-peer', start: startFastify },
    { kind: 'service', start: () => startService() },
    { kind: 'service-cluster', start: () => startCluster(token) },
  ]),
  async (subject) => {
    const { path } = await createOrder(subject.url, token);
    const headers = { authorization: `Bearer ${token}` };
    return [{ scenario: SCENARIO, request: { method: 'GET', paths: [path], headers, expectStatus: 200 } }];
  },
  s,
  SCENARIO,
);

finish(SCENARIO, s, rows, [
  { label: 'cluster GET >= 0.3x uWS ceiling', server: 'service-cluster', metric: 'ratioVsCeiling', op: '>=', value: 0.3 },
]);
await closeHttp();
