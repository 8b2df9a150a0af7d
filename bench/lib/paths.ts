// Where things are, whether the bench runs compiled (dist/bench/...) or from source under tsx
// (bench/...). Servers always run as separate processes, so the paths here are what we hand to
// `node` in a child.
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** True when this file is the TypeScript source run through tsx rather than tsc output. */
export const fromSource = import.meta.url.endsWith('.ts');

function findRoot(start: string): string {
  let dir = start;
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'tsconfig.json'))) return dir;
    dir = dirname(dir);
  }
  throw new Error(`cannot find the project root above ${start}`);
}

export const projectRoot = findRoot(here);
/** bench/ folder holding the compiled (or source) scenario scripts. */
export const benchDir = resolve(here, '..');
export const resultsDir = join(projectRoot, 'bench', 'results');

/** The command line that runs one of our own bench entry points (baselines, scenarios). */
export function benchEntry(relative: string): { cmd: string; args: string[] } {
  const file = join(benchDir, fromSource ? relative.replace(/\.js$/, '.ts') : relative);
  return fromSource
    ? { cmd: process.execPath, args: ['--import', 'tsx', file] }
    : { cmd: process.execPath, args: [file] };
}

/** The service's compiled entry points; the service is only ever benchmarked compiled. */
export const serviceGatewayMain = join(projectRoot, 'dist', 'gateway', 'main.js');
export const serviceActorsMain = join(projectRoot, 'dist', 'actors', 'main.js');
