// Wiring: config → bus (in-process actor host, or NATS) → gateway → uWS. `startService` is what
// `npm start` runs and what the end-to-end tests start on port 0.

import { join } from 'node:path';
import type { Bus } from '../common/bus.js';
import { originOf, type Config } from '../common/config.js';
import { LocalBus } from '../common/local-bus.js';
import type { Logger } from '../common/log.js';
import { jwtSecret } from '../common/secret.js';
import { ActorHost, hostSettings } from '../actors/host.js';
import type { RefundProcessor } from '../actors/refund-runner.js';
import { Authenticator } from './auth.js';
import { BusClient } from './bus-client.js';
import { listen, type HttpServer } from './http.js';
import { createGateway, type Gateway } from './pipeline.js';
import { articleRoutes } from './resources/articles.js';
import { metaRoutes } from './resources/meta.js';
import { orderBatchRoute } from './resources/order-batch.js';
import { orderRoutes } from './resources/orders.js';
import { productRoutes } from './resources/products.js';
import { refundRoutes } from './resources/refunds.js';
import { teamRoutes } from './resources/teams.js';
import { userRoutes } from './resources/users.js';
import type { RouteDef } from './route.js';
import { eventRoutes } from './resources/events.js';
import { webhookRoutes } from './resources/webhooks.js';
import { dispatchOptions, warnIfPrivateTargets, type WebhookHooks } from './webhook-wiring.js';
import { mountVersions } from './versions.js';
import { LifecycleRegistry } from './lifecycle.js';
import { LifecycleFile } from './lifecycle-file.js';
import { deprecationsRoute } from './resources/deprecations.js';
import { UsageCounter, readUsage } from './usage.js';
import type { OperatorServer } from './operator.js';
import { allPartitions } from '../common/partitions.js';
import { SHUTDOWN_DEADLINE_MS } from '../common/shutdown.js';

// A stop waits for the requests under way: each is bounded by BUS_TIMEOUT_MS, plus the time to
// write its answer. The wait leaves a third of the process's shutdown deadline to close the bus
// and flush the store.
const DRAIN_MARGIN_MS = 1000;
const MAX_DRAIN_MS = (SHUTDOWN_DEADLINE_MS * 2) / 3;

export interface Service {
  url: string;
  port: number;
  mode: 'embedded' | 'cluster';
  gateway: Gateway;
  /** Endpoint lifecycle entries in force on this gateway. */
  lifecycle: LifecycleRegistry;
  /** The operator plane's gRPC port, when ADMIN_GRPC_PORT is set. */
  adminPort: number | undefined;
  close(): Promise<void>;
}

export function allRoutes(hooks: WebhookHooks = {}, lifecycle?: LifecycleRegistry): RouteDef[] {
  // Declared once under /v1, mounted under every version (gateway/versions.ts).
  const routes: RouteDef[] = mountVersions([
    ...orderRoutes,
    orderBatchRoute,
    ...productRoutes,
    ...refundRoutes,
    ...userRoutes,
    ...teamRoutes,
    ...articleRoutes,
    ...eventRoutes,
    ...webhookRoutes(hooks),
    deprecationsRoute(lifecycle),
  ]);
  routes.push(...metaRoutes(() => routes));
  return routes;
}

export function actorDataDir(config: Config): string {
  return join(config.dataDir, 'actors');
}

/** What tests may put in place of the real parts. */
export interface ServiceParts extends WebhookHooks {
  /** The payment processor embedded mode refunds through (default: simulated, REFUND_PROCESSING_MS). */
  refundProcessor?: RefundProcessor;
}

export async function startService(config: Config, log: Logger, parts: ServiceParts = {}): Promise<Service> {
  let bus: Bus;
  let host: ActorHost | undefined;
  if (config.natsUrl) {
    if (!config.jwtSecret) throw new Error('AUTH_JWT_SECRET must be set in cluster mode: every gateway needs the same one.');
    // Started while NATS is down, it answers 503 until NATS is up, as when NATS goes away later.
    const { startNatsBus } = await import('../common/nats-bus.js');
    bus = await startNatsBus(config.natsUrl, { timeoutMs: config.busTimeoutMs, log: (m) => log.info(m), warn: (m) => log.warn(m) });
    warnIfPrivateTargets(config, log);
  } else {
    host = new ActorHost({
      dataDir: actorDataDir(config),
      partitions: allPartitions(),
      ...hostSettings(config),
      refundProcessor: parts.refundProcessor,
      log,
      ...dispatchOptions(config, log, parts),
    });
    bus = new LocalBus(host, config.busTimeoutMs);
    await host.ready;
  }
  const usage = new UsageCounter(bus, log);
  const lifecycle = new LifecycleRegistry(Date.now, usage);
  const routes = allRoutes(parts, lifecycle);
  lifecycle.bind(routes);
  let lifecycleFile: LifecycleFile | undefined;
  if (config.deprecationsFile) {
    lifecycleFile = new LifecycleFile(config.deprecationsFile, lifecycle, log);
    try {
      lifecycleFile.load();
    } catch (err) {
      await bus.close();
      await host?.close();
      throw err;
    }
    lifecycleFile.watch();
  }
  usage.start();
  const auth = new Authenticator(jwtSecret(config.jwtSecret, config.dataDir));
  const gateway = createGateway({
    lifecycle,
    routes,
    auth,
    bus: new BusClient(bus),
    config,
    log,
  });
  // What was opened behind the server, closed in order: on a stop, and when the port is taken.
  const closeBehind = async (): Promise<void> => {
    lifecycleFile?.close();
    gateway.close();
    // Counts taken since the last flush reach the owner before the bus goes.
    await usage.close();
    await bus.close();
    await host?.close();
  };
  let server: HttpServer;
  try {
    server = await listen(gateway.answer, {
      host: config.host,
      port: config.port,
      maxBodyBytes: config.maxBodyBytes,
      log,
      refuse: gateway.refuse,
      needsAddress: gateway.needsAddress,
    });
  } catch (err) {
    // The port is taken: nothing was served, and what was opened for it is closed again.
    await closeBehind();
    throw err;
  }
  void gateway.warm();
  let operator: OperatorServer | undefined;
  if (config.adminGrpcPort !== undefined) {
    // Loaded only when switched on: gRPC and protobufjs are a third of the modules a start loads.
    const { startOperator } = await import('./operator.js');
    operator = await startOperator(
      {
        role: 'gateway',
        mode: config.natsUrl ? 'cluster' : 'embedded',
        nodeId: config.nodeId ?? `gateway-${process.pid}`,
        partitions: host ? [...allPartitions()] : [],
        auth,
        lifecycle: { registry: lifecycle, file: lifecycleFile },
        // This gateway's latest counts go out first, so a reading includes them.
        readUsage: async (opts) => {
          await usage.flush();
          return readUsage(bus, opts);
        },
        log,
      },
      config.adminGrpcHost,
      config.adminGrpcPort,
    );
  }
  return {
    url: originOf(config.host, server.port),
    port: server.port,
    mode: config.natsUrl ? 'cluster' : 'embedded',
    gateway,
    lifecycle,
    adminPort: operator?.port,
    async close() {
      await operator?.close();
      // Requests under way are answered first, each within its bus deadline; what arrives
      // meanwhile is told 503 and its connection closed.
      await server.drain(Math.min(config.busTimeoutMs + DRAIN_MARGIN_MS, MAX_DRAIN_MS));
      await closeBehind();
    },
  };
}
