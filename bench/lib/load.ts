// The load generator. wrk (C, one thread) when it is on PATH, autocannon (npm, in this process)
// otherwise or when BENCH_GENERATOR=autocannon. On a 2-core machine the generator shares the CPU
// with the server, so a cheaper generator leaves more of it to the server; both sides of every
// ratio are measured with the same generator in the same run, so ratios stay comparable.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { cpuSeconds } from './proc.js';

export type GeneratorName = 'wrk' | 'autocannon';

export interface LoadSpec {
  /** Base URL, e.g. http://127.0.0.1:1234 */
  url: string;
  /** Paths to request; several are cycled through in order. */
  paths: string[];
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  /** The status every response should have (200, 201, 304). */
  expectStatus: number;
  /** A header given a value never sent before on every request (e.g. a fresh Idempotency-Key). */
  uniqueHeader?: string;
  connections: number;
  seconds: number;
  /** Processes whose CPU use is reported beside the figures (the server side), by name. */
  procs?: { name: string; pid: number }[];
}

export interface LoadResult {
  generator: GeneratorName;
  seconds: number;
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Socket errors: connect/read/write failures and timeouts. */
  errors: number;
  timeouts: number;
  /**
   * Responses with the wrong status. autocannon: exactly those whose status is not `expectStatus`;
   * wrk: those outside 2xx and 3xx, which is what wrk counts without a per-response Lua hook (that
   * hook would slow the generator down). The probe before each run checks the exact status.
   */
  bad: number;
  /** Per-status counts; only autocannon gives these without slowing the generator down. */
  statusCounts?: Record<string, number>;
  /** CPU used by the server-side processes during the run, in percent of one core. */
  serverCpuPct?: number;
  /** The same, per process, when the server is several (cluster mode). */
  cpuByProcess?: Record<string, number>;
  /**
   * Server CPU per answered request, in µs: the cost of a request, which other load on the
   * machine changes much less than it changes the rate.
   */
  serverCpuUsPerRequest?: number;
}

let chosen: GeneratorName | undefined;

export function generator(): GeneratorName {
  if (chosen) return chosen;
  const wanted = process.env.BENCH_GENERATOR;
  if (wanted === 'autocannon') return (chosen = 'autocannon');
  const probe = spawnSync('wrk', ['--version'], { encoding: 'utf8' });
  const haveWrk = probe.error === undefined && /wrk/.test(`${probe.stdout}${probe.stderr}`);
  if (wanted === 'wrk' && !haveWrk) throw new Error('BENCH_GENERATOR=wrk but wrk is not on PATH');
  return (chosen = haveWrk ? 'wrk' : 'autocannon');
}

export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const procs = spec.procs ?? [];
  const before = procs.map((p) => cpuSeconds(p.pid));
  const t0 = process.hrtime.bigint();
  const result = generator() === 'wrk' ? await runWrk(spec) : await runAutocannon(spec);
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const alive = procs.every((p) => existsSync(`/proc/${p.pid}`));
  if (procs.length > 0 && alive) {
    const used = procs.map((p, i) => cpuSeconds(p.pid) - (before[i] ?? 0));
    const pct = used.map((u) => Math.round((u / wall) * 100));
    result.serverCpuPct = pct.reduce((a, b) => a + b, 0);
    if (result.requests > 0) result.serverCpuUsPerRequest = (used.reduce((a, b) => a + b, 0) * 1e6) / result.requests;
    if (procs.length > 1) result.cpuByProcess = Object.fromEntries(procs.map((p, i) => [p.name, pct[i] ?? 0]));
  }
  return result;
}

function luaString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const code = ch.charCodeAt(0);
    if (ch === '\\') out += '\\\\';
    else if (ch === '"') out += '\\"';
    else if (code < 32 || code > 126) {
      for (const byte of Buffer.from(ch, 'utf8')) out += `\\${byte}`;
    } else out += ch;
  }
  return `${out}"`;
}

