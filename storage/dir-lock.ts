// One process to a data directory. The actor host keeps every key's turns in order in memory
// (ARCHITECTURE property 1); a second process on the same LMDB would run turns of the same keys
// beside them, and its caches would answer from records the other had changed. LMDB itself
// allows that, so the directory is locked with flock(2), which the kernel lifts when the process
// ends however it ends: a SIGKILL leaves no stale lock behind.

import { closeSync, mkdirSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { EWOULDBLOCK, LOCK_EX, LOCK_NB, libc } from '../common/libc.js';

export interface DirLock {
  /** Whether the lock is held; false where flock cannot be called (off Linux or glibc). */
  held: boolean;
  release(): void;
}

export class DirInUse extends Error {
  constructor(dir: string) {
    super(`${dir} is in use by another process of this service: give each process a DATA_DIR of its own`);
  }
}

/** Locks `dir` for this process, or throws DirInUse when another process holds it. */
export function lockDir(dir: string): DirLock {
  mkdirSync(dir, { recursive: true });
  const calls = libc();
  if (!calls) return { held: false, release: () => undefined };
  const fd = openSync(join(dir, 'LOCK'), 'a');
  if (calls.flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    const errno = calls.errno();
    closeSync(fd);
    if (errno === EWOULDBLOCK) throw new DirInUse(dir);
    throw new Error(`cannot lock ${dir}: flock failed with errno ${errno}`);
  }
  let open = true;
  return {
    held: true,
    release: () => {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}
