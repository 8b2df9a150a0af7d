// The operator plane over gRPC (issue 6 §5), from a real @grpc/grpc-js client against real
// servers on 127.0.0.1: grpc.health.v1.Health, the admin-scoped Operator service, the
// `npm run admin` CLI, and in cluster mode counts summed over gateways, changes reaching the
// other gateway through DEPRECATIONS_FILE, and health on actor nodes.

import * as grpc from '@grpc/grpc-js';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import anyTest, { type TestFn } from 'ava';
import { Authenticator } from '../gateway/auth.js';
import { loadConfig } from '../common/config.js';
import { loadProtos, operatorAddress, startOperator } from '../gateway/operator.js';
import { Caller, HttpClient, mintToken, type Claims } from './helpers/client.js';
import { ROOT, removeDir, silentLog } from './helpers/edge-kit.js';
import { startCluster, startEmbedded, type RunningService } from './helpers/service.js';

interface Context {
  dir: string;
  file: string;
  service: RunningService;
  address: string;
  admin: string;
}

const test = anyTest as TestFn<Context>;
const { health: Health, operator: Operator } = loadProtos();
const ROUTE = '/v1/orders/{orderId}';

// Replies are protobuf messages decoded to plain objects; tests assert the members they read.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Reply = any;

function unary(client: grpc.Client, method: string, request: object, token?: string): Promise<Reply> {
  const md = new grpc.Metadata();
  if (token !== undefined) md.set('authorization', `Bearer ${token}`);
  const fn = (client as unknown as Record<string, (req: object, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: Reply) => void) => void>)[method]!;
  return new Promise((done, failed) => fn.call(client, request, md, (err, res) => (err ? failed(err) : done(res))));
}

async function status(client: grpc.Client, method: string, request: object, token?: string): Promise<{ code: number; details: string }> {
  try {
    await unary(client, method, request, token);
  } catch (err) {
    return { code: (err as grpc.ServiceError).code, details: (err as grpc.ServiceError).details };
  }
  throw new Error(`${method} succeeded; a failure was expected`);
}

const https: HttpClient[] = [];

/** A caller over HTTP holding a token with these claims. */
async function callerAt(url: string, secret: string, claims: Claims): Promise<Caller> {
  const http = new HttpClient(url);
  https.push(http);
  return new Caller(http, claims.tenant ?? claims.sub, await mintToken(secret, claims));
}

function operatorAt(address: string): grpc.Client {
  return new Operator(address, grpc.credentials.createInsecure());
}

test.before(async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'operator-'));
  const file = join(dir, 'deprecations.json');
  await writeFile(file, '[]');
  const service = await startEmbedded({ ADMIN_GRPC_PORT: '0', DEPRECATIONS_FILE: file });
  t.context = {
    dir,
    file,
    service,
    address: `127.0.0.1:${service.adminPorts[0]!}`,
    admin: await mintToken(service.secret, { sub: 'ops', scope: 'admin' }),
  };
});

test.after.always(async (t) => {
  await Promise.all(https.map((h) => h.close()));
  await t.context.service?.close();
  await removeDir(t.context.dir);
});

test('npm run admin calls ADMIN_GRPC_HOST and ADMIN_GRPC_PORT by default, an IPv6 host in brackets', (t) => {
  const at = (host: string): string | undefined => operatorAddress(loadConfig({ ADMIN_GRPC_HOST: host, ADMIN_GRPC_PORT: '9090' }));
  t.is(at('[::1]'), '[::1]:9090');
  t.is(at('::1'), '[::1]:9090');
  t.is(at('127.0.0.1'), '127.0.0.1:9090');
  t.is(at('localhost'), 'localhost:9090');
  t.is(operatorAddress(loadConfig({})), undefined, 'no ADMIN_GRPC_PORT: no address to call');
});

