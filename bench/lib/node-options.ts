// The node options the service runs with, read from where users start it: package.json's
// `start` script (the Procfile repeats them; test/launch.test.ts keeps the two in step). The
// bench starts the service with the same options, so it measures what `npm start` runs.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The options between `node` and the entry point in one command line, e.g. `--max-old-space-size=1024`. */
export function nodeOptionsOf(commandLine: string, entry: string): string[] {
  const at = commandLine.indexOf(` ${entry}`);
  const node = commandLine.lastIndexOf('node ', at);
  if (at === -1 || node === -1) throw new Error(`no "node … ${entry}" in: ${commandLine}`);
  return commandLine
    .slice(node + 'node '.length, at)
    .split(' ')
    .filter((a) => a !== '');
}

/** What `npm start` passes to node before `dist/gateway/main.js`. */
export function startNodeOptions(root: string): string[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  return nodeOptionsOf(pkg.scripts.start ?? '', 'dist/gateway/main.js');
}
