// The service under test, started for real on port 0 (STYLE 10), in either mode:
//
//   startEmbedded(): one in-process service (gateway + actor host on LMDB in a temp DATA_DIR);
//   startCluster():  a real nats-server, two actor node child processes splitting the partitions
//                    between them, and two in-process gateways that reach them over NATS.
//
// Both answer the same handle, so one suite (order-suite.ts) runs unchanged against either.
// close() stops every process it started and removes every directory it made.

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { loadConfig } from '../../common/config.js';
import { createLogger } from '../../common/log.js';
import { startService, type Service, type ServiceParts } from '../../gateway/app.js';
import { mintToken } from './client.js';
import { startNatsServer, type NatsServer } from './nats-server.js';

export interface RunningService {
  mode: 'embedded' | 'cluster';
  /** Base URL, e.g. http://127.0.0.1:41234 */
  url: string;
  /** Every gateway's base URL, `url` first: one in embedded mode, two in cluster mode. */
  urls: string[];
  /** The HS256 secret the gateway verifies tokens with. */
  secret: string;
  /** Cluster mode: the nats-server every process talks to, for tests that take it away. */
  nats?: NatsServer;
  /** Each gateway's operator-plane gRPC port (with ADMIN_GRPC_PORT set), in the order of `urls`. */
  adminPorts: (number | undefined)[];
  /**
   * Cluster mode: SIGKILLs an actor node (`e2e-low` or `e2e-high`), or starts it again on its own
   * data directory, resolving once it serves.
   */
  killNode?(nodeId: string): Promise<void>;
  restartNode?(nodeId: string): Promise<void>;
  close(): Promise<void>;
}

// dist/test/helpers/service.js → the project root is three levels up.
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const ACTOR_MAIN = join(ROOT, 'dist', 'actors', 'main.js');

const NODE_READY_MS = 15_000;
const OWNERS_READY_MS = 15_000;
const STOP_GRACE_MS = 5_000;

// A test process that dies mid-run must not leave actor nodes behind.
const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

const tempDir = (label: string): Promise<string> => mkdtemp(join(tmpdir(), `orders-e2e-${label}-`));
const newSecret = (): string => randomBytes(32).toString('base64url');
const silent = () => createLogger('silent', 'test');

/** Runs every cleanup even when one fails, then reports the first failure. */
async function cleanup(steps: (() => Promise<unknown>)[]): Promise<void> {
  const results = await Promise.allSettled(steps.map((step) => step()));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * `env` adds to or overrides the variables the service is configured from (e.g. RATE_LIMIT_BURST,
 * MAILBOX_LIMIT); `parts` puts test doubles in place of external systems (the payment processor).
 */
export async function startEmbedded(env: Record<string, string> = {}, parts: ServiceParts = {}): Promise<RunningService> {
  const dataDir = await tempDir('embedded');
  const secret = newSecret();
  let service: Service;
  try {
    service = await startService(
      loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, AUTH_JWT_SECRET: secret, LOG_LEVEL: 'silent', ...env }),
      silent(),
      parts,
    );
  } catch (err) {
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
  return {
    mode: 'embedded',
    url: service.url,
    urls: [service.url],
    adminPorts: [service.adminPort],
    secret,
    async close() {
      await cleanup([() => service.close()]);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

interface ActorNode {
  nodeId: string;
  stop(): Promise<void>;
  /** SIGKILL, as a crash: no announcement, no clean close of LMDB. */
  kill(): Promise<void>;
}

/** Spawns `node dist/actors/main.js` and resolves once it prints that it is serving. */
/** An actor node process; resolves once it serves. `onOutput` sees everything it prints meanwhile and after. */
export async function startActorNode(natsUrl: string, nodeId: string, partitions: string, dataDir: string, extraEnv: Record<string, string> = {}, onOutput?: (text: string) => void): Promise<ActorNode> {
  const child = spawn(process.execPath, [ACTOR_MAIN], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      NATS_URL: natsUrl,
      NODE_ID: nodeId,
      DATA_DIR: dataDir,
      ACTOR_PARTITIONS: partitions,
      LOG_LEVEL: 'warn',
      ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const exited = new Promise<void>((done) =>
    child.once('exit', () => {
      children.delete(child);
      done();
    }),
  );
  let output = '';
  let serving = false;
  const servingLine = new RegExp(`^actor node ${nodeId} serving`, 'm');
  let onServing = (): void => {};
  // Both pipes are drained for the node's whole life, so a chatty node never blocks on a full pipe.
  const keep = (chunk: Buffer): void => {
    onOutput?.(chunk.toString());
    output = (output + chunk.toString()).slice(-8000);
    if (!serving && servingLine.test(output)) {
      serving = true;
      onServing();
    }
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);

  async function stop(): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    // SIGTERM first: the node announces that it leaves and closes LMDB cleanly.
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
    await exited;
    clearTimeout(timer);
  }

  async function kill(): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGKILL');
    await exited;
  }

  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      new Promise<void>((ready) => (serving ? ready() : (onServing = ready))),
      // Settles only the race: after a good start, a later exit is stop()'s business.
      exited.then(() => {
        if (serving) return;
        throw new Error(`actor node ${nodeId} exited (${child.signalCode ?? child.exitCode}) before serving:\n${output}`);
      }),
      new Promise<never>((_, fail) => {
        timer = setTimeout(() => fail(new Error(`actor node ${nodeId} did not start within ${NODE_READY_MS} ms:\n${output}`)), NODE_READY_MS);
      }),
    ]);
  } catch (err) {
    await stop();
    throw err;
  } finally {
    clearTimeout(timer);
  }
  return { nodeId, stop, kill };
}

