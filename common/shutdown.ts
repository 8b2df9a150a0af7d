// How a process of the service stops on SIGTERM or SIGINT: gracefully, within a deadline.

import type { Logger } from './log.js';

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
      process.exit(1);
    }, deadlineMs).unref();
    close().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}
