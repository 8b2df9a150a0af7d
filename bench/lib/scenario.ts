// What every throughput scenario does for each server: check one request answers the expected
// status, warm up, then measure. Settings come from the environment so the suite can be run
// short or long without edits.
import { generator, runLoad, type LoadSpec } from './load.js';
import { call } from './http.js';
import { addRatios, throughputTable, writeResults, type Row, type Settings } from './report.js';
import { serviceBuilt, startCeiling, startFastify, startService, type ServerKind, type Subject } from './servers.js';

function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  const n = raw === undefined || raw === '' ? fallback : Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got '${raw}'`);
  return n;
}

export function settings(): Settings {
  return {
    generator: generator(),
    seconds: envInt('BENCH_SECONDS', 10),
    warmupSeconds: envInt('BENCH_WARMUP', 2),
    connections: envInt('BENCH_CONNECTIONS', 64),
  };
}

export type Request = Omit<LoadSpec, 'url' | 'connections' | 'seconds' | 'procs'>;

export async function measure(scenario: string, subject: Subject, req: Request, s: Settings): Promise<Row> {
  const row: Row = { scenario, server: subject.kind };
  const first = req.paths[0] ?? '/';
  try {
    const probe = await call(`${subject.url}${first}`, {
      method: req.method,
      headers: req.headers,
      body: req.body,
      timeoutMs: 10_000,
    });
    if (probe.status !== req.expectStatus) {
      row.error = `probe ${req.method} ${first} answered ${probe.status}, expected ${req.expectStatus}: ${probe.body.slice(0, 300)}`;
      return row;
    }
  } catch (err) {
    row.error = `probe failed: ${String(err)}`;
    for (const p of subject.procs.filter((x) => x.exited())) {
      row.error += `; ${p.name} ${p.exitInfo()}, last output:\n${p.tail().split('\n').slice(-15).join('\n')}`;
    }
    return row;
  }
  const base = { ...req, url: subject.url, connections: s.connections, procs: subject.procs.map((p) => ({ name: p.name, pid: p.pid })) };
  if (s.warmupSeconds > 0) await runLoad({ ...base, seconds: s.warmupSeconds });
  row.result = await runLoad({ ...base, seconds: s.seconds });
  const notes: string[] = [];
  if (row.result.errors > 0) notes.push(`${row.result.errors} socket errors (${row.result.timeouts} timeouts)`);
  if (row.result.bad > 0) notes.push(`${row.result.bad} responses with an unexpected status`);
  for (const p of subject.procs.filter((x) => x.exited())) {
    notes.push(`${p.name} ${p.exitInfo()} during the run; its last output:\n${p.tail().split('\n').slice(-15).join('\n')}`);
  }
  if (notes.length > 0) row.notes = notes;
  return row;
}

/** Starts a server, runs `body` with it, always stops it; a start failure becomes a FAILED row. */
export async function withServer(
  scenario: string,
  kind: ServerKind,
  start: () => Promise<Subject>,
  body: (s: Subject) => Promise<Row[]>,
): Promise<Row[]> {
  let subject: Subject;
  try {
    subject = await start();
  } catch (err) {
    return [{ scenario, server: kind, error: `start failed: ${err instanceof Error ? err.message : String(err)}` }];
  }
  try {
    return await body(subject);
  } catch (err) {
    return [{ scenario, server: kind, error: err instanceof Error ? err.message : String(err) }];
  } finally {
    await subject.stop();
  }
}

export function printRun(title: string, s: Settings): void {
  console.log(
    `\n== ${title} ==  generator: ${s.generator}, ${s.connections} connections, ${s.seconds} s per measurement (+${s.warmupSeconds} s warm-up)`,
  );
}

export interface Target {
  label: string;
  server: ServerKind;
  /**
   * The figure checked, read from that server's row; `ratioVsScenario` is its rps over the same
   * server's rps in the `baseline` scenario of the same run.
   */
  metric: 'ratioVsCeiling' | 'ratioVsFastify' | 'p99Ms' | 'ratioVsScenario';
  baseline?: string;
  op: '>=' | '<';
  value: number;
  /** Restrict to one scenario label when a script measures several. */
  scenario?: string;
}

export interface TargetOutcome {
  label: string;
  measured: number | null;
  pass: boolean | null;
}

export function evaluateTargets(rows: Row[], targets: Target[]): TargetOutcome[] {
  return targets.map((t) => {
    const row = rows.find((r) => r.server === t.server && (t.scenario === undefined || r.scenario === t.scenario));
    const base = rows.find((r) => r.server === t.server && r.scenario === t.baseline)?.result?.rps;
    let measured: number | undefined;
    if (row?.result) {
      if (t.metric === 'p99Ms') measured = row.result.p99Ms;
      else if (t.metric === 'ratioVsScenario') measured = base ? row.result.rps / base : undefined;
      else measured = row[t.metric];
    }
    if (measured === undefined) return { label: t.label, measured: null, pass: null };
    return { label: t.label, measured, pass: t.op === '>=' ? measured >= t.value : measured < t.value };
  });
}

/** Ratios, table, notes, targets, JSON file: the common ending of every throughput scenario. */
export function finish(
  scenario: string,
  s: Settings,
  rows: Row[],
  targets: Target[] = [],
  extra: Record<string, unknown> = {},
): void {
  addRatios(rows);
  console.log(throughputTable(rows));
  for (const r of rows) {
    if (r.error) console.log(`  ! ${r.scenario} / ${r.server}: ${r.error}`);
    for (const n of r.notes ?? []) console.log(`  ! ${r.scenario} / ${r.server}: ${n}`);
    if (r.result?.cpuByProcess) console.log(`  ${r.scenario} / ${r.server} cpu% by process: ${JSON.stringify(r.result.cpuByProcess)}`);
    if (r.rounds) console.log(`  ${r.scenario} / ${r.server} rps per round: ${r.rounds.map((x) => x ?? 'failed').join(', ')}`);
    if (r.result?.statusCounts && Object.keys(r.result.statusCounts).length > 1) {
      console.log(`  ${r.scenario} / ${r.server} statuses: ${JSON.stringify(r.result.statusCounts)}`);
    }
  }
  const outcomes = evaluateTargets(rows, targets);
  for (const o of outcomes) {
    const verdict = o.pass === null ? 'n/a ' : o.pass ? 'PASS' : 'FAIL';
    console.log(`  target ${verdict}  ${o.label}${o.measured === null ? '' : `  (measured ${o.measured.toFixed(2)})`}`);
  }
  const file = writeResults(scenario, { settings: s, rows, targets: outcomes, ...extra });
  console.log(`  written to ${file}`);
}

export interface Contender {
  kind: ServerKind;
  start: () => Promise<Subject>;
}

/** The three servers of an embedded-mode scenario, in the order they are measured. */
export function contenders(serviceEnv: Record<string, string> = {}): Contender[] {
  return only([
    { kind: 'uws-ceiling', start: startCeiling },
    { kind: 'fastify-peer', start: startFastify },
    { kind: 'service', start: () => startService({ env: serviceEnv }) },
  ]);
}

/** BENCH_ONLY=service,uws-ceiling narrows a run while investigating (ratios need the baselines). */
export function only(list: Contender[]): Contender[] {
  const wanted = process.env.BENCH_ONLY?.split(',').map((x) => x.trim());
  return wanted ? list.filter((c) => wanted.includes(c.kind)) : list;
}

export interface Plan {
  /** Row label; a script measuring several variants gives each its own. */
  scenario: string;
  request: Request;
}

/**
 * Starts every contender, prepares each (creating the orders it will be asked for), then
 * measures them in BENCH_ROUNDS interleaved rounds (ceiling, peer, service, ceiling, ...). With
 * more than one round the row kept per server and variant is its best round: other work on a
 * shared machine only ever slows a run down, and interleaving spreads that noise over all three.
 */
export async function compare(
  list: Contender[],
  prepare: (s: Subject) => Promise<Plan[]>,
  s: Settings,
  defaultScenario: string,
): Promise<Row[]> {
  const rounds = Math.max(1, envInt('BENCH_ROUNDS', 1));
  const failed: Row[] = [];
  const ready: { contender: Contender; subject: Subject; plans: Plan[]; restarts: number }[] = [];
  try {
    for (const c of list) {
      if ((c.kind === 'service' || c.kind === 'service-cluster') && !serviceBuilt()) {
        failed.push({ scenario: defaultScenario, server: c.kind, error: 'dist/gateway/main.js not built (npx tsc -p .)' });
        continue;
      }
      let subject: Subject | undefined;
      try {
        subject = await c.start();
        ready.push({ contender: c, subject, plans: await prepare(subject), restarts: 0 });
      } catch (err) {
        if (subject) await subject.stop();
        failed.push({ scenario: defaultScenario, server: c.kind, error: err instanceof Error ? err.message : String(err) });
      }
    }
    const perPlan: Row[][][] = ready.map((r) => r.plans.map(() => []));
    for (let round = 0; round < rounds; round++) {
      for (const [i, entry] of ready.entries()) {
        // A server that died while idle (on a shared machine, something else may signal it) is
        // started and prepared again, at most twice, and the rows say so.
        const dead = entry.subject.procs.filter((p) => p.exited());
        if (dead.length > 0 && entry.restarts < 2) {
          const why = dead.map((p) => `${p.name} ${p.exitInfo()}`).join(', ');
          console.error(`  [bench] ${entry.contender.kind}: ${why} while idle; starting it again`);
          await entry.subject.stop();
          entry.restarts++;
          try {
            entry.subject = await entry.contender.start();
            entry.plans = await prepare(entry.subject);
          } catch (err) {
            console.error(`  [bench] ${entry.contender.kind}: restart failed: ${String(err)}`);
          }
        }
        // Odd rounds run a server's scenarios in reverse order: a server that slows down as it
        // runs (a store growing with every POST) then weighs on no scenario more than another.
        const order = [...entry.plans.entries()];
        if (round % 2 === 1) order.reverse();
        for (const [j, plan] of order) {
          const row = await measure(plan.scenario, entry.subject, plan.request, s);
          if (entry.restarts > 0) (row.notes ??= []).push(`server restarted ${entry.restarts}x after being stopped from outside`);
          perPlan[i]?.[j]?.push(row);
        }
      }
    }
    const rows: Row[] = [];
    for (const runs of perPlan) {
      for (const tries of runs) {
        const ok = tries.filter((r) => r.result);
        const best = ok.sort((a, b) => (b.result?.rps ?? 0) - (a.result?.rps ?? 0))[0] ?? tries[0];
        if (!best) continue;
        if (tries.length > 1) best.rounds = tries.map((r) => (r.result ? Math.round(r.result.rps) : null));
        rows.push(best);
      }
    }
    return [...rows, ...failed];
  } finally {
    for (const { subject } of ready) await subject.stop();
  }
}
