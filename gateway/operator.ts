// The operator plane over gRPC (issue 6 §5), definitions in proto/*.proto: the standard
// grpc.health.v1.Health on every process, and orders.operator.v1.Operator to list and change
// lifecycle entries, read residual traffic, and read the node's status. Bound to ADMIN_GRPC_HOST
// (127.0.0.1 by default); every Operator call needs a bearer token with the `admin` scope in
// the `authorization` metadata, verified like an HTTP request's (gateway/auth.ts).

import { performance } from 'node:perf_hooks';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { authorityOf, type Config } from '../common/config.js';
import { ApiError } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import { formatPartitions } from '../common/partitions.js';
import type { Authenticator } from './auth.js';
import { LifecycleError, realDay, stateAt, type LifecycleEntry, type LifecycleRegistry } from './lifecycle.js';
import type { LifecycleFile } from './lifecycle-file.js';
import type { Method } from './router.js';
import type { RouteUsage } from './usage.js';

export const ADMIN_SCOPE = 'admin';
export const OPERATOR_SERVICE = 'orders.operator.v1.Operator';

/**
 * The address `npm run admin` calls unless told another: the node's ADMIN_GRPC_HOST and port.
 * The host is kept without brackets, so an IPv6 one gets them here, or `::1:9090` names no port.
 */
export function operatorAddress(config: Pick<Config, 'adminGrpcHost' | 'adminGrpcPort'>): string | undefined {
  return config.adminGrpcPort ? authorityOf(config.adminGrpcHost, config.adminGrpcPort) : undefined;
}

// dist/gateway/operator.js → the project root is two levels up; the .proto files are not compiled.
const PROTO_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'proto');

