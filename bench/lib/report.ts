// One table format and one JSON layout for every scenario. Ratios are computed against the
// ceiling and the Fastify peer measured in the same run, under the same generator (STYLE 11).
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import type { LoadResult } from './load.js';
import { resultsDir } from './paths.js';
import type { ServerKind } from './servers.js';

export interface Row {
  scenario: string;
  server: ServerKind;
  result?: LoadResult;
  /** Why there is no result (server failed to start, probe answered the wrong status, ...). */
  error?: string;
  ratioVsCeiling?: number;
  ratioVsFastify?: number;
  /** Anything the run noticed that a reader should check (unexpected statuses, errors). */
  notes?: string[];
  /** rps of every round when BENCH_ROUNDS > 1; the row shows the best. */
  rounds?: (number | null)[];
}

const round = (n: number, digits: number): number => Math.round(n * 10 ** digits) / 10 ** digits;

/** Fills the ratio columns: rps of each row over that of the baselines for the same scenario. */
export function addRatios(rows: Row[]): void {
  for (const row of rows) {
    const peer = (kind: ServerKind): number | undefined =>
      rows.find((r) => r.scenario === row.scenario && r.server === kind)?.result?.rps;
    const ceiling = peer('uws-ceiling');
    const fastify = peer('fastify-peer');
    if (row.result && ceiling) row.ratioVsCeiling = round(row.result.rps / ceiling, 3);
    if (row.result && fastify) row.ratioVsFastify = round(row.result.rps / fastify, 3);
  }
}

function pad(cells: string[][]): string {
  const widths = cells[0]?.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length))) ?? [];
  return cells
    .map((r, ri) => {
      const line = r.map((c, i) => (i < 2 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  ');
      return ri === 0 ? `${line}\n${widths.map((w) => '-'.repeat(w)).join('  ')}` : line;
    })
    .join('\n');
}

export function throughputTable(rows: Row[]): string {
  const cells: string[][] = [
    ['scenario', 'server', 'rps', 'p50 ms', 'p99 ms', 'max ms', 'errors', 'bad status', 'srv cpu%', 'x ceiling', 'x fastify'],
  ];
  for (const r of rows) {
    const x = r.result;
    if (!x) {
      cells.push([r.scenario, r.server, `FAILED: ${(r.error ?? '').split('\n')[0]?.slice(0, 90) ?? ''}`, '', '', '', '', '', '', '', '']);
      continue;
    }
    cells.push([
      r.scenario,
      r.server,
      Math.round(x.rps).toLocaleString('en-US'),
      x.p50Ms.toFixed(2),
      x.p99Ms.toFixed(2),
      x.maxMs.toFixed(1),
      String(x.errors),
      String(x.bad),
      x.serverCpuPct === undefined ? '' : String(x.serverCpuPct),
      r.ratioVsCeiling === undefined ? '' : r.ratioVsCeiling.toFixed(2),
      r.ratioVsFastify === undefined ? '' : r.ratioVsFastify.toFixed(2),
    ]);
  }
  return pad(cells);
}

export function genericTable(header: string[], body: (string | number)[][]): string {
  return pad([header, ...body.map((r) => r.map(String))]);
}

export interface Settings {
  generator: string;
  seconds: number;
  warmupSeconds: number;
  connections: number;
}

export function machine(): Record<string, unknown> {
  return { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? '', node: process.version, platform: process.platform };
}

/** Writes bench/results/<scenario>.json and returns its path. */
export function writeResults(scenario: string, payload: Record<string, unknown>): string {
  mkdirSync(resultsDir, { recursive: true });
  const file = join(resultsDir, `${scenario}.json`);
  writeFileSync(file, `${JSON.stringify({ scenario, at: new Date().toISOString(), machine: machine(), ...payload }, null, 2)}\n`);
  return file;
}
