// The deprecation lifecycle (SPEC §3.4, §9.3; CONTRACT §9) through the whole pipeline, with the
// clock in the test's hands: headers per state, on 304s and errors too; brownout windows; 410
// naming the successor; the schedule at /v1/deprecations; refusal of bad entries, at start and
// when the file changes.

import { mkdtemp, readFile, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import anyTest, { type TestFn } from 'ava';
import { loadConfig } from '../common/config.js';
import { ApiError } from '../common/errors.js';
import { LocalBus } from '../common/local-bus.js';
import { ActorHost } from '../actors/host.js';
import { allRoutes, startService } from '../gateway/app.js';
import { Authenticator } from '../gateway/auth.js';
import { BusClient } from '../gateway/bus-client.js';
import { LifecycleError, LifecycleRegistry, parseEntries, type LifecycleEntry } from '../gateway/lifecycle.js';
import { LifecycleFile } from '../gateway/lifecycle-file.js';
import { createGateway, type Gateway } from '../gateway/pipeline.js';
import { ALL_SCOPES, type Answer, type Call, answerOf, assertProblem, capturingLog, freshTenant, removeDir, silentLog, tempDir, toRequest, token } from './helpers/edge-kit.js';
import { allPartitions } from '../common/partitions.js';

interface Context {
  dir: string;
  host: ActorHost;
  gateway: Gateway;
  registry: LifecycleRegistry;
  clock: { now: number };
  tok: string;
  orderId: string;
  call(c: Call): Promise<Answer>;
}

const test = anyTest as TestFn<Context>;
const SECRET = 'lifecycle-test-secret-0123456789abcdef';
const DEPRECATED_AT = '2026-01-01T00:00:00Z';
const SUNSET_AT = '2026-07-01T00:00:00Z';
const T0 = Date.parse('2026-03-01T12:00:00Z');

// Tests read many response shapes; the members they touch are asserted, not assumed.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const j = (a: Answer): any => a.json();

test.before(async (t) => {
  const dir = await tempDir('lifecycle');
  const config = loadConfig({ DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, PORT: '0' });
  const log = silentLog();
  const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 1000, log });
  const clock = { now: T0 };
  const registry = new LifecycleRegistry(() => clock.now);
  const routes = allRoutes({}, registry);
  registry.bind(routes);
  const gateway = createGateway({ routes, auth: new Authenticator(SECRET), bus: new BusClient(new LocalBus(host, 5000)), config, log, lifecycle: registry });
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('lifecycle') });
  const call = async (c: Call): Promise<Answer> => answerOf(await gateway.handle(toRequest(c)));
  const created = await call({ method: 'POST', path: '/v1/orders', headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' }, body: { currency: 'EUR' } });
  t.context = { dir, host, gateway, registry, clock, tok, orderId: j(created).id as string, call };
});

test.after.always(async (t) => {
  t.context.gateway?.close();
  await t.context.host?.close();
  await removeDir(t.context.dir);
});

const getOrder = (t: { context: Context }, headers: Record<string, string> = {}, id = t.context.orderId): Promise<Answer> =>
  t.context.call({ method: 'GET', path: `/v1/orders/${id}`, headers: { authorization: `Bearer ${t.context.tok}`, ...headers } });

const entry = (over: Partial<LifecycleEntry> = {}): LifecycleEntry => ({
  method: 'GET',
  path: '/v1/orders/{orderId}',
  state: 'deprecated',
  deprecatedAt: DEPRECATED_AT,
  successor: '/v2/orders/{orderId}',
  guide: '/docs/migration-v1-v2',
  ...over,
});

// The tests share one registry and clock, so they run one after another.
test.serial('an active route carries no lifecycle headers', async (t) => {
  t.context.registry.replace([]);
  const a = await getOrder(t);
  t.is(a.status, 200);
  t.is(a.headers.deprecation, undefined);
  t.is(a.headers.sunset, undefined);
  t.is(a.headers.link, undefined);
});

