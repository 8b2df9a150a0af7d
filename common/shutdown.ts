// How a process of the service stops on SIGTERM or SIGINT: gracefully, within a deadline.

import { writeSync } from 'node:fs';
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
    // Unref'd: a close that waits for good on a flush lmdb-js dropped (Store.close awaits it)
    // leaves nothing else to keep the process up, and it ends by itself, through lmdb-js's close.
    setTimeout(() => {
      log.error({ deadlineMs }, 'shutdown did not finish in time; exiting');
      exitNow(1, `shutdown did not finish within ${deadlineMs} ms; exiting`, log);
    }, deadlineMs).unref();
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        exitNow(1, 'shutdown failed', log);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

/**
 * Ends the process at once, without the 'exit' listeners and without waiting for libuv's thread
 * pool. lmdb-js closes its environment in an exit listener, taking a lock that a write transaction
 * LMDB refused to begin never gave back (lmdb-js 3.5.6, WriteWorker::Write after MDB_PANIC), and
 * process.exit also waits for every pool thread, one of which may be blocked in that lock or in a
 * stalled fdatasync: either way the node hung for good, answering nothing and ignoring SIGTERM.
 * So the process kills itself (SIGKILL; a supervisor restarts it as after any other exit), and
 * `code` is used only where signals cannot be sent. LMDB needs no close to be consistent on disk.
 * The log is flushed first, since its own flush on exit is one of those listeners, and `message`
 * is written to stderr at once as well: the log's own write may be what a blocked pool holds up.
 */
export function exitNow(code: number, message: string, log?: Logger): never {
  if (log) flushLogSync(log);
  writeSync(2, `${message}\n`);
  process.removeAllListeners('exit');
  process.kill(process.pid, 'SIGKILL');
  process.exit(code);
}
