// Calls into the C library that Node does not offer, made through koffi (a C FFI whose
// prebuilt binaries come from npm; no compiler needed). Loaded on first use, so a process that
// never needs them does not pay for the load; undefined where they cannot be made (off Linux or
// without glibc), with the reason kept for whoever reports it.

import { createRequire } from 'node:module';

export interface Libc {
  /** madvise(2): `addr` and `len` as bigints, since addresses may pass 2^53. 0, or -1 on failure. */
  madvise(addr: bigint, len: bigint, advice: number): number;
  /** malloc_trim(3): gives the allocator's free memory back to the system. 1 if it gave any. */
  mallocTrim(pad: number): number;
  /** flock(2): an advisory lock on an open file, released when its descriptor is closed. 0, or -1. */
  flock(fd: number, operation: number): number;
  /** errno as the last call left it. */
  errno(): number;
}

export const LOCK_EX = 2;
export const LOCK_NB = 4;
export const EWOULDBLOCK = 11;

export const MADV_DONTNEED = 4;

let loaded: Libc | undefined;
let failure: unknown;

/** The calls, or undefined (see `libcFailure` for why). */
export function libc(): Libc | undefined {
  if (loaded || failure !== undefined) return loaded;
  try {
    if (process.platform !== 'linux') throw new Error(`not Linux (${process.platform})`);
    const koffi = createRequire(import.meta.url)('koffi') as {
      load(lib: string): { func(signature: string): (...args: never[]) => number };
      errno(): number;
    };
    const lib = koffi.load('libc.so.6');
    loaded = {
      madvise: lib.func('int madvise(uintptr_t addr, size_t len, int advice)') as Libc['madvise'],
      mallocTrim: lib.func('int malloc_trim(size_t pad)') as Libc['mallocTrim'],
      flock: lib.func('int flock(int fd, int operation)') as Libc['flock'],
      errno: () => koffi.errno(),
    };
  } catch (err) {
    // Out of descriptors or memory for the moment (a connection flood): tried again next time.
    if (!isTransient(err)) failure = err;
  }
  return loaded;
}

/** Why `libc()` gave undefined for good (undefined when it may still load). */
export function libcFailure(): unknown {
  return failure;
}

/** A failure that says nothing lasting: no descriptor or no memory left at that moment. */
export function isTransient(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (code === 'EMFILE' || code === 'ENFILE' || code === 'ENOMEM' || code === 'EAGAIN') return true;
  // dlopen's failure comes as ERR_DLOPEN_FAILED, with the reason only in its message.
  return err instanceof Error && /Too many open files|Cannot allocate memory/.test(err.message);
}