test.serial('deprecated: Deprecation @unix and Link to the guide and the successor, on 200, 304 and errors', async (t) => {
  t.context.registry.replace([entry()]);
  const a = await getOrder(t);
  t.is(a.status, 200);
  t.is(a.headers.deprecation, `@${Date.parse(DEPRECATED_AT) / 1000}`);
  t.is(a.headers.sunset, undefined);
  t.is(a.headers.link, `</docs/migration-v1-v2>; rel="deprecation", </v2/orders/${t.context.orderId}>; rel="successor-version"`);
  const cached = await getOrder(t, { 'if-none-match': a.headers.etag! });
  t.is(cached.status, 304);
  t.is(cached.headers.deprecation, a.headers.deprecation);
  t.is(cached.headers.link, a.headers.link);
  const missing = await getOrder(t, {}, 'ord_ff00000000000000000000');
  assertProblem(t, missing, 404, 'not-found');
  t.is(missing.headers.deprecation, a.headers.deprecation);
  const anonymous = await t.context.call({ method: 'GET', path: `/v1/orders/${t.context.orderId}` });
  assertProblem(t, anonymous, 401, 'unauthenticated');
  t.is(anonymous.headers.deprecation, a.headers.deprecation);
  // Other routes, and the same path under v2, stay active.
  t.is((await t.context.call({ method: 'GET', path: `/v2/orders/${t.context.orderId}`, headers: { authorization: `Bearer ${t.context.tok}` } })).headers.deprecation, undefined);
  t.is((await t.context.call({ method: 'GET', path: '/v1/orders', headers: { authorization: `Bearer ${t.context.tok}` } })).headers.deprecation, undefined);
});

test.serial('sunsetting: Sunset carries the HTTP-date (RFC 8594)', async (t) => {
  t.context.registry.replace([entry({ state: 'sunsetting', sunsetAt: SUNSET_AT })]);
  const a = await getOrder(t);
  t.is(a.status, 200);
  t.is(a.headers.sunset, 'Wed, 01 Jul 2026 00:00:00 GMT');
  t.truthy(a.headers.deprecation);
  t.regex(a.headers.link ?? '', /rel="deprecation"/);
});

test.serial('deprecated with a date already set: Sunset too; with no guide named, rel="deprecation" links the migration guide (v1) or the schedule', async (t) => {
  // SPEC §9.3: a deprecated endpoint sends Deprecation, Sunset and Link rel="deprecation" on every answer.
  t.context.registry.replace([entry({ sunsetAt: SUNSET_AT, guide: undefined })]);
  const a = await getOrder(t);
  t.is(a.status, 200);
  t.is(a.headers.sunset, 'Wed, 01 Jul 2026 00:00:00 GMT');
  t.is(a.headers.link, `</docs/migration-v1-v2>; rel="deprecation", </v2/orders/${t.context.orderId}>; rel="successor-version"`);
  t.context.registry.replace([entry({ guide: undefined, successor: undefined })]);
  const alone = await getOrder(t);
  t.is(alone.headers.link, '</docs/migration-v1-v2>; rel="deprecation"');
  t.is(alone.headers.sunset, undefined, 'no date set, none sent');
  // A v2 route has no guide of its own to point at: the schedule.
  t.context.registry.replace([entry({ path: '/v2/orders/{orderId}', guide: undefined, successor: undefined })]);
  const v2 = await t.context.call({ method: 'GET', path: `/v2/orders/${t.context.orderId}`, headers: { authorization: `Bearer ${t.context.tok}` } });
  t.is(v2.headers.link, '</v1/deprecations>; rel="deprecation"');
});

test.serial('brownout windows answer 410 by the clock, and only inside the window', async (t) => {
  const start = T0 + 3600_000;
  const end = start + 600_000;
  t.context.registry.replace([entry({ state: 'sunsetting', sunsetAt: SUNSET_AT, brownouts: [{ start: new Date(start).toISOString(), end: new Date(end).toISOString() }] })]);
  t.context.clock.now = start - 1;
  t.is((await getOrder(t)).status, 200);
  t.context.clock.now = start;
  const during = await getOrder(t);
  const p = assertProblem(t, during, 410, 'gone');
  t.is(p.successor, `/v2/orders/${t.context.orderId}`);
  t.is(p.lifecycle, 'brownout');
  t.regex(p.detail, /brownout/);
  t.regex(p.detail, new RegExp(`/v2/orders/${t.context.orderId}`));
  t.regex(during.headers.link ?? '', /rel="successor-version"/);
  t.is(during.headers.sunset, 'Wed, 01 Jul 2026 00:00:00 GMT');
  const schedule = j(await t.context.call({ method: 'GET', path: '/v1/deprecations' }));
  t.is(schedule.data[0].state, 'brownout');
  t.context.clock.now = end;
  t.is((await getOrder(t)).status, 200);
  t.context.clock.now = T0;
});

