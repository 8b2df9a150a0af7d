// Scenario: what an Idempotency-Key costs, in instructions, over real HTTP. The service runs
// under valgrind's callgrind, which counts every instruction its threads execute (LMDB's write
// thread, V8's collector and compilers included), and so gives the same figure for the same work
// however busy the shared machine is; the HTTP figures of idempotency.ts swing by a third from
// round to round. Two pairs, in alternating order each round:
// - a POST with a fresh Idempotency-Key against a plain POST (target: at most 1.2x);
// - a replayed POST (one key and body, answered from the gateway's kept answer) against a GET of
//   one order (target: at most 1x: a replay is then at least as fast, where CPU is the limit).
// Counted: user-space instructions. The kernel's work per request (the socket reads and writes)
// is not, and is about the same within each pair.
import { join } from 'node:path';
import { ORDER_BODY } from './lib/fixtures.js';
import { call, closeHttp, pool } from './lib/http.js';
import { createOrder } from './lib/orders.js';
import { benchDir, fromSource } from './lib/paths.js';
import { genericTable, writeResults } from './lib/report.js';
import { LISTEN_HOST, startService } from './lib/servers.js';
import { mintToken } from './lib/token.js';
import { Callgrind, haveValgrind } from './lib/callgrind.js';

const SCENARIO = 'instructions';
const REQUESTS = Number(process.env.BENCH_INSTR_REQUESTS ?? 5000);
// V8 is still compiling after a few thousand requests: the service under --trace-opt finished
// 202 TurboFan compilations in its first 10,000 POSTs, 253 by 40,000 and 264 by 80,000. Counted
// before then, a GET carried up to 6k instructions of the compiler's work (32-40k a GET from round
// to round after 6,000 of warm-up; 32k in every round after 10,000 of each kind).
const WARMUP = Number(process.env.BENCH_INSTR_WARMUP ?? 10000);
// Five rounds: a round's figure moves by a tenth with where the collector's big pauses fall.
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
// The young generation's collections cost in whichever phase fills it. Semi-spaces of 4 MiB
// (npm start gives 32) make them small and many, so each phase carries its own share.
const NODE_ARGS = ['--max-semi-space-size=4', `--import=${join(benchDir, 'lib', 'map-cap.js')}`];
const CONCURRENCY = 16;

const KEYED_LABEL = 'keyed POST <= 1.2x the instructions of a plain POST';
const REPLAY_LABEL = 'replayed POST <= 1.0x the instructions of a GET';

if (!haveValgrind()) {
  console.log(`\n== ${SCENARIO} == n/a: valgrind is not installed (apt-get install valgrind)`);
  const targets = [KEYED_LABEL, REPLAY_LABEL].map((label) => ({ label, measured: null, pass: null }));
  writeResults(SCENARIO, { skipped: 'valgrind is not installed', targets });
  process.exit(0);
}
if (fromSource) throw new Error(`${SCENARIO} runs the compiled bench (npm run build, then node dist/bench/${SCENARIO}.js)`);

type Kind = 'plain' | 'keyed' | 'get' | 'replay';

const token = await mintToken();
// The service sees this environment plus its own settings, HOST among them.
const guest = { USER: process.env.USER, LOGNAME: process.env.LOGNAME, HOSTNAME: process.env.HOSTNAME, HOST: LISTEN_HOST };
const counter = new Callgrind(guest);
try {
  const service = await startService({ nodeArgs: NODE_ARGS, wrap: counter.wrap, readyTimeoutMs: 300_000 });
  try {
    await measure(service.url, service.procs[0]!.pid);
  } finally {
    await service.stop();
  }
} finally {
  await closeHttp();
  counter.cleanUp();
}

