// How a process of the service stops on SIGTERM or SIGINT: gracefully, within a deadline.

import { flushLogSync, type Logger } from './log.js';

/**
 * A graceful stop waits for writes in flight to be flushed, and a stalled disk or an LMDB that
 * stopped settling commits can hold it forever. Past this it gives up: the process exits 1, as a
 * supervisor would end it, and what was acknowledged is on disk already.
 */
export const SHUTDOWN_DEADLINE_MS = 15_000;

/** Stops on the first SIGTERM or SIGINT with `close`: exit 0 once it is done, 1 if it fails or takes past SHUTDOWN_DEADLINE_MS. */
export function stopOnSignals(close: () => Promise<unknown>, log: Logger, deadlineMs = SHUTDOWN_DEADLINE_MS): void {
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    setTimeout(() => {
      log.error({ deadlineMs }, 'shutdown did not finish in time; exiting');
      exitNow(1, log);
    }, deadlineMs).unref();
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        exitNow(1, log);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

/**
 * Ends the process at once with `code`, without running the 'exit' listeners. lmdb-js closes its
 * environment in one, taking a lock that a write transaction LMDB refused to begin never gave back
 * (lmdb-js 3.5.6, WriteWorker::Write after MDB_PANIC): process.exit then hung for good, with the
 * node answering nothing and ignoring SIGTERM. LMDB needs no close to be consistent on disk. The
 * log is flushed first, since its own flush on exit is one of those listeners.
 */
export function exitNow(code: number, log?: Logger): never {
  if (log) flushLogSync(log);
  process.removeAllListeners('exit');
  process.exit(code);
}
