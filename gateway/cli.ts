// What the command-line tools (`npm run token`, `npm run admin`) share: a misspelled option or
// a missing value is a usage error (exit 2) with the usage text, never a crash with a stack.

import { parseArgs, type ParseArgsConfig } from 'node:util';

export function usageError(usage: string, problem?: string): never {
  process.stderr.write(problem ? `${problem}\n${usage}` : usage);
  process.exit(2);
}

export function parseCommandLine<T extends ParseArgsConfig>(config: T, usage: string): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (err) {
    usageError(usage, err instanceof Error ? err.message : String(err));
  }
}