async function runWrk(spec: LoadSpec): Promise<LoadResult> {
  const threads = Math.max(1, Number(process.env.BENCH_WRK_THREADS ?? 1));
  const dir = mkdtempSync(join(tmpdir(), 'bench-wrk-'));
  const script = join(dir, 'load.lua');
  const lines = [`wrk.method = ${luaString(spec.method)}`];
  for (const [k, v] of Object.entries(spec.headers)) lines.push(`wrk.headers[${luaString(k)}] = ${luaString(v)}`);
  if (spec.body !== undefined) lines.push(`wrk.body = ${luaString(spec.body)}`);
  if (spec.uniqueHeader !== undefined) {
    // Thread number, run prefix and counter make every value unique within and across runs.
    const prefix = `${process.pid}-${Date.now().toString(36)}`;
    lines.push(`local paths = {${spec.paths.map(luaString).join(',')}}`, 'local n = #paths', 'local i = 0');
    lines.push('local threads = 0');
    lines.push('setup = function(thread) threads = threads + 1; thread:set("tid", threads) end');
    lines.push(
      'request = function()',
      '  i = i + 1',
      `  wrk.headers[${luaString(spec.uniqueHeader)}] = ${luaString(prefix)} .. "-" .. (tid or 0) .. "-" .. i`,
      '  return wrk.format(nil, paths[i % n + 1])',
      'end',
    );
  } else if (spec.paths.length > 1) {
    // A request() function costs wrk a Lua call per request; only used when paths vary.
    lines.push(`local paths = {${spec.paths.map(luaString).join(',')}}`);
    lines.push('local n = #paths', 'local i = 0');
    lines.push('request = function() i = i % n + 1; return wrk.format(nil, paths[i]) end');
  }
  lines.push(
    'done = function(s, lat, req)',
    '  io.write(string.format("WRK_RESULT %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.1f %.1f %.1f\\n",',
    '    s.requests, s.duration, s.errors.connect, s.errors.read, s.errors.write, s.errors.status,',
    '    s.errors.timeout, lat:percentile(50), lat:percentile(99), lat.max))',
    'end',
  );
  writeFileSync(script, `${lines.join('\n')}\n`);
  const args = [
    `-t${threads}`,
    `-c${spec.connections}`,
    `-d${spec.seconds}s`,
    '--timeout',
    '5s',
    '-s',
    script,
    `${spec.url}${spec.paths[0] ?? '/'}`,
  ];
  try {
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let text = '';
      child.stdout.on('data', (c: Buffer) => (text += c.toString()));
      child.stderr.on('data', (c: Buffer) => (text += c.toString()));
      // wrk stops itself after -d; this only guards against a wedged generator.
      const guard = setTimeout(() => child.kill('SIGKILL'), (spec.seconds + 20) * 1000);
      child.once('error', reject);
      child.once('exit', (code) => {
        clearTimeout(guard);
        if (code === 0) resolve(text);
        else reject(new Error(`wrk exited ${String(code)}:\n${text}`));
      });
    });
    const m = /WRK_RESULT (.*)/.exec(out);
    if (!m?.[1]) throw new Error(`wrk printed no result:\n${out}`);
    const [requests = 0, durationUs = 1, connect = 0, read = 0, write = 0, status = 0, timeout = 0, p50 = 0, p99 = 0, max = 0] =
      m[1].split(' ').map(Number);
    const seconds = durationUs / 1e6;
    return {
      generator: 'wrk',
      seconds,
      requests,
      rps: requests / seconds,
      p50Ms: p50 / 1000,
      p99Ms: p99 / 1000,
      maxMs: max / 1000,
      errors: connect + read + write + timeout,
      timeouts: timeout,
      bad: status,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function unique(header: string): (req: { headers?: Record<string, string> }) => { headers?: Record<string, string> } {
  const prefix = `${process.pid}-${Date.now().toString(36)}`;
  let i = 0;
  return (req) => ({ ...req, headers: { ...req.headers, [header]: `${prefix}-${++i}` } });
}

async function runAutocannon(spec: LoadSpec): Promise<LoadResult> {
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: spec.url,
        connections: spec.connections,
        duration: spec.seconds,
        timeout: 5,
        method: spec.method,
        headers: spec.headers,
        body: spec.body,
        requests: spec.paths.map((path) => ({ path, ...(spec.uniqueHeader === undefined ? {} : { setupRequest: unique(spec.uniqueHeader) }) })),
      },
      (err, res) => {
        clearTimeout(guard);
        if (err) reject(err);
        else resolve(res);
      },
    );
    const guard = setTimeout(() => instance.stop(), (spec.seconds + 20) * 1000);
  });
  const seconds = (result.finish.getTime() - result.start.getTime()) / 1000;
  const statusCounts: Record<string, number> = {};
  for (const [code, { count }] of Object.entries(result.statusCodeStats)) statusCounts[code] = count;
  const completed = Object.values(statusCounts).reduce((a, b) => a + b, 0);
  return {
    generator: 'autocannon',
    seconds,
    requests: completed,
    rps: completed / seconds,
    // autocannon's latency histogram has 1 ms resolution, so p50 below 1 ms reads as 0 or 1.
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    maxMs: result.latency.max,
    errors: result.errors,
    timeouts: result.timeouts,
    bad: completed - (statusCounts[String(spec.expectStatus)] ?? 0),
    statusCounts,
  };
}