async function measure(url: string, pid: number): Promise<void> {
  const auth = { authorization: `Bearer ${token}` };
  const post = { ...auth, 'content-type': 'application/json' };
  const { path } = await createOrder(url, token);
  const replayHeaders = { ...post, 'idempotency-key': 'instructions-replay' };

  const expect = async (status: number, r: Promise<{ status: number; body: string }>, what: string): Promise<void> => {
    const got = await r;
    if (got.status !== status) throw new Error(`${what} answered ${got.status}: ${got.body.slice(0, 300)}`);
  };
  let keys = 0;
  const send: Record<Kind, () => Promise<void>> = {
    plain: () => expect(201, call(`${url}/v1/orders`, { method: 'POST', headers: post, body: ORDER_BODY }), 'POST'),
    keyed: () => expect(201, call(`${url}/v1/orders`, { method: 'POST', headers: { ...post, 'idempotency-key': `instructions-${keys++}` }, body: ORDER_BODY }), 'keyed POST'),
    get: () => expect(200, call(`${url}${path}`, { headers: auth }), 'GET'),
    replay: () => expect(201, call(`${url}/v1/orders`, { method: 'POST', headers: replayHeaders, body: ORDER_BODY }), 'replayed POST'),
  };
  const run = (kind: Kind, n: number): Promise<void> => pool(n, CONCURRENCY, () => send[kind]());

  // The first request under the replayed key runs alone: retries sent beside it would get 409.
  await send.replay();
  // Warm-up, instrumentation off: every path compiled and every cache at its steady state. Two
  // passes over the kinds, as the rounds alternate them, so code the kinds share has seen every
  // one of them before counting starts.
  for (let pass = 0; pass < 2; pass++) for (const kind of ['plain', 'keyed', 'get', 'replay'] as const) await run(kind, WARMUP / 2);
  counter.attach(pid);

  const perRequest: Record<Kind, number[]> = { plain: [], keyed: [], get: [], replay: [] };
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate which of each pair goes first, so whatever drifts falls on both alike.
    const order: Kind[] = round % 2 === 0 ? ['plain', 'keyed', 'get', 'replay'] : ['keyed', 'plain', 'replay', 'get'];
    for (const kind of order) {
      counter.zero();
      await run(kind, REQUESTS);
      perRequest[kind].push(counter.instructions() / REQUESTS);
    }
  }

  const middle = (xs: number[]): number => {
    const sorted = [...xs].sort((a, b) => a - b);
    const half = Math.floor(sorted.length / 2);
    return sorted.length % 2 === 1 ? sorted[half]! : (sorted[half - 1]! + sorted[half]!) / 2;
  };
  const ratios = (a: Kind, b: Kind): number[] => perRequest[a].map((x, i) => x / perRequest[b][i]!);
  const keyed = middle(ratios('keyed', 'plain'));
  const replay = middle(ratios('replay', 'get'));
  const k = (x: number): string => `${(x / 1000).toFixed(0)}k`;
  console.log(`\n== ${SCENARIO} == ${ROUNDS} rounds of ${REQUESTS} requests of each kind (${CONCURRENCY} at a time), instructions per request under callgrind`);
  console.log(genericTable(['request', ...perRequest.plain.map((_, i) => `round ${i + 1}`)], (Object.keys(perRequest) as Kind[]).map((kind) => [kind, ...perRequest[kind].map(k)])));
  console.log(`  keyed / plain per round: ${ratios('keyed', 'plain').map((x) => x.toFixed(3)).join(', ')}`);
  console.log(`  replay / GET per round: ${ratios('replay', 'get').map((x) => x.toFixed(3)).join(', ')}`);
  const targets = [
    { label: KEYED_LABEL, measured: keyed, pass: keyed <= 1.2 },
    { label: REPLAY_LABEL, measured: replay, pass: replay <= 1.0 },
  ];
  for (const t of targets) console.log(`  target ${t.pass ? 'PASS' : 'FAIL'}  ${t.label}  (median ${t.measured.toFixed(3)})`);
  console.log(`  written to ${writeResults(SCENARIO, { requests: REQUESTS, rounds: ROUNDS, concurrency: CONCURRENCY, instructionsPerRequest: perRequest, targets })}`);
}
