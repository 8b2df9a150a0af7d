// Counting the instructions a process executes, with valgrind's callgrind: the same work counts
// the same whatever else the machine is doing, where its seconds swing by a third on a shared
// machine. The process runs under valgrind with instrumentation off (start-up at a few times its
// speed), then `callgrind_control` switches it on, zeroes the counters, and reads them.
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
   * vgdb names its pipes after USER and HOST as the guest saw them, and the service's HOST is its
   * listen address: `callgrind_control` must be given the same values to find them.
   */
  constructor(private readonly guestEnv: Record<string, string | undefined>) {}

  /** The command line to put before `node`. */
  get wrap(): string[] {
    return ['valgrind', '--tool=callgrind', '--instr-atstart=no', `--vgdb-prefix=${join(this.dir, 'vgdb')}`, `--callgrind-out-file=${join(this.dir, 'callgrind.out.%p')}`];
  }

  attach(pid: number): void {
    this.pid = pid;
    this.control('--instr=on');
  }

  zero(): void {
    this.control('--zero');
  }

  /** Instructions executed since the last zero, over every thread. */
  instructions(): number {
    const out = this.control('-e');
    // "Totals:  Ir" then one line per thread: "Th 1  7,013,972".
    let total = 0;
    for (const m of out.matchAll(/^\s*Th\s*\d+\s+([\d,]+)\s*$/gm)) total += Number(m[1]!.replace(/,/g, ''));
    if (!/Totals:/.test(out)) throw new Error(`callgrind_control printed no totals:\n${out}`);
    return total;
  }

  cleanUp(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }

  private control(action: string): string {
    const env = { ...process.env };
    for (const name of ['USER', 'LOGNAME', 'HOST']) {
      const value = this.guestEnv[name];
      if (value === undefined) delete env[name];
      else env[name] = value;
    }
    const r = spawnSync('callgrind_control', [`--vgdb-prefix=${join(this.dir, 'vgdb')}`, action, String(this.pid)], { encoding: 'utf8', env, timeout: 60_000 });
    const out = `${r.stdout}${r.stderr}`;
    if (r.status !== 0 || /error opening|No such/.test(out)) throw new Error(`callgrind_control ${action} ${this.pid} failed:\n${out}`);
    return out;
  }
}