test.serial('grpc.health.v1.Health answers Check and Watch', async (t) => {
  const client = new Health(t.context.address, grpc.credentials.createInsecure());
  try {
    t.deepEqual(await unary(client, 'check', { service: '' }), { status: 'SERVING' });
    t.deepEqual(await unary(client, 'check', { service: 'orders.operator.v1.Operator' }), { status: 'SERVING' });
    t.is((await status(client, 'check', { service: 'no.such.Service' })).code, grpc.status.NOT_FOUND);
    const stream = (client as unknown as { watch(req: object): grpc.ClientReadableStream<{ status: string }> }).watch({ service: '' });
    const first = await new Promise<{ status: string }>((done, failed) => {
      stream.once('data', done);
      stream.once('error', failed);
    });
    t.is(first.status, 'SERVING');
    stream.cancel();
  } finally {
    client.close();
  }
});

test.serial('Operator calls need a bearer token with the admin scope', async (t) => {
  const client = operatorAt(t.context.address);
  try {
    t.is((await status(client, 'getStatus', {})).code, grpc.status.UNAUTHENTICATED);
    t.is((await status(client, 'getStatus', {}, 'not-a-token')).code, grpc.status.UNAUTHENTICATED);
    const foreign = await mintToken('another-secret-entirely-0123456789', { sub: 'ops', scope: 'admin' });
    t.is((await status(client, 'getStatus', {}, foreign)).code, grpc.status.UNAUTHENTICATED);
    const reader = await mintToken(t.context.service.secret, { sub: 'ops', scope: 'orders:read orders:write' });
    const denied = await status(client, 'getStatus', {}, reader);
    t.is(denied.code, grpc.status.PERMISSION_DENIED);
    t.regex(denied.details, /admin/);
  } finally {
    client.close();
  }
});

test.serial('GetStatus names the role, the partitions owned and the uptime', async (t) => {
  const client = operatorAt(t.context.address);
  try {
    const s = await unary(client, 'getStatus', {}, t.context.admin);
    t.is(s.role, 'gateway');
    t.is(s.mode, 'embedded');
    t.is(s.partitions, '0-255');
    t.is(s.partitionCount, 256);
    t.true(s.uptimeSeconds > 0);
  } finally {
    client.close();
  }
});

