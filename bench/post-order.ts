// Scenario: POST one order (CONTRACT §6). For the service each 201 is durable (LMDB committed and
// flushed, ARCHITECTURE property 2); the Fastify peer only puts it in a Map, the ceiling stores
// nothing. Every request creates a new order.
import { closeHttp } from './lib/http.js';
import { ORDER_BODY } from './lib/fixtures.js';
import { compare, contenders, finish, printRun, settings } from './lib/scenario.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'post-order';
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();

const rows = await compare(
  contenders(),
  async () => [
    {
      scenario: SCENARIO,
      request: {
        method: 'POST',
        paths: ['/v1/orders'],
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: ORDER_BODY,
        expectStatus: 201,
      },
    },
  ],
  s,
  SCENARIO,
);

finish(SCENARIO, s, rows, [
  { label: 'service POST (durable) >= 0.5x Fastify peer', server: 'service', metric: 'ratioVsFastify', op: '>=', value: 0.5 },
]);
await closeHttp();