/** The loaded service definitions (shared with the CLI and the tests' clients). */
export function loadProtos(): { health: grpc.ServiceClientConstructor; operator: grpc.ServiceClientConstructor } {
  const def = protoLoader.loadSync([join(PROTO_DIR, 'health.proto'), join(PROTO_DIR, 'operator.proto')], {
    keepCase: false,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  // loadPackageDefinition builds its namespaces at run time; these two paths are in the files above.
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
    orders: { operator: { v1: { Operator: grpc.ServiceClientConstructor } } };
  };
  return { health: pkg.grpc.health.v1.Health, operator: pkg.orders.operator.v1.Operator };
}

export interface OperatorDeps {
  role: 'gateway' | 'actors';
  mode: 'embedded' | 'cluster';
  nodeId: string;
  partitions: readonly number[];
  /** Undefined where no JWT secret is known (an actor node without AUTH_JWT_SECRET): Operator calls are refused. */
  auth: Authenticator | undefined;
  /** Gateways only. */
  lifecycle?: { registry: LifecycleRegistry; file: LifecycleFile | undefined };
  /** Gateways only: residual traffic over every owner. */
  readUsage?: (opts: { route?: string; since?: string; top: number }) => Promise<RouteUsage[]>;
  log: Logger;
}

export interface OperatorServer {
  port: number;
  close(): Promise<void>;
}

interface ChangeRequest {
  method: string;
  path: string;
  action: string;
  at: string;
  successor: string;
  guide: string;
  start: string;
  end: string;
}

const STARTED = Date.now();

type Unary<Req, Res> = grpc.handleUnaryCall<Req, Res>;

/** A day as `since` names one: YYYY-MM-DD, and a day the calendar has. */
function isDay(s: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  return m !== null && realDay(Number(m[1]), Number(m[2]), Number(m[3]));
}

function fail(code: grpc.status, details: string): grpc.ServiceError {
  return Object.assign(new Error(details), { code, details, metadata: new grpc.Metadata() });
}

/** Starts the gRPC server on host:port (0 picks a free port). */
export async function startOperator(deps: OperatorDeps, host: string, port: number): Promise<OperatorServer> {
  const { health, operator } = loadProtos();
  const server = new grpc.Server();
  let serving = true;
  const watchers = new Set<grpc.ServerWritableStream<{ service: string }, { status: string }>>();
  const statusOf = (service: string): string => (service === '' || service === OPERATOR_SERVICE ? (serving ? 'SERVING' : 'NOT_SERVING') : 'SERVICE_UNKNOWN');

  server.addService(health.service, {
    check: ((call, cb) => {
      const status = statusOf(call.request.service);
      if (status === 'SERVICE_UNKNOWN') cb(fail(grpc.status.NOT_FOUND, `unknown service '${call.request.service}'`));
      else cb(null, { status });
    }) as Unary<{ service: string }, { status: string }>,
    watch: (call: grpc.ServerWritableStream<{ service: string }, { status: string }>) => {
      call.write({ status: statusOf(call.request.service) });
      watchers.add(call);
      call.on('cancelled', () => watchers.delete(call));
    },
  });

  /** Every Operator call: authenticate, authorize, run, and turn any failure into a status. */
  function guarded<Req, Res>(name: string, run: (req: Req) => Promise<Res> | Res): Unary<Req, Res> {
    return (call, cb) => {
      const started = performance.now();
      void (async () => {
        try {
          if (!deps.auth) throw fail(grpc.status.UNAUTHENTICATED, 'this node has no AUTH_JWT_SECRET: operator calls cannot be verified');
          const header = call.metadata.get('authorization')[0];
          let principal;
          try {
            principal = await deps.auth.authenticate(typeof header === 'string' ? header : undefined);
          } catch (err) {
            throw fail(grpc.status.UNAUTHENTICATED, err instanceof ApiError ? err.detail : 'invalid token');
          }
          if (!principal) throw fail(grpc.status.UNAUTHENTICATED, "send the token as 'authorization: Bearer <token>' metadata");
          if (!principal.scopes.has(ADMIN_SCOPE)) throw fail(grpc.status.PERMISSION_DENIED, `the token lacks the '${ADMIN_SCOPE}' scope`);
          cb(null, await run(call.request));
        } catch (err) {
          if (err instanceof LifecycleError) return cb(fail(grpc.status.INVALID_ARGUMENT, err.message));
          // A usage read too large for one node's bound says so, for the operator to narrow it.
          if (err instanceof ApiError && err.slug === 'payload-too-large') return cb(fail(grpc.status.RESOURCE_EXHAUSTED, err.detail));
          if (typeof (err as grpc.ServiceError).code === 'number') return cb(err as grpc.ServiceError);
          deps.log.error({ err, call: name }, 'operator call failed');
          cb(fail(grpc.status.INTERNAL, 'the call could not be completed'));
        } finally {
          deps.log.debug({ call: name, ms: performance.now() - started }, 'operator call');
        }
      })();
    };
  }

  const needLifecycle = (): NonNullable<OperatorDeps['lifecycle']> => {
    if (!deps.lifecycle) throw fail(grpc.status.UNIMPLEMENTED, 'lifecycle entries live on gateways; call a gateway');
    return deps.lifecycle;
  };

  const listed = (registry: LifecycleRegistry, persisted: boolean): { entries: Record<string, unknown>[]; persisted: boolean } => {
    const now = registry.now();
    return {
      persisted,
      entries: registry.compiled().map((c) => ({
        method: c.entry.method,
        path: c.entry.path,
        state: c.entry.state,
        deprecatedAt: c.entry.deprecatedAt,
        sunsetAt: c.entry.sunsetAt ?? '',
        successor: c.entry.successor ?? '',
        guide: c.entry.guide ?? '',
        brownouts: c.entry.brownouts ?? [],
        effectiveState: stateAt(c, now),
      })),
    };
  };

  /** One change to the entries, written back to the file when there is one (its lock held). */
  const change = (registry: LifecycleRegistry, file: LifecycleFile | undefined, req: ChangeRequest): ReturnType<typeof listed> => {
    const before = registry.entries();
    const next = changed(before, req, registry.now());
    // A LifecycleError here is INVALID_ARGUMENT, and nothing changed. The entry changed must name
    // its successor if it answers 410; others an older file left without one are let be.
    registry.replace(next, `${(req.method || 'GET').toUpperCase()} ${req.path}`);
    let persisted = false;
    if (file) {
      try {
        file.write(registry.entries());
        persisted = true;
      } catch (err) {
        registry.replace(before);
        deps.log.error({ err: (err as Error).message, file: file.path }, 'lifecycle change not written back; undone');
        throw fail(grpc.status.UNAVAILABLE, `the change could not be written to DEPRECATIONS_FILE (${(err as Error).message}); nothing changed`);
      }
    }
    deps.log.info({ action: req.action, method: req.method, path: req.path, persisted }, 'lifecycle changed');
    return listed(registry, persisted);
  };

  server.addService(operator.service, {
    listLifecycle: guarded('ListLifecycle', () => listed(needLifecycle().registry, false)),
    changeLifecycle: guarded('ChangeLifecycle', async (req: ChangeRequest) => {
      const { registry, file } = needLifecycle();
      let release: (() => void) | undefined;
      if (file) {
        try {
          release = await file.lock();
        } catch (err) {
          throw fail(grpc.status.UNAVAILABLE, `DEPRECATIONS_FILE could not be locked (${(err as Error).message}); nothing changed`);
        }
      }
      try {
        // The change applies to the file as it is now: another gateway may have changed it since
        // this one last polled it.
        file?.reload();
        return change(registry, file, req);
      } finally {
        release?.();
      }
    }),
    getUsage: guarded('GetUsage', async (req: { route: string; since: string; top: number }) => {
      if (!deps.readUsage) throw fail(grpc.status.UNIMPLEMENTED, 'usage is read through a gateway');
      if (req.since !== '' && !isDay(req.since)) throw fail(grpc.status.INVALID_ARGUMENT, `since must be a day like 2026-05-01, got '${req.since}'`);
      const opts: { route?: string; since?: string; top: number } = { top: Math.min(req.top || 10, 1000) };
      if (req.route !== '') opts.route = req.route;
      if (req.since !== '') opts.since = req.since;
      return { routes: await deps.readUsage(opts) };
    }),
    getStatus: guarded('GetStatus', () => ({
      role: deps.role,
      nodeId: deps.nodeId,
      mode: deps.mode,
      partitions: formatPartitions(deps.partitions),
      partitionCount: deps.partitions.length,
      uptimeSeconds: (Date.now() - STARTED) / 1000,
      lifecycleEntries: deps.lifecycle?.registry.entries().length ?? 0,
      version: process.env.npm_package_version ?? '0.1.0',
    })),
  });

  const bound = await new Promise<number>((done, failed) =>
    server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? failed(err) : done(p))),
  );
  return {
    port: bound,
    async close() {
      serving = false;
      for (const w of watchers) {
        w.write({ status: 'NOT_SERVING' });
        w.end();
      }
      watchers.clear();
      await new Promise<void>((done) => server.tryShutdown(() => done()));
    },
  };
}

