// Settings are checked at start (CONTRACT §1): a bad value stops the process with a message
// naming the variable, before anything listens.

import test from 'ava';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hostSettings } from '../actors/host.js';
import { authorityOf, ConfigError, loadConfig, originOf } from '../common/config.js';
import { jwtSecret as generatedSecret } from '../common/secret.js';
import { removeDir, ROOT, tempDir } from './helpers/edge-kit.js';

/** Every variable README's Configuration table names, so a new one is checked here too. */
function documentedVariables(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const table = readme.slice(readme.indexOf('## Configuration'), readme.indexOf('## The request pipeline'));
  const names = new Set<string>();
  for (const line of table.split('\n').filter((l) => l.startsWith('| `'))) {
    for (const m of (line.split('|')[1] ?? '').matchAll(/`([A-Z][A-Z0-9_]+)`/g)) names.add(m[1]!);
  }
  return [...names];
}

/** Starts an entry point with only `env` (and PATH); what it printed to stderr and how it ended. */
function launch(entry: string, env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [join(ROOT, 'dist', entry)], { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 10_000, killSignal: 'SIGKILL' }, (_err, _stdout, stderr) =>
      resolve({ code: child.exitCode, stderr }),
    );
  });
}

test('defaults load; REFUND_PROCESSING_MS and the retention settings are read', (t) => {
  const c = loadConfig({});
  t.is(c.refundProcessingMs, 500);
  t.is(c.operationRetentionHours, 24);
  t.is(c.eventRetentionDays, 30);
  t.is(loadConfig({ REFUND_PROCESSING_MS: '0' }).refundProcessingMs, 0);
});

test('IDEMPOTENCY_TTL_HOURS reaches the actor host as milliseconds, 24 hours by default', (t) => {
  t.is(hostSettings(loadConfig({})).idempotencyTtlMs, 24 * 3600_000);
  t.is(hostSettings(loadConfig({ IDEMPOTENCY_TTL_HOURS: '1' })).idempotencyTtlMs, 3600_000);
  for (const value of ['0', '-1', '1.5', 'day']) {
    const err = t.throws(() => loadConfig({ IDEMPOTENCY_TTL_HOURS: value }), { instanceOf: ConfigError });
    t.regex(err.message, /IDEMPOTENCY_TTL_HOURS/, value);
  }
});

test('STORAGE_RESERVE_MB reaches the actor host as bytes, 64 MB by default', (t) => {
  t.is(hostSettings(loadConfig({})).storageReserveBytes, 64 * 1024 * 1024);
  t.is(hostSettings(loadConfig({ STORAGE_RESERVE_MB: '0' })).storageReserveBytes, 0);
  t.is(hostSettings(loadConfig({ STORAGE_RESERVE_MB: '1' })).storageReserveBytes, 1024 * 1024);
  for (const value of ['-1', '1.5', 'lots', '']) {
    const err = t.throws(() => loadConfig({ STORAGE_RESERVE_MB: value }), { instanceOf: ConfigError });
    t.regex(err.message, /STORAGE_RESERVE_MB/, value);
  }
});

test('STORAGE_MAPPED_MB reaches the actor host as bytes, 32 MB by default, 0 for no limit', (t) => {
  t.is(hostSettings(loadConfig({})).mappedBudgetBytes, 32 * 1024 * 1024);
  t.is(hostSettings(loadConfig({ STORAGE_MAPPED_MB: '0' })).mappedBudgetBytes, 0);
  t.is(hostSettings(loadConfig({ STORAGE_MAPPED_MB: '256' })).mappedBudgetBytes, 256 * 1024 * 1024);
  for (const value of ['-1', '1.5', 'lots']) {
    const err = t.throws(() => loadConfig({ STORAGE_MAPPED_MB: value }), { instanceOf: ConfigError });
    t.regex(err.message, /STORAGE_MAPPED_MB/, value);
  }
});

test('a malformed or out-of-range value names its variable', (t) => {
  for (const [name, value] of [['REFUND_PROCESSING_MS', '-1'], ['REFUND_PROCESSING_MS', '600001'], ['OPERATION_RETENTION_HOURS', '0'], ['EVENT_RETENTION_DAYS', 'x'], ['WEBHOOK_RETRY_SCHEDULE', '5,x']] as const) {
    const err = t.throws(() => loadConfig({ [name]: value }), { instanceOf: ConfigError });
    t.regex(err.message, new RegExp(name), `${name}=${value}`);
  }
});

