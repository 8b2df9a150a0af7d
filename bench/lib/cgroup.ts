// A memory cgroup for one bench phase: the service runs under a hard limit on everything the
// kernel charges it, anonymous memory and page cache alike (cgroup v1 `memory.limit_in_bytes`,
// v2 `memory.max`), so LMDB's file pages cannot simply stay mapped because memory is free.
// It needs root and a writable cgroup file system; where there is none, `memoryCgroup` says why
// and the phase is reported as not run.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface MemoryCgroup {
  /** Write a pid here to move that process into the cgroup. */
  procsFile: string;
  limitMb: number;
  usageMb(): number;
  /** Most ever charged, where the kernel keeps it. */
  peakMb(): number | undefined;
  /** Processes the kernel's OOM killer ended inside the cgroup. */
  oomKills(): number;
  remove(): void;
}

const mb = (bytes: number): number => Math.round((bytes / 1024 ** 2) * 10) / 10;
const readNumber = (file: string): number => Number(readFileSync(file, 'utf8').trim());
const field = (file: string, name: string): number => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(readFileSync(file, 'utf8'))?.[1] ?? 0);

/** This process's cgroup path in the hierarchy that has `controller` (v1), or the v2 one (''). */
function ownPath(controller: string): string | undefined {
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    const [, controllers = '', path = ''] = m;
    if (controller === '' ? controllers === '' : controllers.split(',').includes(controller)) return path;
  }
  return undefined;
}

/** Makes `dir` and writes its limits; removes it again if a write is refused. */
function make(dir: string, limits: [file: string, value: string, optional: boolean][]): void {
  mkdirSync(dir);
  try {
    for (const [file, value, optional] of limits) {
      try {
        writeFileSync(join(dir, file), value);
      } catch (err) {
        if (!optional) throw err;
      }
    }
  } catch (err) {
    rmdirSync(dir);
    throw err;
  }
}

function createV1(name: string, limitMb: number): MemoryCgroup {
  const path = ownPath('memory');
  if (path === undefined || !existsSync('/sys/fs/cgroup/memory/memory.limit_in_bytes')) throw new Error('no cgroup v1 memory hierarchy');
  const dir = join('/sys/fs/cgroup/memory', path, name);
  const bytes = String(limitMb * 1024 ** 2);
  // Memory plus swap as well, where swap is accounted: no way around the limit through swap.
  make(dir, [
    ['memory.limit_in_bytes', bytes, false],
    ['memory.memsw.limit_in_bytes', bytes, true],
  ]);
  return {
    procsFile: join(dir, 'cgroup.procs'),
    limitMb,
    usageMb: () => mb(readNumber(join(dir, 'memory.usage_in_bytes'))),
    peakMb: () => mb(readNumber(join(dir, 'memory.max_usage_in_bytes'))),
    oomKills: () => field(join(dir, 'memory.oom_control'), 'oom_kill'),
    remove: () => rmdirSync(dir),
  };
}

/**
 * v2: the child goes below this process's own cgroup, which must delegate the memory controller
 * (memory in its cgroup.subtree_control); v2 allows that only where the cgroup itself holds no
 * process, so in practice this works from the root cgroup or a delegated one.
 */
function createV2(name: string, limitMb: number): MemoryCgroup {
  const path = ownPath('');
  const root = ['/sys/fs/cgroup', '/sys/fs/cgroup/unified'].find((r) => existsSync(join(r, 'cgroup.controllers')));
  if (path === undefined || root === undefined) throw new Error('no cgroup v2 hierarchy');
  const parent = join(root, path);
  if (!readFileSync(join(parent, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('memory')) {
    throw new Error(`the memory controller is not delegated below ${parent}`);
  }
  const dir = join(parent, name);
  make(dir, [
    ['memory.max', String(limitMb * 1024 ** 2), false],
    ['memory.swap.max', '0', true],
  ]);
  return {
    procsFile: join(dir, 'cgroup.procs'),
    limitMb,
    usageMb: () => mb(readNumber(join(dir, 'memory.current'))),
    peakMb: () => (existsSync(join(dir, 'memory.peak')) ? mb(readNumber(join(dir, 'memory.peak'))) : undefined),
    oomKills: () => field(join(dir, 'memory.events'), 'oom_kill'),
    remove: () => rmdirSync(dir),
  };
}

/** A new memory cgroup below this process's own, limited to `limitMb`; or why there is none. */
export function memoryCgroup(name: string, limitMb: number): MemoryCgroup | { unavailable: string } {
  if (!Number.isInteger(limitMb) || limitMb <= 0) return { unavailable: `the limit must be a whole number of MB, not ${limitMb}` };
  const reasons: string[] = [];
  for (const create of [createV1, createV2]) {
    try {
      return create(name, limitMb);
    } catch (err) {
      reasons.push(err instanceof Error ? err.message : String(err));
    }
  }
  return { unavailable: reasons.join('; ') };
}

// statfs's f_type of tmpfs, whose pages are the files themselves and cannot be dropped.
const TMPFS_MAGIC = 0x01021994;

/** Why the page cache of files under `dir` cannot be dropped, if it cannot. */
export function cannotEvict(dir: string): string | undefined {
  return statfsSync(dir).type === TMPFS_MAGIC ? `${dir} is on tmpfs, whose pages cannot be dropped` : undefined;
}

/**
 * Drops every file under `dir` from the page cache (GNU dd's `iflag=nocache count=0` advises
 * the kernel to drop the whole file), so the next reader starts cold and the pages it faults in
 * are charged to its own cgroup. Pages some process still maps stay.
 */
export function evictFromPageCache(dir: string): void {
  for (const name of readdirSync(dir)) {
    const file = join(dir, name);
    if (statSync(file).isDirectory()) evictFromPageCache(file);
    else execFileSync('dd', [`if=${file}`, 'iflag=nocache', 'count=0', 'status=none']);
  }
}