test.serial('retired: 410 gone naming the successor, with the same Link headers', async (t) => {
  t.context.registry.replace([entry({ state: 'retired', sunsetAt: SUNSET_AT })]);
  const a = await getOrder(t);
  const p = assertProblem(t, a, 410, 'gone');
  t.is(p.successor, `/v2/orders/${t.context.orderId}`);
  t.is(p.lifecycle, 'retired');
  t.regex(a.headers.link ?? '', new RegExp(`</v2/orders/${t.context.orderId}>; rel="successor-version"`));
  t.truthy(a.headers.deprecation);
  // A retired write is refused before it runs.
  t.context.registry.replace([entry({ method: 'POST', path: '/v1/orders', state: 'retired', successor: '/v2/orders' })]);
  const post = await t.context.call({ method: 'POST', path: '/v1/orders', headers: { authorization: `Bearer ${t.context.tok}`, 'content-type': 'application/json' }, body: { currency: 'EUR' } });
  t.is(assertProblem(t, post, 410, 'gone').successor, '/v2/orders');
  t.context.registry.replace([]);
});

test.serial('GET /v1/deprecations lists every non-active route with dates, successor, guide and upcoming brownouts', async (t) => {
  const past = { start: '2026-02-01T00:00:00Z', end: '2026-02-01T01:00:00Z' };
  const next = { start: '2026-04-01T00:00:00Z', end: '2026-04-01T01:00:00Z' };
  t.context.registry.replace([entry({ state: 'sunsetting', sunsetAt: SUNSET_AT, brownouts: [next, past] }), entry({ method: 'DELETE', path: '/v1/orders/{orderId}', state: 'retired' })]);
  const a = await t.context.call({ method: 'GET', path: '/v1/deprecations' });
  t.is(a.status, 200);
  const data = j(a).data as Record<string, unknown>[];
  t.is(data.length, 2);
  t.deepEqual(data.find((d) => d.method === 'GET'), {
    method: 'GET',
    path: '/v1/orders/{orderId}',
    state: 'sunsetting',
    deprecatedAt: DEPRECATED_AT,
    sunsetAt: SUNSET_AT,
    successor: '/v2/orders/{orderId}',
    guide: '/docs/migration-v1-v2',
    brownouts: [next],
  });
  t.is(data.find((d) => d.method === 'DELETE')?.state, 'retired');
  t.context.registry.replace([]);
  t.deepEqual(j(await t.context.call({ method: 'GET', path: '/v1/deprecations' })).data, []);
});