test('events must outlive the retries of their deliveries', (t) => {
  const err = t.throws(() => loadConfig({ EVENT_RETENTION_DAYS: '1', WEBHOOK_RETRY_SCHEDULE: '86400,86400' }), { instanceOf: ConfigError });
  t.regex(err.message, /EVENT_RETENTION_DAYS \(1\) must cover WEBHOOK_RETRY_SCHEDULE, which retries for 2\.0 days/);
  t.is(loadConfig({ EVENT_RETENTION_DAYS: '3', WEBHOOK_RETRY_SCHEDULE: '86400,86400' }).eventRetentionDays, 3);
  t.throws(() => loadConfig({ EVENT_RETENTION_DAYS: '2' }), { instanceOf: ConfigError }, 'the default schedule retries for about 2.8 days');
});

test('the origin printed for HOST puts an IPv6 address in brackets once, with a zone id escaped', (t) => {
  t.is(originOf('127.0.0.1', 8080), 'http://127.0.0.1:8080');
  t.is(originOf('localhost', 80), 'http://localhost:80');
  t.is(originOf('::', 53675), 'http://[::]:53675');
  t.is(originOf('::1', 8080), 'http://[::1]:8080');
  t.is(originOf('[::1]', 8080), 'http://[::1]:8080');
  t.is(originOf('fe80::1%eth0', 8080), 'http://[fe80::1%25eth0]:8080');
  t.is(authorityOf('::1', 50051), '[::1]:50051', 'as the operator plane line prints it');
  t.is(authorityOf('127.0.0.1', 50051), '127.0.0.1:50051');
});

test('a variable set to the empty string is refused by name, not read as its default', (t) => {
  const names = documentedVariables();
  t.true(names.length >= 25, names.join(' '));
  // '' is documented as off beside 0: the one variable where empty means something.
  const meaningful = new Set(['WEBHOOK_ALLOW_PRIVATE_TARGETS']);
  for (const name of names.filter((n) => !meaningful.has(n))) {
    const err = t.throws(() => loadConfig({ [name]: '' }), { instanceOf: ConfigError }, name);
    t.regex(err?.message ?? '', new RegExp(`^${name} is set but empty`), name);
  }
  t.false(loadConfig({ WEBHOOK_ALLOW_PRIVATE_TARGETS: '' }).webhookAllowPrivateTargets);
});

test('an empty HOST stops the gateway, and an empty ACTOR_PARTITIONS an actor node, with exit 2 naming the variable', async (t) => {
  const dir = await tempDir('config');
  t.teardown(() => removeDir(dir));
  const gateway = await launch('gateway/main.js', { HOST: '', PORT: '0', DATA_DIR: dir, LOG_LEVEL: 'silent' });
  t.is(gateway.code, 2, gateway.stderr);
  t.regex(gateway.stderr, /^configuration error: HOST is set but empty/);
  // Read as unset, this node would claim all 256 partitions beside the nodes that own them.
  const node = await launch('actors/main.js', { NATS_URL: 'nats://127.0.0.1:1', NODE_ID: 'empty-partitions', ACTOR_PARTITIONS: '', LOG_LEVEL: 'silent' });
  t.is(node.code, 2, node.stderr);
  t.regex(node.stderr, /^configuration error: ACTOR_PARTITIONS is set but empty/);
  // One that names no partitions is refused the same way.
  const bad = await launch('actors/main.js', { NATS_URL: 'nats://127.0.0.1:1', NODE_ID: 'bad-partitions', ACTOR_PARTITIONS: '0-999', LOG_LEVEL: 'silent' });
  t.is(bad.code, 2, bad.stderr);
  t.regex(bad.stderr, /^configuration error: ACTOR_PARTITIONS: '0-999' goes past the last partition/);
});

test('LOG_LEVEL takes pino\'s levels and silent; anything else is refused by name', async (t) => {
  for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']) t.is(loadConfig({ LOG_LEVEL: level }).logLevel, level);
  for (const level of ['foo', 'INFO', 'warning']) {
    const err = t.throws(() => loadConfig({ LOG_LEVEL: level }), { instanceOf: ConfigError }, level);
    t.regex(err?.message ?? '', new RegExp(`^LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent, got '${level}'`));
  }
  const dir = await tempDir('config');
  t.teardown(() => removeDir(dir));
  const gateway = await launch('gateway/main.js', { HOST: '127.0.0.1', PORT: '0', DATA_DIR: dir, LOG_LEVEL: 'foo' });
  t.is(gateway.code, 2, gateway.stderr);
  t.regex(gateway.stderr, /^configuration error: LOG_LEVEL must be one of/);
});

