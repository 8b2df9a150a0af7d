// Runs every scenario in sequence, each in its own process (so one scenario's servers, heap and
// failures cannot touch the next), then prints one summary from bench/results/*.json.
// BENCH_SCENARIOS=get-order,post-order picks a subset; every other BENCH_* setting passes through.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { generator } from './lib/load.js';
import { benchEntry, resultsDir } from './lib/paths.js';
import { throughputTable, writeResults, type Row } from './lib/report.js';
import type { TargetOutcome } from './lib/scenario.js';

const all = ['get-order', 'conditional-get', 'post-order', 'list-orders', 'cluster-get', 'memory-startup', 'idempotency', 'idempotency-handle', 'instructions', 'batch-get', 'operation-poll', 'lifecycle-get', 'lifecycle-handle', 'webhook-signing', 'webhook-fanout', 'soak'];
const picked = process.env.BENCH_SCENARIOS?.split(',').map((s) => s.trim()) ?? all;
const unknown = picked.filter((s) => !all.includes(s));
if (unknown.length > 0) throw new Error(`unknown scenario(s) ${unknown.join(', ')}; known: ${all.join(', ')}`);
const limitMinutes = Number(process.env.BENCH_SCENARIO_TIMEOUT_MINUTES ?? 20);
const startedAt = new Date();

console.log(`bench: ${picked.join(', ')}; load generator ${generator()}`);

const exits: Record<string, string> = {};
for (const name of picked) {
  const { cmd, args } = benchEntry(`${name}.js`);
  const code = await new Promise<string>((resolve) => {
    const child = spawn(cmd, args, { stdio: 'inherit' });
    // Bounded: a wedged scenario is ended (its own handlers then stop its servers).
    const guard = setTimeout(() => {
      child.kill('SIGTERM');
      setTimeout(() => child.kill('SIGKILL'), 5000).unref();
    }, limitMinutes * 60_000);
    const forward = (): void => {
      child.kill('SIGTERM');
    };
    process.once('SIGINT', forward);
    child.once('exit', (c, sig) => {
      clearTimeout(guard);
      process.off('SIGINT', forward);
      resolve(sig ? `signal ${sig}` : `exit ${String(c)}`);
    });
  });
  exits[name] = code;
  if (code !== 'exit 0') console.log(`  ! ${name} ended with ${code}`);
}

interface ResultFile {
  at: string;
  rows?: Row[];
  targets?: TargetOutcome[];
}

const rows: Row[] = [];
const targets: (TargetOutcome & { scenario: string })[] = [];
for (const name of picked) {
  const file = join(resultsDir, `${name}.json`);
  if (!existsSync(file)) continue;
  const data = JSON.parse(readFileSync(file, 'utf8')) as ResultFile;
  if (new Date(data.at) < startedAt) continue; // stale, from an earlier run
  rows.push(...(data.rows ?? []));
  targets.push(...(data.targets ?? []).map((t) => ({ ...t, scenario: name })));
}

console.log('\n== summary ==');
console.log(throughputTable(rows));
for (const t of targets) {
  const verdict = t.pass === null ? 'n/a ' : t.pass ? 'PASS' : 'FAIL';
  console.log(`  target ${verdict}  ${t.label}${t.measured === null ? '' : `  (measured ${t.measured.toFixed(2)})`}`);
}
const file = writeResults('summary', { generator: generator(), scenarios: exits, rows, targets });
console.log(`  written to ${file}`);
