// What the project's small command-line tools share (`npm run token`, `admin`, `webhooks:listen`):
// options parsed with node:util, and a usage error (exit 2, no stack) for anything it refuses.

import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ConfigError } from './config.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Prints the problem and the usage line, and exits 2. */
export function usageError(usage: string, problem?: string): never {
  process.stderr.write(problem ? `${problem}\n${usage}` : usage);
  process.exit(2);
}

/** The parsed option values; a misspelled option or a missing value is a usage error. */
export function cliOptions<O extends Options>(usage: string, options: O): ReturnType<typeof parseArgs<{ options: O }>>['values'] {
  try {
    return parseArgs({ options }).values;
  } catch (err) {
    usageError(usage, err instanceof Error ? err.message : String(err));
  }
}

/** parseArgs with positionals and the rest of its config; a refusal is a usage error. */
export function parseCommandLine<T extends ParseArgsConfig>(config: T, usage: string): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (err) {
    usageError(usage, err instanceof Error ? err.message : String(err));
  }
}

/** `read()`, with a ConfigError printed as the service prints it (no stack) and exit 2. */
export function configured<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`configuration error: ${err.message}\n`);
    process.exit(2);
  }
}