const routes = allRoutes();
const refused = (raw: unknown): string => {
  const err = (() => {
    try {
      parseEntries(raw, routes);
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  if (!(err instanceof LifecycleError)) throw new Error(`expected a LifecycleError for ${JSON.stringify(raw)}`);
  return err.message;
};

test('a 429 and a 413 on a deprecated route carry its Deprecation and Link too', async (t) => {
  const dir = await tempDir('lifecycle-refusals');
  t.teardown(() => removeDir(dir));
  const log = silentLog();
  const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 1000, log });
  t.teardown(() => host.close());
  const counted: string[] = [];
  const registry = new LifecycleRegistry(() => T0, { count: (route) => void counted.push(route) });
  const routes = allRoutes({}, registry);
  registry.bind(routes);
  registry.replace([entry(), entry({ method: 'POST', path: '/v1/orders', successor: '/v2/orders' })]);
  const config = loadConfig({ DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, PORT: '0', RATE_LIMIT_PER_SECOND: '1', RATE_LIMIT_BURST: '1' });
  const gateway = createGateway({ routes, auth: new Authenticator(SECRET), bus: new BusClient(new LocalBus(host, 5000)), config, log, lifecycle: registry });
  t.teardown(() => gateway.close());
  const headers = { authorization: `Bearer ${await token(SECRET, ALL_SCOPES, { tenant: freshTenant('refusals') })}` };
  const get = (): Promise<Answer> => gateway.handle(toRequest({ method: 'GET', path: '/v1/orders/ord_ff00000000000000000000', headers })).then(answerOf);
  // A burst of one per caller. The 413 comes first, charged to the address (its token was not
  // verified yet); then the token's first GET is served and its second limited.
  const big = answerOf(gateway.refuse(toRequest({ method: 'POST', path: '/v1/orders', headers }), new ApiError('payload-too-large', 'The body exceeds the limit.')));
  t.is(big.status, 413);
  t.truthy(big.headers.deprecation);
  t.regex(big.headers.link ?? '', /<\/v2\/orders>; rel="successor-version"/);
  t.is((await get()).status, 404);
  const limited = await get();
  assertProblem(t, limited, 429, 'rate-limited');
  t.truthy(limited.headers.deprecation);
  t.regex(limited.headers.link ?? '', /rel="successor-version"/);
  t.deepEqual(counted, ['GET /v1/orders/{orderId}'], 'only the call let in counts as residual traffic');
});

test('the DEPRECATIONS_FILE lock: one holder at a time, a stale lock taken over, a release removes only its own', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'lifecycle-lock-'));
  t.teardown(() => removeDir(dir));
  const path = join(dir, 'deprecations.json');
  await writeFile(path, '[]');
  const a = new LifecycleFile(path, new LifecycleRegistry(), silentLog());
  const b = new LifecycleFile(path, new LifecycleRegistry(), silentLog());
  const releaseA = await a.lock();
  await t.throwsAsync(b.lock(100), { message: /held by another gateway/ });
  releaseA();
  const releaseB = await b.lock(100);
  // A's release again (late, say): B's lock stays.
  releaseA();
  await t.throwsAsync(a.lock(100), { message: /held by another gateway/ });
  releaseB();
  // A lock left by a gateway that died, 11 s ago: taken over.
  await writeFile(`${path}.lock`, 'dead-gateway');
  const old = new Date(Date.now() - 11_000);
  await utimes(`${path}.lock`, old, old);
  const releaseC = await a.lock(1000);
  t.is(await readFile(`${path}.lock`, 'utf8') === 'dead-gateway', false);
  releaseC();
  await t.throwsAsync(readFile(`${path}.lock`), { code: 'ENOENT' });
});

test('bad entries are refused with a message naming the entry and the field', (t) => {
  t.notThrows(() => parseEntries([entry()], routes));
  t.regex(refused({ nope: 1 }), /JSON array/);
  t.regex(refused([entry(), entry({ path: '/v1/nowhere' })]), /entry 1 \(GET \/v1\/nowhere\): path names no GET route/);
  t.regex(refused([entry({ method: 'FETCH' as 'GET' })]), /entry 0: method must be one of/);
  t.regex(refused([entry({ state: 'gone' as 'retired' })]), /entry 0 \(GET \/v1\/orders\/\{orderId\}\): state must be/);
  t.regex(refused([entry({ deprecatedAt: 'yesterday' })]), /deprecatedAt must be an RFC 3339 date-time/);
  // Dates Date.parse would roll over or stretch: no such instant.
  for (const at of ['2026-02-30T00:00:00Z', '2027-02-29T00:00:00Z', '2100-02-29T00:00:00Z', '2026-04-31T00:00:00Z', '2026-01-01T24:00:00Z', '2026-13-01T00:00:00Z', '2026-01-01T00:00:60Z', '2026-01-01T00:00:00+24:00']) {
    t.regex(refused([entry({ deprecatedAt: at })]), /deprecatedAt must be an RFC 3339 date-time/, at);
  }
  t.notThrows(() => parseEntries([entry({ deprecatedAt: '2028-02-29T23:59:59.5+02:00' })], routes), 'a leap day, fractions and an offset are fine');
  t.regex(refused([entry({ state: 'sunsetting' })]), /sunsetAt is required for state sunsetting/);
  t.regex(refused([entry({ sunsetAt: '2025-01-01T00:00:00Z' })]), /sunsetAt must not be before deprecatedAt/);
  t.regex(refused([entry({ brownouts: [{ start: '2026-04-01T01:00:00Z', end: '2026-04-01T00:00:00Z' }] })]), /brownouts\[0\]: end must be after start/);
  t.regex(refused([entry({ successor: 'javascript:alert(1)' })]), /successor must be an absolute path or an http\(s\) URL/);
  // A Link header carries the target as is: a URI reference, ASCII only (RFC 3986, RFC 8288).
  for (const successor of ['/v2/prodücts/{productId}', 'https://example.com/€', '/v2/a b', '/v2/"q"']) {
    t.regex(refused([entry({ successor })]), /successor must be an absolute path or an http\(s\) URL in ASCII/, successor);
  }
  t.notThrows(() => parseEntries([entry({ successor: '/v2/prod%C3%BCcts/{productId}?x=1#y', guide: 'https://example.com/guide~v2' })], routes));
  t.regex(refused([entry(), entry()]), /entry 1 .*a second entry for the same route/);
  t.regex(refused([{ ...entry(), sunset: SUNSET_AT }]), /unknown field 'sunset'/);
});

