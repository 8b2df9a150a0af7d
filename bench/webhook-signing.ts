// Scenario: what signing a fan-out costs, inline on the event loop against the piscina pool
// (issue 5, ARCHITECTURE "Hot paths"), at 300 B and 64 KiB bodies. Each delivery is signed with
// one secret in both schemes (Service-Signature and webhook-signature), as the dispatcher does.
// Rows: µs of event-loop time per delivery, and wall time per delivery for a batch of 1,000.
//
//   inline              sign() in a loop on the event loop
//   pool, one per task  one piscina task per delivery (what batching avoids)
//   pool, batched       Signer.signMany: one task per pool thread, each signing many
//
// The event loop is what the dispatcher must keep free for sockets and commits; the pool pays
// off when its hand-off costs less than the HMACs it takes off the loop.
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { Signer, toBatch } from '../actors/signer.js';
import { newSigningSecret, sign, type SignTask } from '../common/webhook-signature.js';
import { genericTable, writeResults } from './lib/report.js';

const SCENARIO = 'webhook-signing';
const N = Number(process.env.BENCH_SIGN_BATCH ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
console.log(`\n== ${SCENARIO} ==  batches of ${N} deliveries, best of ${ROUNDS}, ${availableParallelism()} CPUs`);

const secret = newSigningSecret();
const tasksOf = (bytes: number): SignTask[] => {
  const body = JSON.stringify({ id: 'evt_x', type: 'order.created', data: { note: 'x'.repeat(Math.max(0, bytes - 60)) } });
  return Array.from({ length: N }, (_, i) => ({ id: `evt_${i}`, t: 1_700_000_000, body, secrets: [secret] }));
};

/** Best wall time, and event-loop busy time, in µs per delivery over the rounds. */
async function time(run: () => Promise<unknown>): Promise<{ wallUs: number; loopUs: number }> {
  let best = { wallUs: Infinity, loopUs: Infinity };
  await run(); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    const elu0 = performance.eventLoopUtilization();
    const t0 = performance.now();
    await run();
    const wall = ((performance.now() - t0) * 1000) / N;
    // The main thread's busy time: what signing takes from sockets and commits.
    const loop = (performance.eventLoopUtilization(elu0).active * 1000) / N;
    best = { wallUs: Math.min(best.wallUs, wall), loopUs: Math.min(best.loopUs, loop) };
  }
  return best;
}

const signer = new Signer({ inlineBytes: 0 });
const single = new Piscina({ filename: new URL('../actors/sign-worker.js', import.meta.url).href, maxThreads: Math.max(1, availableParallelism() - 1) });
const rows: (string | number)[][] = [];
const results: Record<string, unknown> = {};
for (const bytes of [300, 64 * 1024]) {
  const tasks = tasksOf(bytes);
  const inline = await time(async () => tasks.map(sign));
  const perTask = await time(() => Promise.all(tasks.map((t) => single.run(toBatch([t])))));
  const batched = await time(() => signer.signMany(tasks));
  const label = bytes === 300 ? '300 B' : '64 KiB';
  for (const [how, m] of [
    ['inline', inline],
    ['pool, one per task', perTask],
    ['pool, batched', batched],
  ] as const) {
    rows.push([label, how, m.wallUs.toFixed(1), (m.wallUs / inline.wallUs).toFixed(2), m.loopUs.toFixed(1), (m.loopUs / inline.loopUs).toFixed(2)]);
  }
  results[label] = { inline, perTask, batched };
}
console.log(genericTable(['body', 'how', 'wall µs/delivery', 'x inline', 'event-loop µs/delivery', 'x inline'], rows));
console.log(
  '  inline blocks the event loop for its whole time; the pool rows leave it free but for the hand-off.\n' +
    '  Signer signs a batch inline below INLINE_BYTES (actors/signer.ts) and in the pool above it.',
);
console.log(`  written to ${writeResults(SCENARIO, { batch: N, results })}`);
await signer.close();
await single.destroy();
