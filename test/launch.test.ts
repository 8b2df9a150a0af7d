// The service's node options live in package.json's start scripts and the Procfile; the bench
// reads them from `npm start`. All three must say the same, or the bench measures a process users
// never run, and one mode runs without the heap settings the others have.
import test from 'ava';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { nodeOptionsOf, startNodeOptions } from '../bench/lib/node-options.js';
import { ROOT as root } from './helpers/edge-kit.js';

const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
const procfile = new Map(
  readFileSync(join(root, 'Procfile'), 'utf8')
    .split('\n')
    .filter((line) => line.includes(':'))
    .map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1)] as const),
);

test('npm start runs the gateway with an old-space limit and a larger young generation, and the bench reads the same options', (t) => {
  const options = startNodeOptions(root);
  t.true(
    options.some((o) => /^--max-old-space-size=\d+$/.test(o)),
    `npm start: ${options.join(' ')}`,
  );
  t.true(
    options.some((o) => /^--max-semi-space-size=\d+$/.test(o)),
    `npm start: ${options.join(' ')}`,
  );
  t.deepEqual(nodeOptionsOf(scripts['start']!, 'dist/gateway/main.js'), options);
});

test('start:actors and both Procfile node processes run with the options of npm start', (t) => {
  const options = startNodeOptions(root);
  t.deepEqual(nodeOptionsOf(scripts['start:actors']!, 'dist/actors/main.js'), options);
  t.deepEqual(nodeOptionsOf(procfile.get('gateway') ?? '', 'dist/gateway/main.js'), options);
  t.deepEqual(nodeOptionsOf(procfile.get('actors') ?? '', 'dist/actors/main.js'), options);
});

test('nodeOptionsOf reads the options between node and the entry point, and refuses a line without them', (t) => {
  t.deepEqual(nodeOptionsOf('tsc -p . && node --a=1  --b dist/x.js', 'dist/x.js'), ['--a=1', '--b']);
  t.deepEqual(nodeOptionsOf('X=1 node dist/x.js', 'dist/x.js'), []);
  t.throws(() => nodeOptionsOf('tsx dist/x.js', 'dist/x.js'));
  t.throws(() => nodeOptionsOf('node dist/y.js', 'dist/x.js'));
});