test('a retired route, or one with a brownout to come, must name its successor when changed: the 410 points there', (t) => {
  const registry = new LifecycleRegistry(() => T0);
  registry.bind(routes);
  const KEY = 'GET /v1/orders/{orderId}';
  const changing = (e: LifecycleEntry): string => t.throws(() => registry.replace([e], KEY), { instanceOf: LifecycleError })!.message;
  t.regex(changing(entry({ state: 'retired', successor: undefined })), /entry 0 \(GET \/v1\/orders\/\{orderId\}\): successor is required with state retired/);
  const window = { start: '2026-04-01T00:00:00Z', end: '2026-04-01T01:00:00Z' };
  t.regex(changing(entry({ state: 'sunsetting', sunsetAt: SUNSET_AT, brownouts: [window], successor: undefined })), /successor is required with brownouts/);
  t.deepEqual(registry.entries(), [], 'a refused change changed nothing');
  // A window over before now answers no 410: it needs no successor.
  const over = { start: '2026-02-01T00:00:00Z', end: '2026-02-01T01:00:00Z' };
  t.deepEqual(registry.replace([entry({ successor: undefined, brownouts: [over] })], KEY), []);
  t.deepEqual(registry.replace([entry({ successor: undefined }), entry({ path: '/v1/orders', state: 'sunsetting', sunsetAt: SUNSET_AT, successor: undefined, brownouts: [] })], KEY), [], 'deprecated and sunsetting need none');
  // Entries not being changed (a file an earlier release wrote) are taken, and named back to warn about.
  t.deepEqual(registry.replace([entry({ state: 'retired', successor: undefined }), entry({ method: 'DELETE', state: 'sunsetting', sunsetAt: SUNSET_AT, successor: undefined, brownouts: [window] })]), [
    'GET /v1/orders/{orderId}: state retired',
    'DELETE /v1/orders/{orderId}: brownouts',
  ]);
  t.is(registry.entries().length, 2);
});

test('the discovery documents and the schedule may be deprecated but never retired or browned out', (t) => {
  const window = { start: '2026-04-01T00:00:00Z', end: '2026-04-01T01:00:00Z' };
  for (const path of ['/', '/v1', '/v2', '/v1/openapi.json', '/v2/openapi.json', '/v1/deprecations', '/docs', '/docs/migration-v1-v2', '/problems/{slug}']) {
    t.notThrows(() => parseEntries([entry({ path, successor: '/v2' })], routes), path);
    t.regex(refused([entry({ path, state: 'retired', successor: '/v2' })]), /the discovery documents and the schedule may be deprecated, never retired or browned out/, path);
    t.regex(refused([entry({ path, successor: '/v2', brownouts: [window] })]), /never retired or browned out/, path);
  }
});

test('a refused set of entries leaves the previous one in force', (t) => {
  const registry = new LifecycleRegistry();
  registry.bind(routes);
  registry.replace([entry()]);
  t.throws(() => registry.replace([entry({ state: 'sunsetting' })]), { instanceOf: LifecycleError });
  t.deepEqual(registry.entries(), [entry()]);
});