/** The entries after one operator action on one route (checked by the registry afterwards). */
export function changed(entries: LifecycleEntry[], req: ChangeRequest, now: number): LifecycleEntry[] {
  if (!req.path) throw fail(grpc.status.INVALID_ARGUMENT, 'path is required, e.g. /v1/orders/{orderId}');
  const method = (req.method || 'GET').toUpperCase() as Method;
  const i = entries.findIndex((e) => e.method === method && e.path === req.path);
  const current = i >= 0 ? entries[i] : undefined;
  const rest = entries.filter((_, k) => k !== i);
  const nowIso = new Date(now).toISOString();
  const base: LifecycleEntry = current ?? { method, path: req.path, state: 'deprecated', deprecatedAt: nowIso };
  const next: LifecycleEntry = { ...base };
  if (req.successor) next.successor = req.successor;
  if (req.guide) next.guide = req.guide;
  switch (req.action) {
    case 'DEPRECATE':
      next.state = 'deprecated';
      if (req.at) next.deprecatedAt = req.at;
      delete next.sunsetAt;
      break;
    case 'SUNSET':
      if (!req.at) throw fail(grpc.status.INVALID_ARGUMENT, 'sunset needs at: the Sunset date-time (RFC 3339)');
      next.state = 'sunsetting';
      next.sunsetAt = req.at;
      break;
    case 'BROWNOUT':
      if (!current || current.state === 'retired') throw fail(grpc.status.FAILED_PRECONDITION, `${method} ${req.path} must be deprecated or sunsetting before a brownout is scheduled`);
      if (!req.start || !req.end) throw fail(grpc.status.INVALID_ARGUMENT, 'brownout needs start and end (RFC 3339)');
      next.brownouts = [...(current.brownouts ?? []), { start: req.start, end: req.end }];
      break;
    case 'RETIRE':
      next.state = 'retired';
      break;
    case 'ACTIVATE':
      if (!current) throw fail(grpc.status.NOT_FOUND, `${method} ${req.path} has no lifecycle entry: it is active`);
      return rest;
    default:
      throw fail(grpc.status.INVALID_ARGUMENT, `action must be one of DEPRECATE, SUNSET, BROWNOUT, RETIRE, ACTIVATE, got '${req.action}'`);
  }
  return i >= 0 ? [...entries.slice(0, i), next, ...entries.slice(i + 1)] : [...entries, next];
}
