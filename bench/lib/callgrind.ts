// Counting the instructions a process executes, with valgrind's callgrind: the same work counts
// the same whatever else the machine is doing, where its seconds swing by a third on a shared
// machine. The process runs under valgrind with instrumentation off (start-up at a few times its
// speed), then `callgrind_control` switches it on and zeroes the counters, and vgdb reads them.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function haveValgrind(): boolean {
  const probe = spawnSync('valgrind', ['--version'], { encoding: 'utf8' });
  return probe.error === undefined && /valgrind/.test(probe.stdout);
}

export class Callgrind {
  private readonly dir = mkdtempSync(join(tmpdir(), 'bench-callgrind-'));
  private pid = 0;

  /**
   * vgdb names its pipes after the user and host names the guest saw (LOGNAME or USER, HOST or
   * HOSTNAME), and the service's HOST is its listen address: `callgrind_control` and vgdb must
   * be given the same values to find them.
   */
  constructor(private readonly guestEnv: Record<string, string | undefined>) {}

  /** The command line to put before `node`. */
  get wrap(): string[] {
    return ['valgrind', '--tool=callgrind', '--instr-atstart=no', `--vgdb-prefix=${this.prefix}`, `--callgrind-out-file=${join(this.dir, 'callgrind.out.%p')}`];
  }

  attach(pid: number): void {
    this.pid = pid;
    this.control('--instr=on');
  }

  zero(): void {
    this.control('--zero');
  }

  /**
   * Instructions executed since the last zero, over every thread: callgrind's own state report
   * (what `callgrind_control -e` prints from), one `events-<thread>: <Ir>` line per thread.
   */
  instructions(): number {
    const out = this.run('vgdb', [`--vgdb-prefix=${this.prefix}`, `--pid=${this.pid}`, 'status', 'internal']);
    let total = 0;
    let threads = 0;
    for (const m of out.matchAll(/^events-\d+: (\d+)$/gm)) {
      total += Number(m[1]);
      threads++;
    }
    if (threads === 0 || total === 0) throw new Error(`callgrind reported no instructions for ${this.pid}:\n${out}`);
    return total;
  }

  cleanUp(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** `callgrind_control` exits 0 whatever happens; only its "OK." says the action was done. */
  private control(action: string): void {
    const out = this.run('callgrind_control', [`--vgdb-prefix=${this.prefix}`, action, String(this.pid)]);
    if (!/^\s*OK\.$/m.test(out) || /^Error:|No active callgrind runs|not detected/m.test(out)) throw new Error(`callgrind_control ${action} ${this.pid} failed:\n${out}`);
  }

  private get prefix(): string {
    return join(this.dir, 'vgdb');
  }

  private run(program: string, args: string[]): string {
    const env = { ...process.env };
    for (const name of ['USER', 'LOGNAME', 'HOST', 'HOSTNAME']) {
      const value = this.guestEnv[name];
      if (value === undefined) delete env[name];
      else env[name] = value;
    }
    const r = spawnSync(program, args, { encoding: 'utf8', env, timeout: 60_000 });
    const out = `${r.stdout}${r.stderr}`;
    if (r.error || r.status !== 0 || /error opening/.test(out)) throw new Error(`${program} ${args.join(' ')} failed:\n${r.error?.message ?? ''}${out}`);
    return out;
  }
}
