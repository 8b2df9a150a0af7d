// The real service as a child process (`node dist/gateway/main.js`, embedded mode) on a given
// DATA_DIR, for tests that SIGKILL it and start it again on the same data.

import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { TestFn } from 'ava';
import { removeDir, ROOT, tempDir } from './edge-kit.js';

export interface Running {
  child: ChildProcess;
  url: string;
  /** Spawn to the listening line. */
  startMs: number;
  /** The tail of what the child printed and how it ended so far, for a failing assertion's message. */
  report(): string;
}

const MAIN = join(ROOT, 'dist', 'gateway', 'main.js');
export const START_WITHIN_MS = 15_000;

/**
 * Lets a write grow no file past `bytes` (RLIMIT_FSIZE, set with util-linux's `prlimit`), which
 * then fails as it would on a full disk. The kernel signals SIGXFSZ too, which would end the
 * process: the child is started with it ignored, so the write fails with EFBIG instead.
 */
export interface FileSizeLimit {
  fileSizeLimit: number;
}

const IGNORE_SIGXFSZ = 'data:text/javascript,process.on("SIGXFSZ",()=>{})';

/** Starts the service on `dir` and resolves once it prints its listening line; `children` tracks it for cleanup. */
export function startChild(children: Set<ChildProcess>, dir: string, secret: string, env: Record<string, string> = {}, limit?: FileSizeLimit): Promise<Running> {
  const started = Date.now();
  const [command, args] = limit
    ? ['prlimit', [`--fsize=${limit.fileSizeLimit}`, '--', process.execPath, `--import=${IGNORE_SIGXFSZ}`, MAIN]]
    : [process.execPath, [MAIN]];
  const child = spawn(command, args, {
    env: { PATH: process.env.PATH ?? '', PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: secret, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let out = '';
  let err = '';
  let ended = 'running';
  child.stderr?.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  child.once('exit', (code, signal) => (ended = `exited (${code ?? signal})`));
  const report = (): string => `child ${ended}; stdout tail:\n${out.slice(-2000)}\nstderr tail:\n${err}`;
  return new Promise((resolve, reject) => {
    let listening = false;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no listening line within ${START_WITHIN_MS} ms:\n${out}\n${err}`));
    }, START_WITHIN_MS);
    child.stdout?.on('data', (d: Buffer) => {
      out = (out + d.toString()).slice(-8000);
      const m = listening ? null : /orders-api listening on (http:\/\/\S+:\d+) \(embedded mode\)/.exec(out);
      if (m) {
        listening = true;
        clearTimeout(timer);
        resolve({ child, url: m[1]!, startMs: Date.now() - started, report });
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code ?? signal}) before listening:\n${out}\n${err}`));
    });
  });
}

export function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/** Kills every child still running. */
export function killAll(children: Set<ChildProcess>): void {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}

/** What a test file that runs the service as child processes keeps: their data, and them. */
export interface ChildContext {
  dir: string;
  children: Set<ChildProcess>;
}

/** A data directory for the file's children before its tests; after them, every child killed and the directory gone. */
export function useChildren(test: TestFn<ChildContext>, name: string): void {
  test.before(async (t) => {
    t.context = { dir: await tempDir(name), children: new Set() };
  });
  test.after.always(async (t) => {
    killAll(t.context.children);
    await removeDir(t.context.dir);
  });
}
