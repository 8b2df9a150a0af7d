// `npm run token` (node dist/gateway/token.js): prints a bearer token that the service's
// Authenticator accepts, signed with the secret the service would use for that DATA_DIR.

import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import anyTest, { type TestFn } from 'ava';
import { jwtSecret } from '../common/secret.js';
import { Authenticator } from '../gateway/auth.js';
import { ROOT, removeDir, tempDir } from './helpers/edge-kit.js';

interface Context {
  dirs: string[];
}

const test = anyTest as TestFn<Context>;
const CLI = join(ROOT, 'dist', 'gateway', 'token.js');

test.before((t) => {
  t.context = { dirs: [] };
});

test.after.always(async (t) => {
  await Promise.all(t.context.dirs.map((d) => removeDir(d)));
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function dataDir(t: { context: Context }): Promise<string> {
  const dir = await tempDir('token-cli');
  t.context.dirs.push(dir);
  return dir;
}

function run(args: string[], env: Record<string, string>): Promise<Run> {
  // Only what the CLI should read: no AUTH_JWT_SECRET or DATA_DIR leaks in from the test runner.
  const base: Record<string, string> = { PATH: process.env.PATH ?? '' };
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...base, ...env }, timeout: 20_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

function payloadOf(jwt: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')) as Record<string, unknown>;
}

test('--scope prints one JWT that the Authenticator accepts with those scopes', async (t) => {
  const dir = await dataDir(t);
  const r = await run(['--scope', 'orders:read'], { DATA_DIR: dir });
  t.is(r.code, 0, r.stderr);
  t.regex(r.stdout, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\n$/);
  const jwt = r.stdout.trim();
  // The secret was generated into DATA_DIR, which is where the service will read it from.
  const secret = jwtSecret(undefined, dir);
  t.is((await readFile(join(dir, 'jwt-secret'), 'utf8')).trim(), secret);
  const principal = await new Authenticator(secret).authenticate(`Bearer ${jwt}`);
  t.truthy(principal);
  t.deepEqual([...principal!.scopes], ['orders:read']);
  t.is(principal!.tenant, principal!.sub, 'tenant defaults to sub');
  t.true(principal!.sub.length > 0);
  const header = JSON.parse(Buffer.from(jwt.split('.')[0]!, 'base64url').toString('utf8')) as Record<string, unknown>;
  t.is(header.alg, 'HS256');
  const exp = payloadOf(jwt).exp as number;
  t.true(exp > Date.now() / 1000 + 29 * 86400 && exp < Date.now() / 1000 + 31 * 86400, 'expires in about 30 days');

  // A second run reuses the same secret: both tokens verify with it.
  const again = await run(['--scope', 'orders:read orders:write'], { DATA_DIR: dir });
  t.is(again.code, 0, again.stderr);
  const p2 = await new Authenticator(secret).authenticate(`Bearer ${again.stdout.trim()}`);
  t.deepEqual(new Set(p2!.scopes), new Set(['orders:read', 'orders:write']));
});

test('--tenant and --sub set those claims', async (t) => {
  const dir = await dataDir(t);
  const r = await run(['--scope', 'orders:read orders:write', '--tenant', 't1', '--sub', 'u1'], { DATA_DIR: dir });
  t.is(r.code, 0, r.stderr);
  const principal = await new Authenticator(jwtSecret(undefined, dir)).authenticate(`Bearer ${r.stdout.trim()}`);
  t.is(principal!.sub, 'u1');
  t.is(principal!.tenant, 't1');
  t.deepEqual(new Set(principal!.scopes), new Set(['orders:read', 'orders:write']));
  const claims = payloadOf(r.stdout.trim());
  t.is(claims.sub, 'u1');
  t.is(claims.tenant, 't1');
  t.is(claims.scope, 'orders:read orders:write');
});

test('AUTH_JWT_SECRET, when set, signs the token and no secret file is written', async (t) => {
  const dir = await dataDir(t);
  const secret = 'configured-secret-0123456789abcdef0123';
  const r = await run(['--scope', 'products:read'], { DATA_DIR: dir, AUTH_JWT_SECRET: secret });
  t.is(r.code, 0, r.stderr);
  const principal = await new Authenticator(secret).authenticate(`Bearer ${r.stdout.trim()}`);
  t.deepEqual([...principal!.scopes], ['products:read']);
  await t.throwsAsync(readFile(join(dir, 'jwt-secret'), 'utf8'), { code: 'ENOENT' });
});

test('a missing --scope exits 2 with the usage on stderr and no token', async (t) => {
  const dir = await dataDir(t);
  for (const args of [[], ['--tenant', 't1'], ['--scope', '']]) {
    const r = await run(args, { DATA_DIR: dir });
    t.is(r.code, 2, JSON.stringify(args));
    t.is(r.stdout, '');
    t.regex(r.stderr, /usage: .*--scope/);
  }
});

test('a misspelled option or a missing value is a usage error, not a crash', async (t) => {
  const dir = await dataDir(t);
  for (const args of [['--scopes', 'orders:read'], ['--scope'], ['--scope', 'orders:read', '--tenant']]) {
    const r = await run(args, { DATA_DIR: dir });
    t.is(r.code, 2, JSON.stringify(args));
    t.is(r.stdout, '');
    t.regex(r.stderr, /usage: .*--scope/);
    t.notRegex(r.stderr, /\n\s+at /, 'no stack trace');
  }
});

test('a DATA_DIR/jwt-secret shorter than 32 bytes is a configuration error: exit 2, the file named, no token', async (t) => {
  const dir = await dataDir(t);
  await writeFile(join(dir, 'jwt-secret'), 'hunter2\n');
  const r = await run(['--scope', 'orders:read'], { DATA_DIR: dir });
  t.is(r.code, 2, r.stderr);
  t.is(r.stdout, '');
  t.regex(r.stderr, new RegExp(`^configuration error: ${join(dir, 'jwt-secret')} must hold a secret of at least 32 bytes`));
  t.notRegex(r.stderr, /hunter2/);
  t.notRegex(r.stderr, /\n\s+at /, 'no stack trace');
});