/** Polls a list until the gateway has an owner for every partition (it answers 503 until then). */
async function waitForOwners(url: string, secret: string): Promise<void> {
  const token = await mintToken(secret, { sub: 'readiness', tenant: 'readiness', scope: 'orders:read' });
  const agent = new Agent();
  try {
    const until = Date.now() + OWNERS_READY_MS;
    let last = '';
    for (;;) {
      const res = await request(`${url}/v1/orders?limit=1`, { headers: { authorization: `Bearer ${token}` }, dispatcher: agent });
      const body = await res.body.text();
      if (res.statusCode === 200) return;
      last = `${res.statusCode} ${body}`;
      if (Date.now() > until) throw new Error(`the gateway did not learn every partition's owner within ${OWNERS_READY_MS} ms; last answer: ${last}`);
      await delay(25);
    }
  } finally {
    await agent.close();
  }
}

/**
 * `env` adds to every process's configuration (e.g. WEBHOOK_RETRY_SCHEDULE), except the
 * gateway-only DEPRECATIONS_FILE and ADMIN_GRPC_* which only the gateways get; `actorEnv` adds to
 * each actor node's, by node id (`e2e-low`, `e2e-high`).
 */
const GATEWAY_ONLY = new Set(['DEPRECATIONS_FILE', 'ADMIN_GRPC_PORT', 'ADMIN_GRPC_HOST']);

export async function startCluster(env: Record<string, string> = {}, actorEnv: Record<string, Record<string, string>> = {}): Promise<RunningService> {
  const secret = newSecret();
  const dirs: string[] = [];
  const nodes: ActorNode[] = [];
  let nats: NatsServer | undefined;
  const gateways: Service[] = [];
  const launch = new Map<string, () => Promise<ActorNode>>();

  const closeAll = async (): Promise<void> => {
    // Gateways first, so nothing is in flight when the nodes leave; NATS last.
    await cleanup(gateways.map((g) => () => g.close()));
    await cleanup(nodes.map((n) => () => n.stop()));
    await cleanup([async () => nats?.stop(), ...dirs.map((d) => () => rm(d, { recursive: true, force: true }))]);
  };

  try {
    // Throws when nats-server is missing: a cluster test that cannot run must fail, not skip.
    nats = await startNatsServer();
    const natsUrl = nats.url;
    const [lowDir, highDir, gatewayDir] = await Promise.all([tempDir('node-low'), tempDir('node-high'), tempDir('gateway')]);
    dirs.push(lowDir, highDir, gatewayDir);
    const shared = Object.fromEntries(Object.entries(env).filter(([k]) => !GATEWAY_ONLY.has(k)));
    for (const [nodeId, partitions, dir] of [['e2e-low', '0-127', lowDir], ['e2e-high', '128-255', highDir]] as const) {
      launch.set(nodeId, () => startActorNode(natsUrl, nodeId, partitions, dir, { ...shared, ...actorEnv[nodeId] }));
    }
    const started = await Promise.allSettled([...launch.values()].map((start) => start()));
    for (const s of started) if (s.status === 'fulfilled') nodes.push(s.value);
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;

    // Two gateways, as behind a load balancer: any of them may take any request (ARCHITECTURE 4).
    for (let i = 0; i < 2; i++) {
      const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: gatewayDir, AUTH_JWT_SECRET: secret, LOG_LEVEL: 'silent', NATS_URL: natsUrl, ...env });
      gateways.push(await startService(config, silent()));
    }
    await Promise.all(gateways.map((g) => waitForOwners(g.url, secret)));
  } catch (err) {
    await closeAll().catch(() => {});
    throw err;
  }

  const urls = gateways.map((g) => g.url);
  const nodeNamed = (nodeId: string): ActorNode => {
    const node = nodes.find((n) => n.nodeId === nodeId);
    if (!node) throw new Error(`no actor node ${nodeId}`);
    return node;
  };
  const killNode = (nodeId: string): Promise<void> => nodeNamed(nodeId).kill();
  const restartNode = async (nodeId: string): Promise<void> => {
    const start = launch.get(nodeId);
    if (!start) throw new Error(`no actor node ${nodeId}`);
    const node = await start();
    nodes.splice(nodes.indexOf(nodeNamed(nodeId)), 1, node);
  };
  return { mode: 'cluster', url: urls[0]!, urls, adminPorts: gateways.map((g) => g.adminPort), secret, nats, killNode, restartNode, close: closeAll };
}
