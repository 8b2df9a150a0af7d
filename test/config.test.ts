// Settings are checked at start (CONTRACT §1): a bad value stops the process with a message
// naming the variable, before anything listens.

import test from 'ava';
import { hostSettings } from '../actors/host.js';
import { ConfigError, loadConfig, originOf } from '../common/config.js';

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
});
