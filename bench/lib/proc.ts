// Child processes for servers under test. Every process started here is registered so that it is
// killed however the bench ends (normal exit, exception, Ctrl-C); nothing is left listening.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

const LISTENING = /listening on (http:\/\/127\.0\.0\.1:\d+)/;
const live = new Set<ChildProcess>();

function killAllNow(): void {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
}

process.on('exit', killAllNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    killAllNow();
    process.exit(130);
  });
}
process.on('uncaughtException', (err) => {
  console.error(err);
  killAllNow();
  process.exit(1);
});
process.on('unhandledRejection', (err) => {
  console.error(err);
  killAllNow();
  process.exit(1);
});

export interface StartOptions {
  name: string;
  cmd: string;
  args: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** Wait for this pattern on stdout/stderr; defaults to the `listening on http://...` line. */
  ready?: RegExp;
  readyTimeoutMs?: number;
  /** When the ready line never comes, carry on (if the process is still running) instead of failing. */
  readyOptional?: boolean;
}

export interface Proc {
  name: string;
  pid: number;
  /** Base URL from the `listening on` line ('' when `ready` was a custom pattern). */
  url: string;
  /** Milliseconds from spawn to the ready line. */
  readyMs: number;
  /** performance.now() at spawn, for callers timing further milestones. */
  spawnedAt: number;
  /** Last lines the process printed, for diagnostics. */
  tail(): string;
  exited(): boolean;
  /** How it ended ('' while running): exit code or signal. */
  exitInfo(): string;
  stop(): Promise<void>;
}

export async function startProcess(opts: StartOptions): Promise<Proc> {
  const spawnedAt = performance.now();
  const child = spawn(opts.cmd, opts.args, {
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const lines: string[] = [];
  const tail = (): string => lines.map((l) => `    | ${l}`).join('\n');
  let stopping = false;
  let matched = false;
  let started = false;
  let exitCode: number | null | undefined;
  let exitSignal: string | null = null;
  const exitedP = new Promise<void>((res) => {
    child.once('exit', (code, signal) => {
      exitCode = code;
      exitSignal = signal;
      live.delete(child);
      // Said at once, not only in the table: a server dying mid-run is the finding.
      if (!stopping && started) console.error(`  [bench] ${opts.name} died: code ${String(code)}, signal ${String(signal)}\n${tail()}`);
      res();
    });
  });

  const ready = opts.ready ?? LISTENING;
  let resolveReady: (url: string) => void = () => {};
  const readyP = new Promise<string>((res) => (resolveReady = res));
  // Streams are always drained, or a chatty server would block on a full pipe mid-benchmark.
  const onChunk = (chunk: Buffer): void => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line === '') continue;
      lines.push(line);
      if (lines.length > 60) lines.shift();
      if (!matched) {
        const m = ready.exec(line);
        if (m) {
          matched = true;
          resolveReady(m[1] ?? '');
        }
      }
    }
  };
  child.stdout?.on('data', onChunk);
  child.stderr?.on('data', onChunk);

  const exitInfo = (): string =>
    exitCode === undefined ? '' : `${stopping ? 'stopped' : 'died'} (code ${String(exitCode)}, signal ${String(exitSignal)})`;
  const stop = async (): Promise<void> => {
    if (exitCode !== undefined) return;
    stopping = true;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exitedP;
    clearTimeout(timer);
  };

  const timeoutMs = opts.readyTimeoutMs ?? 20_000;
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    readyP.then((url) => ({ kind: 'ready' as const, url })),
    exitedP.then(() => ({ kind: 'exited' as const })),
    new Promise<{ kind: 'timeout' }>((res) => {
      timer = setTimeout(() => res({ kind: 'timeout' }), timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  if (outcome.kind === 'timeout' && opts.readyOptional && exitCode === undefined) {
    if (child.pid === undefined) throw new Error(`${opts.name}: no pid`);
    started = true;
    return { name: opts.name, pid: child.pid, url: '', readyMs: NaN, spawnedAt, tail, exited: () => exitCode !== undefined, exitInfo, stop };
  }
  if (outcome.kind !== 'ready') {
    await stop();
    const why =
      outcome.kind === 'exited'
        ? `exited (code ${String(exitCode)}, signal ${String(exitSignal)})`
        : `printed no ready line within ${timeoutMs} ms`;
    throw new Error(`${opts.name} ${why}; last output:\n${tail()}`);
  }
  const readyMs = performance.now() - spawnedAt;
  if (child.pid === undefined) throw new Error(`${opts.name}: no pid`);
  started = true;
  return {
    name: opts.name,
    pid: child.pid,
    url: outcome.url,
    readyMs,
    spawnedAt,
    tail,
    exited: () => exitCode !== undefined,
    exitInfo,
    stop,
  };
}

/** User + system seconds from a /proc `stat` file (a process's or one of its threads'). */
function statSeconds(path: string): number {
  try {
    const stat = readFileSync(path, 'utf8');
    // Fields after the command name (which may hold spaces) start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(fields[11]);
    const stime = Number(fields[12]);
    return (utime + stime) / 100; // USER_HZ is 100 on Linux
  } catch {
    return 0;
  }
}

/** CPU time (user + system) of a process in seconds, from /proc. */
export function cpuSeconds(pid: number): number {
  return statSeconds(`/proc/${pid}/stat`);
}

/** CPU seconds of each thread of a process, by thread id (the main thread's id is the pid). */
export function threadCpuSeconds(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) out.set(Number(tid), statSeconds(`/proc/${pid}/task/${tid}/stat`));
  } catch {
    // The process is gone: no threads.
  }
  return out;
}

/** Each thread's name (/proc/<pid>/task/<tid>/comm: "node", "libuv-worker", "V8 Worker", ...). */
export function threadNames(pid: number): Map<number, string> {
  const out = new Map<number, string>();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) out.set(Number(tid), readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim());
  } catch {
    // The process is gone: no threads.
  }
  return out;
}

export interface Rss {
  rssMb: number;
  anonMb: number;
  fileMb: number;
}

/** Resident set of a process from /proc/<pid>/status: total, anonymous, and file-backed (mmap). */
export function rss(pid: number): Rss {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string): number => {
    const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? Number(m[1]) : 0;
  };
  const mb = (n: number): number => Math.round((n / 1024) * 10) / 10;
  return { rssMb: mb(kb('VmRSS')), anonMb: mb(kb('RssAnon')), fileMb: mb(kb('RssFile') + kb('RssShmem')) };
}