test.serial('lifecycle changes apply at once, are written back to the file, and bad ones are refused', async (t) => {
  const { service, admin, file } = t.context;
  const api = await callerAt(service.url, service.secret, { sub: 'alice', tenant: 'ops-t', scope: 'orders:read orders:write' });
  const order = (await api.post('/v1/orders', { currency: 'EUR' })).json as { id: string };
  const client = operatorAt(t.context.address);
  try {
    t.is((await api.get(`/v1/orders/${order.id}`)).headers.deprecation, undefined);
    const deprecated = await unary(client, 'changeLifecycle', { action: 'DEPRECATE', method: 'GET', path: ROUTE, at: '2026-01-01T00:00:00Z', successor: '/v2/orders/{orderId}', guide: '/docs/migration-v1-v2' }, admin);
    t.true(deprecated.persisted);
    t.is(deprecated.entries[0].state, 'deprecated');
    const res = await api.get(`/v1/orders/${order.id}`);
    t.is(res.status, 200);
    t.is(res.headers.deprecation, `@${Date.parse('2026-01-01T00:00:00Z') / 1000}`);
    t.regex(res.headers.link ?? '', new RegExp(`</v2/orders/${order.id}>; rel="successor-version"`));
    t.is(JSON.parse(await readFile(file, 'utf8'))[0].state, 'deprecated');

    // Refused with a clear error, and nothing changes.
    const bad = await status(client, 'changeLifecycle', { action: 'SUNSET', method: 'GET', path: ROUTE, at: 'next tuesday' }, admin);
    t.is(bad.code, grpc.status.INVALID_ARGUMENT);
    t.regex(bad.details, /entry 0 \(GET \/v1\/orders\/\{orderId\}\): sunsetAt must be an RFC 3339 date-time/);
    const early = await status(client, 'changeLifecycle', { action: 'SUNSET', method: 'GET', path: ROUTE, at: '2025-01-01T00:00:00Z' }, admin);
    t.regex(early.details, /sunsetAt must not be before deprecatedAt/);
    const nowhere = await status(client, 'changeLifecycle', { action: 'RETIRE', method: 'GET', path: '/v1/nowhere' }, admin);
    t.is(nowhere.code, grpc.status.INVALID_ARGUMENT);
    t.regex(nowhere.details, /path names no GET route/);
    // A 410 names the successor, so retiring or browning out without one is refused.
    const noSuccessor = await status(client, 'changeLifecycle', { action: 'RETIRE', method: 'GET', path: '/v1/orders' }, admin);
    t.is(noSuccessor.code, grpc.status.INVALID_ARGUMENT);
    t.regex(noSuccessor.details, /\(GET \/v1\/orders\): successor is required with state retired/);
    await unary(client, 'changeLifecycle', { action: 'DEPRECATE', method: 'GET', path: '/v1/orders' }, admin);
    const window = { start: new Date(Date.now() - 60_000).toISOString(), end: new Date(Date.now() + 60_000).toISOString() };
    const noSuccessorBrownout = await status(client, 'changeLifecycle', { action: 'BROWNOUT', method: 'GET', path: '/v1/orders', ...window }, admin);
    t.is(noSuccessorBrownout.code, grpc.status.INVALID_ARGUMENT);
    t.regex(noSuccessorBrownout.details, /successor is required with brownouts/);
    await unary(client, 'changeLifecycle', { action: 'ACTIVATE', method: 'GET', path: '/v1/orders' }, admin);
    // Nor may the schedule, or the documents that lead to it, answer 410.
    for (const path of ['/v1', '/v1/deprecations', '/v1/openapi.json']) {
      const signpost = await status(client, 'changeLifecycle', { action: 'RETIRE', method: 'GET', path, successor: '/v2' }, admin);
      t.is(signpost.code, grpc.status.INVALID_ARGUMENT, path);
      t.regex(signpost.details, /never retired or browned out/, path);
    }
    t.is((await api.get('/v1/deprecations')).status, 200);
    t.is((await unary(client, 'listLifecycle', {}, admin)).entries[0].state, 'deprecated');
    t.is(JSON.parse(await readFile(file, 'utf8'))[0].state, 'deprecated');

    const sunset = await unary(client, 'changeLifecycle', { action: 'SUNSET', method: 'GET', path: ROUTE, at: '2027-01-01T00:00:00Z' }, admin);
    t.is(sunset.entries[0].sunsetAt, '2027-01-01T00:00:00Z');
    t.is((await api.get(`/v1/orders/${order.id}`)).headers.sunset, 'Fri, 01 Jan 2027 00:00:00 GMT');
    const now = Date.now();
    await unary(client, 'changeLifecycle', { action: 'BROWNOUT', method: 'GET', path: ROUTE, start: new Date(now - 60_000).toISOString(), end: new Date(now + 60_000).toISOString() }, admin);
    const browned = await api.get(`/v1/orders/${order.id}`);
    t.is(browned.status, 410);
    t.is(browned.json.successor, `/v2/orders/${order.id}`);
    t.is((await unary(client, 'listLifecycle', {}, admin)).entries[0].effectiveState, 'brownout');
    await unary(client, 'changeLifecycle', { action: 'RETIRE', method: 'GET', path: ROUTE }, admin);
    t.is((await api.get(`/v1/orders/${order.id}`)).status, 410);
    const active = await unary(client, 'changeLifecycle', { action: 'ACTIVATE', method: 'GET', path: ROUTE }, admin);
    t.deepEqual(active.entries, []);
    t.is((await api.get(`/v1/orders/${order.id}`)).status, 200);
    t.deepEqual(JSON.parse(await readFile(file, 'utf8')), []);
  } finally {
    client.close();
  }
});