test('a bad DEPRECATIONS_FILE stops the service at start, naming the entry and field', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'lifecycle-start-'));
  try {
    const file = join(dir, 'deprecations.json');
    await writeFile(file, JSON.stringify([entry({ state: 'sunsetting' })]));
    const config = loadConfig({ PORT: '0', DATA_DIR: join(dir, 'data'), AUTH_JWT_SECRET: SECRET, DEPRECATIONS_FILE: file });
    const err = await t.throwsAsync(startService(config, silentLog()), { instanceOf: LifecycleError });
    t.regex(err!.message, new RegExp(`DEPRECATIONS_FILE ${file}: entry 0 \\(GET /v1/orders/\\{orderId\\}\\): sunsetAt is required`));
    await writeFile(file, '[{');
    await t.throwsAsync(startService(config, silentLog()), { message: /is not valid JSON/ });
    const missing = loadConfig({ PORT: '0', DATA_DIR: join(dir, 'data'), AUTH_JWT_SECRET: SECRET, DEPRECATIONS_FILE: join(dir, 'none.json') });
    await t.throwsAsync(startService(missing, silentLog()), { message: /does not exist/ });
  } finally {
    await removeDir(dir);
  }
});

test('a DEPRECATIONS_FILE an earlier release wrote, with entries answering 410 but naming no successor, starts the service with a warning', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'lifecycle-legacy-'));
  const lines: string[] = [];
  try {
    const file = join(dir, 'deprecations.json');
    await writeFile(
      file,
      '[{"method":"GET","path":"/v1/orders","state":"deprecated","deprecatedAt":"2026-01-01T00:00:00Z","brownouts":[{"start":"2026-02-01T00:00:00Z","end":"2026-02-01T01:00:00Z"}]},' +
        '{"method":"DELETE","path":"/v1/orders/{orderId}","state":"retired","deprecatedAt":"2026-01-01T00:00:00Z"}]',
    );
    const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: join(dir, 'data'), AUTH_JWT_SECRET: SECRET, DEPRECATIONS_FILE: file });
    const service = await startService(config, capturingLog(lines));
    try {
      t.deepEqual(service.lifecycle.entries().map((e) => `${e.method} ${e.path} ${e.state}`), ['GET /v1/orders deprecated', 'DELETE /v1/orders/{orderId} retired']);
      const warned = lines.map((l) => JSON.parse(l) as { level: number; msg: string; entries?: string[] }).filter((l) => l.msg.includes('without naming a successor'));
      // Only the retired entry answers 410: the brownout ended long ago.
      t.deepEqual(warned.map((l) => [l.level, l.entries]), [[40, ['DELETE /v1/orders/{orderId}: state retired']]]);
    } finally {
      await service.close();
    }
  } finally {
    await removeDir(dir);
  }
});

test('the file is watched: a good change applies, a bad one is logged and refused', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'lifecycle-watch-'));
  const lines: string[] = [];
  const registry = new LifecycleRegistry();
  registry.bind(routes);
  const file = new LifecycleFile(join(dir, 'deprecations.json'), registry, capturingLog(lines));
  try {
    await writeFile(file.path, '[]');
    file.load();
    file.watch(50);
    await writeFile(file.path, JSON.stringify([entry()]));
    await waitFor(() => registry.entries().length === 1);
    t.deepEqual(registry.entries(), [entry()]);
    await writeFile(file.path, JSON.stringify([entry({ path: '/v1/nowhere' })]));
    // The poll may also catch the file between writeFile's truncation and its write, and refuse
    // that as not JSON first: the refusal looked for is the one of the whole file.
    await waitFor(() => lines.some((l) => l.includes('lifecycle file refused') && l.includes('path names no GET route')));
    t.deepEqual(registry.entries(), [entry()]);
    // The operator plane's write-back replaces the file atomically and reads back the same.
    file.write([entry({ state: 'retired' })]);
    registry.replace([entry({ state: 'retired' })]);
    const again = new LifecycleRegistry();
    again.bind(routes);
    new LifecycleFile(file.path, again, silentLog()).load();
    t.is(again.entries()[0]?.state, 'retired');
  } finally {
    file.close();
    await removeDir(dir);
  }
});

async function waitFor(ok: () => boolean, ms = 5000): Promise<void> {
  const until = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > until) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}
