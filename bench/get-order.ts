// Scenario: GET one order by id (CONTRACT §6) with a valid bearer token, 64 connections.
// BENCH_KEYS=N spreads the reads over N orders instead of one hot key.
import { closeHttp } from './lib/http.js';
import { createOrder } from './lib/orders.js';
import { compare, contenders, finish, printRun, settings } from './lib/scenario.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'get-order';
const s = settings();
const keys = Math.max(1, Number(process.env.BENCH_KEYS ?? 1));
printRun(`${SCENARIO} (${keys} key${keys === 1 ? '' : 's'})`, s);
const token = await mintToken();

const rows = await compare(
  contenders(),
  async (subject) => {
    const paths: string[] = [];
    for (let i = 0; i < keys; i++) paths.push((await createOrder(subject.url, token)).path);
    const headers = { authorization: `Bearer ${token}` };
    return [{ scenario: SCENARIO, request: { method: 'GET', paths, headers, expectStatus: 200 } }];
  },
  s,
  SCENARIO,
);

finish(
  SCENARIO,
  s,
  rows,
  [
    { label: 'service GET >= 0.6x uWS ceiling', server: 'service', metric: 'ratioVsCeiling', op: '>=', value: 0.6 },
    { label: 'service GET >= 2x Fastify peer', server: 'service', metric: 'ratioVsFastify', op: '>=', value: 2 },
    { label: 'service GET p99 < 5 ms', server: 'service', metric: 'p99Ms', op: '<', value: 5 },
  ],
  { keys },
);
await closeHttp();