test('WEBHOOK_ALLOW_PRIVATE_TARGETS is 1 for on, unset, empty or 0 for off, and nothing else', (t) => {
  t.true(loadConfig({ WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' }).webhookAllowPrivateTargets);
  for (const off of [undefined, '', '0']) t.false(loadConfig({ WEBHOOK_ALLOW_PRIVATE_TARGETS: off }).webhookAllowPrivateTargets, String(off));
  for (const value of ['true', 'yes', 'on', 'TRUE', '2', ' 1']) {
    const err = t.throws(() => loadConfig({ WEBHOOK_ALLOW_PRIVATE_TARGETS: value }), { instanceOf: ConfigError }, value);
    t.regex(err?.message ?? '', /^WEBHOOK_ALLOW_PRIVATE_TARGETS must be 1 \(on\) or 0 \(off\)/, value);
  }
});

test('HOST and ADMIN_GRPC_HOST take an IPv6 address bare or in brackets; brackets around anything else are refused', (t) => {
  for (const name of ['HOST', 'ADMIN_GRPC_HOST'] as const) {
    const read = (value: string): string => {
      const c = loadConfig({ [name]: value });
      return name === 'HOST' ? c.host : c.adminGrpcHost;
    };
    t.is(read('[::1]'), '::1');
    t.is(read('::1'), '::1');
    t.is(read('[fe80::1%eth0]'), 'fe80::1%eth0');
    t.is(read('localhost'), 'localhost');
    for (const value of ['[127.0.0.1]', '[::1', '::1]', '[]']) {
      const err = t.throws(() => read(value), { instanceOf: ConfigError }, `${name}=${value}`);
      t.regex(err?.message ?? '', new RegExp(`^${name}: brackets may only hold an IPv6 address`));
    }
  }
});

test('AUTH_JWT_SECRET shorter than 32 bytes is refused by name without echoing it; the generated one is long enough', async (t) => {
  for (const secret of ['x', 'a'.repeat(31), 'é'.repeat(15)]) {
    const err = t.throws(() => loadConfig({ AUTH_JWT_SECRET: secret }), { instanceOf: ConfigError }, secret);
    t.regex(err?.message ?? '', /^AUTH_JWT_SECRET must be at least 32 bytes \(256 bits, RFC 7518 §3\.2\), got \d+$/);
  }
  t.is(loadConfig({ AUTH_JWT_SECRET: 'a'.repeat(32) }).jwtSecret, 'a'.repeat(32));
  t.is(loadConfig({ AUTH_JWT_SECRET: 'é'.repeat(16) }).jwtSecret, 'é'.repeat(16), 'counted in UTF-8 bytes, as it keys the HMAC');
  const dir = await tempDir('config');
  t.teardown(() => removeDir(dir));
  const generated = generatedSecret(undefined, dir);
  t.notThrows(() => loadConfig({ AUTH_JWT_SECRET: generated }));
});

test('a DATA_DIR/jwt-secret shorter than 32 bytes is refused naming the file, without echoing it; a generated one is read back', async (t) => {
  const dir = await tempDir('config-secret-file');
  t.teardown(() => removeDir(dir));
  const file = join(dir, 'jwt-secret');
  for (const secret of ['', 'short-secret\n', `${'a'.repeat(31)}\n`, `  ${'é'.repeat(15)}  \n`]) {
    writeFileSync(file, secret);
    const err = t.throws(() => generatedSecret(undefined, dir), { instanceOf: ConfigError }, JSON.stringify(secret));
    t.regex(err?.message ?? '', new RegExp(`^${file} must hold a secret of at least 32 bytes \\(256 bits, RFC 7518 §3\\.2\\), got ${Buffer.byteLength(secret.trim())};`));
    if (secret.trim()) t.false(err?.message.includes(secret.trim()), 'the secret was echoed');
  }
  writeFileSync(file, `${'a'.repeat(32)}\n`);
  t.is(generatedSecret(undefined, dir), 'a'.repeat(32));
  t.is(generatedSecret('configured-secret-wins-over-the-file-0123', dir), 'configured-secret-wins-over-the-file-0123');
  const fresh = join(dir, 'fresh');
  const generated = generatedSecret(undefined, fresh);
  t.true(Buffer.byteLength(generated) >= 32);
  t.is(generatedSecret(undefined, fresh), generated, 'the generated secret is read back as it is');
  t.deepEqual(readdirSync(fresh), ['jwt-secret'], 'nothing is left beside it');
  t.is(statSync(join(fresh, 'jwt-secret')).mode & 0o777, 0o600, 'readable by its owner only');

  writeFileSync(file, 'short-secret\n');
  const gateway = await launch('gateway/main.js', { HOST: '127.0.0.1', PORT: '0', DATA_DIR: dir, LOG_LEVEL: 'silent' });
  t.is(gateway.code, 2, gateway.stderr);
  t.regex(gateway.stderr, new RegExp(`^configuration error: ${file} must hold a secret of at least 32 bytes`));
});
