import { pino } from 'pino';

export type Logger = pino.Logger;

/** The levels pino takes, `silent` included: LOG_LEVEL must be one of them. */
export const LOG_LEVELS: readonly string[] = [...Object.keys(pino.levels.values), 'silent'];

/**
 * JSON logs to stdout. Authorization headers and signing secrets never reach a log line: we log
 * no request headers, and the redact list is a second guard for objects passed by mistake.
 */
export function createLogger(level: string, name: string): Logger {
  return pino(
    {
      name,
      level,
      redact: ['authorization', 'headers.authorization', '*.signingSecret', 'signingSecret', 'secret', '*.secret', 'secrets', '*.secrets'],
    },
    // Each line written as it is logged, not by an fs.write on libuv's threads a later turn
    // completes: the process may end at once after its last line (exitNow kills itself), and a
    // write still in flight went with it, now and then the fatal line of a storage failure
    // (flushLogSync cannot finish a write already under way). The service logs a few lines a
    // minute at most, none per request.
    pino.destination({ dest: 1, sync: true }),
  );
}

/** Writes out what the logger holds, before the process ends without its exit listeners. */
export function flushLogSync(log: Logger): void {
  const stream = (log as unknown as Record<symbol, { flushSync?: () => void } | undefined>)[pino.symbols.streamSym];
  try {
    stream?.flushSync?.();
  } catch {
    // Nothing more can be written; the process ends anyway.
  }
}
