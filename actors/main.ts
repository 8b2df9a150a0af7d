// The actor node of cluster mode: hosts the partitions named by ACTOR_PARTITIONS (all of them by
// default) in its own LMDB under DATA_DIR and serves them over NATS. Any number may run, each
// with its own NODE_ID, DATA_DIR and a disjoint set of partitions (static assignment, checked
// against the record of which store holds each partition: common/nats-partition-owners.ts).

import { hostname } from 'node:os';
import { authorityOf, ConfigError, loadConfig } from '../common/config.js';
import { createLogger } from '../common/log.js';
import { collectWhenIdle } from '../common/idle-gc.js';
import { stopOnSignals } from '../common/shutdown.js';
import { serveActorsOverNats, type ActorServer } from '../common/nats-actor-server.js';
import { formatPartitions, parsePartitions } from '../common/partitions.js';
import { ActorHost, hostSettings } from './host.js';
import { actorDataDir } from '../gateway/app.js';
import { storeIdOf } from '../storage/store-id.js';
import { startNatsBus } from '../common/nats-bus.js';
import { dispatchOptions } from '../gateway/webhook-wiring.js';
import { Authenticator } from '../gateway/auth.js';
import type { OperatorServer } from '../gateway/operator.js';

/** ACTOR_PARTITIONS, read: a value that names no partitions is a configuration error (exit 2). */
function partitionsOf(spec: string | undefined): number[] {
  try {
    return parsePartitions(spec);
  } catch (err) {
    throw new ConfigError(err instanceof Error ? err.message : String(err));
  }
}

async function main(): Promise<void> {
  const config = loadConfig();
  if (!config.natsUrl) throw new ConfigError('NATS_URL must be set for an actor node (embedded mode runs actors inside `npm start`).');
  const log = createLogger(config.logLevel, 'actors');
  const partitions = partitionsOf(config.actorPartitions);
  const nodeId = config.nodeId ?? `${hostname().replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 40)}-${process.pid}`;
  // The dispatcher reads endpoints of tenants whose partition another node owns over the bus.
  const remote = await startNatsBus(config.natsUrl, { timeoutMs: config.busTimeoutMs, log: (m) => log.info(m), warn: (m) => log.warn(m) });
  const host = new ActorHost({
    dataDir: actorDataDir(config),
    partitions: new Set(partitions),
    // Its jobs start once its partitions are claimed: a node refused them leaves their data be.
    deferJobs: true,
    ...hostSettings(config),
    log,
    ...dispatchOptions(config, log, {}, remote),
  });
  await host.ready;
  // Stops gracefully from here on, while it waits for NATS too; its jobs start once its
  // partitions are claimed.
  let server: ActorServer | undefined = undefined;
  let operator: OperatorServer | undefined;
  const idle = collectWhenIdle();
  stopOnSignals(async () => {
    idle.stop();
    await operator?.close();
    await server?.close();
    await host.close();
    await remote.close();
  }, log);
  // Started while NATS is down, the node waits for it, and serves once it is up.
  // Its partitions are claimed for this DATA_DIR's store first: one another store holds stops it.
  const store = storeIdOf(actorDataDir(config));
  server = await serveActorsOverNats(config.natsUrl, host, { nodeId, partitions, store, log: (m) => log.info(m), warn: (m) => log.warn(m) });
  host.start();
  const ranges = formatPartitions(partitions);
  // Health and node status on the operator plane (ADMIN_GRPC_PORT); operator calls need the
  // gateways' AUTH_JWT_SECRET to verify admin tokens, health checks need nothing.
  if (config.adminGrpcPort !== undefined) {
    const { startOperator } = await import('../gateway/operator.js');
    operator = await startOperator(
      { role: 'actors', mode: 'cluster', nodeId, partitions, auth: config.jwtSecret ? new Authenticator(config.jwtSecret) : undefined, log },
      config.adminGrpcHost,
      config.adminGrpcPort,
    );
  }
  process.stdout.write(`actor node ${nodeId} serving partitions ${ranges}${operator ? ` (operator plane on ${authorityOf(config.adminGrpcHost, operator.port)})` : ''}\n`);
}

main().catch((err: unknown) => {
  // The gateway's words for a bad setting, so scripts read either process's refusal alike.
  if (err instanceof ConfigError) {
    process.stderr.write(`configuration error: ${err.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