test.serial('entries an earlier release wrote without a successor stay and block no other change; a change to one must name it', async (t) => {
  const { admin, file } = t.context;
  const client = operatorAt(t.context.address);
  try {
    await writeFile(
      file,
      '[{"method":"GET","path":"/v1/orders","state":"deprecated","deprecatedAt":"2026-01-01T00:00:00Z","brownouts":[{"start":"2026-02-01T00:00:00Z","end":"2026-02-01T01:00:00Z"}]},' +
        '{"method":"DELETE","path":"/v1/orders/{orderId}","state":"retired","deprecatedAt":"2026-01-01T00:00:00Z"}]',
    );
    // A change reads the file first: the older entries come along and are kept.
    const changed = await unary(client, 'changeLifecycle', { action: 'DEPRECATE', method: 'GET', path: ROUTE, successor: '/v2/orders/{orderId}' }, admin);
    t.deepEqual(changed.entries.map((e: { method: string; path: string; state: string }) => `${e.method} ${e.path} ${e.state}`).sort(), ['DELETE /v1/orders/{orderId} retired', 'GET /v1/orders deprecated', `GET ${ROUTE} deprecated`]);
    // A window already over answers no 410, so needs no successor.
    const over = await unary(client, 'changeLifecycle', { action: 'BROWNOUT', method: 'GET', path: '/v1/orders', start: '2026-03-01T00:00:00Z', end: '2026-03-01T01:00:00Z' }, admin);
    t.is(over.entries.find((e: { path: string }) => e.path === '/v1/orders').brownouts.length, 2);
    const retired = await status(client, 'changeLifecycle', { action: 'RETIRE', method: 'DELETE', path: ROUTE }, admin);
    t.is(retired.code, grpc.status.INVALID_ARGUMENT);
    t.regex(retired.details, /\(DELETE \/v1\/orders\/\{orderId\}\): successor is required with state retired/);
    for (const [method, path] of [['GET', '/v1/orders'], ['DELETE', ROUTE], ['GET', ROUTE]]) await unary(client, 'changeLifecycle', { action: 'ACTIVATE', method, path }, admin);
    t.deepEqual(JSON.parse(await readFile(file, 'utf8')), []);
  } finally {
    client.close();
  }
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function admin(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(process.execPath, [join(ROOT, 'dist', 'gateway', 'admin.js'), ...args], { env: { PATH: process.env.PATH ?? '', ...env } }, (err, stdout, stderr) => {
      done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

test.serial('npm run admin: status, deprecate, usage, activate, and usage errors', async (t) => {
  const { service, admin: token, address } = t.context;
  const opts = ['--address', address, '--token', token];
  const s = await admin(['status', ...opts]);
  t.is(s.code, 0, s.stderr);
  t.is(JSON.parse(s.stdout).role, 'gateway');

  const dep = await admin(['deprecate', '--path', '/v1/orders', '--successor', '/v2/orders', ...opts]);
  t.is(dep.code, 0, dep.stderr);
  t.is(JSON.parse(dep.stdout).entries[0].path, '/v1/orders');
  const api = await callerAt(service.url, service.secret, { sub: 'cli-caller', tenant: 'cli-t', scope: 'orders:read' });
  for (let i = 0; i < 3; i++) t.truthy((await api.get('/v1/orders')).headers.deprecation);
  const usage = await admin(['usage', '--route', 'GET /v1/orders', ...opts]);
  t.is(usage.code, 0, usage.stderr);
  t.deepEqual(JSON.parse(usage.stdout).routes[0], { route: 'GET /v1/orders', total: 3, callers: [{ principal: '["cli-t","cli-caller"]', count: 3, lastDay: new Date().toISOString().slice(0, 10) }] });
  t.is(JSON.parse((await admin(['deprecations', ...opts])).stdout).entries.length, 1);

  // The token is minted from the service's secret when none is given, as `npm run token` does.
  const minted = await admin(['activate', '--path', '/v1/orders'], { AUTH_JWT_SECRET: service.secret, ADMIN_GRPC_PORT: address.split(':')[1]! });
  t.is(minted.code, 0, minted.stderr);
  t.deepEqual(JSON.parse(minted.stdout).entries, []);

  const refused = await admin(['sunset', '--path', '/v1/orders', '--at', 'soon', ...opts]);
  t.is(refused.code, 1);
  t.regex(refused.stderr, /^INVALID_ARGUMENT: .*sunsetAt must be an RFC 3339 date-time/);
  t.is((await admin(['frobnicate', ...opts])).code, 2);
  t.is((await admin(['retire', ...opts])).code, 2);
  const noAddress = await admin(['status']);
  t.is(noAddress.code, 2);
  t.regex(noAddress.stderr, /ADMIN_GRPC_PORT/);
});

function freePort(): Promise<number> {
  return new Promise((done, failed) => {
    const srv = createServer();
    srv.once('error', failed);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => done(port));
    });
  });
}

test.serial('cluster: counts add up over gateways, a change reaches the other gateway through the file, actor nodes answer health', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'operator-cluster-'));
  const file = join(dir, 'deprecations.json');
  await writeFile(file, JSON.stringify([{ method: 'GET', path: ROUTE, state: 'deprecated', deprecatedAt: '2026-01-01T00:00:00Z' }]));
  const actorPort = await freePort();
  let cluster: RunningService | undefined;
  const clients: grpc.Client[] = [];
  try {
    cluster = await startCluster({ ADMIN_GRPC_PORT: '0', DEPRECATIONS_FILE: file }, { 'e2e-low': { ADMIN_GRPC_PORT: String(actorPort) } });
    const secret = cluster.secret;
    const adminToken = await mintToken(secret, { sub: 'ops', scope: 'admin' });
    const [g0, g1] = cluster.urls;
    const calls = async (url: string, sub: string, n: number): Promise<void> => {
      const api = await callerAt(url, secret, { sub, tenant: 'cl', scope: 'orders:read' });
      for (let i = 0; i < n; i++) t.truthy((await api.get('/v1/orders/ord_ff00000000000000000000')).headers.deprecation);
    };
    await calls(g0!, 'alice', 3);
    await calls(g1!, 'alice', 2);
    await calls(g1!, 'bob', 4);
    const op0 = operatorAt(`127.0.0.1:${cluster.adminPorts[0]!}`);
    const op1 = operatorAt(`127.0.0.1:${cluster.adminPorts[1]!}`);
    clients.push(op0, op1);
    // Gateway 1 flushes on its own, once a second; gateway 0 flushes before it reads.
    let read: Reply;
    for (let tries = 0; tries < 50; tries++) {
      read = await unary(op0, 'getUsage', { route: `GET ${ROUTE}` }, adminToken);
      if (read.routes[0]?.total === 9) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    t.deepEqual(read.routes[0].callers.map((c: { principal: string; count: number }) => [c.principal, c.count]), [['["cl","alice"]', 5], ['["cl","bob"]', 4]]);
    // `since` names a day the calendar has.
    for (const since of ['2026-1-1', '2026-13-01', '2026-02-31', '2027-02-29', '0000-00-00', '9999-99-99']) {
      t.is((await status(op0, 'getUsage', { route: `GET ${ROUTE}`, since }, adminToken)).code, grpc.status.INVALID_ARGUMENT, since);
    }
    t.is((await unary(op0, 'getUsage', { route: `GET ${ROUTE}`, since: '2028-02-29' }, adminToken)).routes.length, 0, 'a leap day, after every call');

    const g1Api = await callerAt(g1!, secret, { sub: 'carol', tenant: 'cl', scope: 'orders:read' });
    await unary(op0, 'changeLifecycle', { action: 'RETIRE', method: 'GET', path: ROUTE, successor: '/v2/orders/{orderId}' }, adminToken);
    let gone = 0;
    for (let tries = 0; tries < 60 && gone !== 410; tries++) {
      gone = (await g1Api.get('/v1/orders/ord_ff00000000000000000000')).status;
      if (gone !== 410) await new Promise((r) => setTimeout(r, 100));
    }
    t.is(gone, 410, 'the other gateway picked the change up from the file');
    t.is((await unary(op1, 'listLifecycle', {}, adminToken)).entries[0].state, 'retired');
    // Two changes through two gateways at once, the second before its gateway polled the file
    // for the first: both land, in the file and on both gateways.
    await Promise.all([
      unary(op0, 'changeLifecycle', { action: 'DEPRECATE', method: 'GET', path: '/v1/articles' }, adminToken),
      unary(op1, 'changeLifecycle', { action: 'DEPRECATE', method: 'GET', path: '/v1/events' }, adminToken),
    ]);
    const paths = async (op: grpc.Client): Promise<string[]> =>
      ((await unary(op, 'listLifecycle', {}, adminToken)).entries as { path: string }[]).map((e) => e.path).sort();
    let seen: string[] = [];
    for (let tries = 0; tries < 60; tries++) {
      seen = await paths(op0);
      if (seen.length === 3 && (await paths(op1)).length === 3) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    t.deepEqual(seen, ['/v1/articles', '/v1/events', ROUTE].sort());
    t.deepEqual(await paths(op1), seen);

    const node = new Health(`127.0.0.1:${actorPort}`, grpc.credentials.createInsecure());
    clients.push(node);
    t.deepEqual(await unary(node, 'check', { service: '' }), { status: 'SERVING' });
    const nodeOp = operatorAt(`127.0.0.1:${actorPort}`);
    clients.push(nodeOp);
    // This node was started without AUTH_JWT_SECRET: health yes, operator calls no.
    t.is((await status(nodeOp, 'getStatus', {}, adminToken)).code, grpc.status.UNAUTHENTICATED);
  } finally {
    for (const c of clients) c.close();
    await cluster?.close();
    await removeDir(dir);
  }
});

test('an actor node reports its role and partitions, refuses lifecycle calls, and says NOT_SERVING to watchers as it stops', async (t) => {
  const secret = 'actor-node-secret-0123456789abcdef';
  const server = await startOperator(
    { role: 'actors', mode: 'cluster', nodeId: 'node-a', partitions: Array.from({ length: 128 }, (_, i) => i), auth: new Authenticator(secret), log: silentLog() },
    '127.0.0.1',
    0,
  );
  const address = `127.0.0.1:${server.port}`;
  const op = operatorAt(address);
  const health = new Health(address, grpc.credentials.createInsecure());
  try {
    const token = await mintToken(secret, { sub: 'ops', scope: 'admin' });
    const s = await unary(op, 'getStatus', {}, token);
    t.like(s, { role: 'actors', nodeId: 'node-a', mode: 'cluster', partitions: '0-127', partitionCount: 128 });
    t.is((await status(op, 'listLifecycle', {}, token)).code, grpc.status.UNIMPLEMENTED);
    t.is((await status(op, 'getUsage', {}, token)).code, grpc.status.UNIMPLEMENTED);
    const stream = (health as unknown as { watch(req: object): grpc.ClientReadableStream<{ status: string }> }).watch({ service: '' });
    const seen: string[] = [];
    const ended = new Promise<void>((done) => {
      stream.on('data', (m: { status: string }) => {
        seen.push(m.status);
        if (seen.length === 1) void server.close();
      });
      stream.on('end', done);
      stream.on('error', () => done());
    });
    await ended;
    t.deepEqual(seen, ['SERVING', 'NOT_SERVING']);
  } finally {
    op.close();
    health.close();
    await server.close();
  }
});

test('a gateway started with ADMIN_GRPC_PORT=0 prints the operator plane port it got, and health answers there', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'operator-launch-'));
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'gateway', 'main.js')], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ADMIN_GRPC_PORT: '0', DATA_DIR: dir, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  let out = '';
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  let health: grpc.Client | undefined;
  try {
    const printed = await new Promise<string>((done, failed) => {
      const timer = setTimeout(() => failed(new Error(`no operator plane line within 15 s:\n${out}`)), 15_000);
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /^operator plane on (127\.0\.0\.1:(\d+))$/m.exec(out);
        if (m && m[2] !== '0') {
          clearTimeout(timer);
          done(m[1]!);
        }
      });
      void exited.then(() => {
        clearTimeout(timer);
        failed(new Error(`exited before printing the operator plane:\n${out}`));
      });
    });
    t.regex(out, /^orders-api listening on http:\/\/127\.0\.0\.1:\d+ \(embedded mode\)$/m, 'the listening line keeps its shape');
    health = new Health(printed, grpc.credentials.createInsecure());
    t.deepEqual(await unary(health, 'check', { service: '' }), { status: 'SERVING' });
  } finally {
    health?.close();
    child.kill('SIGTERM');
    const stuck = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(stuck);
    await removeDir(dir);
  }
});
