// Scenario: POST /v1/users/batch-get of 100 ids against GET of one user (issue 3 target: the
// batch at least 0.2x the single read's rate). All users of a tenant live in one partition, so
// a batch-get is one read at one owner.
import { call, closeHttp } from './lib/http.js';
import { compare, finish, only, printRun, settings } from './lib/scenario.js';
import { startService } from './lib/servers.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'batch-get';
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();
const auth = { authorization: `Bearer ${token}` };
const json = { ...auth, 'content-type': 'application/json' };

const rows = await compare(
  only([{ kind: 'service', start: () => startService() }]),
  async (subject) => {
    const ids: string[] = [];
    for (let i = 0; i < 100; i++) {
      const r = await call(`${subject.url}/v1/users`, { method: 'POST', headers: json, body: JSON.stringify({ email: `u${i}@bench.io`, name: `User ${i}` }) });
      if (r.status !== 201) throw new Error(`POST /v1/users answered ${r.status}: ${r.body.slice(0, 200)}`);
      ids.push((JSON.parse(r.body) as { id: string }).id);
    }
    return [
      { scenario: 'get one user', request: { method: 'GET', paths: [`/v1/users/${ids[0]}`], headers: auth, expectStatus: 200 } },
      { scenario: 'batch-get 100', request: { method: 'POST', paths: ['/v1/users/batch-get'], headers: json, body: JSON.stringify({ ids }), expectStatus: 200 } },
    ];
  },
  s,
  SCENARIO,
);

finish(SCENARIO, s, rows, [
  { label: 'batch-get of 100 >= 0.2x single-user GET rps', server: 'service', scenario: 'batch-get 100', metric: 'ratioVsScenario', baseline: 'get one user', op: '>=', value: 0.2 },
]);
await closeHttp();
