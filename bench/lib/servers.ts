// The servers a scenario compares: the uWS ceiling, the Fastify peer, and the service itself in
// embedded or cluster mode. Each is one or more child processes; `stop()` ends them and removes
// any temporary data.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { call } from './http.js';
import { benchEntry, projectRoot, serviceActorsMain, serviceGatewayMain } from './paths.js';
import { startNodeOptions } from './node-options.js';
import { startProcess, type Proc } from './proc.js';
import { benchSecret } from './token.js';

export type ServerKind = 'uws-ceiling' | 'fastify-peer' | 'service' | 'service-cluster';

export interface Subject {
  kind: ServerKind;
  url: string;
  /** Processes doing the serving; their CPU is reported and the first one's RSS is "the" RSS. */
  procs: Proc[];
  dataDir?: string;
  stop(): Promise<void>;
}

/** Where every server the bench starts listens: its HOST setting. */
export const LISTEN_HOST = '127.0.0.1';
const baseEnv = { PORT: '0', HOST: LISTEN_HOST };

export async function startCeiling(): Promise<Subject> {
  const { cmd, args } = benchEntry('baselines/uws-ceiling.js');
  const p = await startProcess({ name: 'uws-ceiling', cmd, args, env: baseEnv });
  return { kind: 'uws-ceiling', url: p.url, procs: [p], stop: () => p.stop() };
}

export async function startFastify(): Promise<Subject> {
  const { cmd, args } = benchEntry('baselines/fastify-peer.js');
  const p = await startProcess({ name: 'fastify-peer', cmd, args, env: baseEnv });
  return { kind: 'fastify-peer', url: p.url, procs: [p], stop: () => p.stop() };
}

/** Command line for one of the service's entry points, started through bench/lib/launch. */
function serviceCommand(entry: string, env: Record<string, string>, wrap: string[] = [], extraNodeArgs: string[] = []): { cmd: string; args: string[]; env: Record<string, string> } {
  const { cmd, args } = benchEntry('lib/launch.js');
  // BENCH_SERVICE_NODE_ARGS: node options for the service's processes only, e.g.
  // `--cpu-prof --cpu-prof-dir=/tmp/prof` (NODE_OPTIONS refuses --cpu-prof, and would reach the
  // load generator and the baselines too).
  // They come after the options `npm start` gives the service, so they can override them.
  const nodeArgs = [...startNodeOptions(projectRoot), ...extraNodeArgs, ...(process.env.BENCH_SERVICE_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')];
  const full = { ...env, BENCH_ENTRY: entry };
  // BENCH_CGROUP_PROCS: the process joins that cgroup before node starts (a shell writes its own
  // pid there, then becomes node), so all it allocates or maps is charged there
  // (memory-startup's limited phase, bench/lib/cgroup.ts).
  // `wrap`: a program that runs node, such as valgrind (instructions.ts), its options first.
  const line = [...wrap, cmd, ...nodeArgs, ...args];
  if (env.BENCH_CGROUP_PROCS) return { cmd: 'sh', args: ['-c', 'echo $$ > "$BENCH_CGROUP_PROCS" && exec "$@"', 'sh', ...line], env: full };
  return { cmd: line[0]!, args: line.slice(1), env: full };
}

export function serviceBuilt(): boolean {
  return existsSync(serviceGatewayMain);
}

/**
 * Settings every run of the service gets. The rate limiter stays in the pipeline (its cost is
 * part of the figures) but with a budget no benchmark reaches: one principal drives all load.
 */
function serviceEnv(dataDir: string, extra: Record<string, string>): Record<string, string> {
  return {
    ...baseEnv,
    DATA_DIR: dataDir,
    AUTH_JWT_SECRET: benchSecret,
    LOG_LEVEL: 'warn',
    RATE_LIMIT_PER_SECOND: '10000000',
    RATE_LIMIT_BURST: '10000000',
    ...extra,
  };
}

export interface ServiceOptions {
  /** Reuse this data directory (it is then not removed on stop). */
  dataDir?: string;
  env?: Record<string, string>;
  /** Run node under this command line (e.g. valgrind and its options). */
  wrap?: string[];
  /** Node options after those `npm start` gives, overriding them. */
  nodeArgs?: string[];
  /** How long start-up may take; a wrapped service starts far slower. */
  readyTimeoutMs?: number;
}

export async function startService(opts: ServiceOptions = {}): Promise<Subject> {
  const owned = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'bench-data-'));
  try {
    const p = await startProcess({
      name: 'service',
      cwd: projectRoot,
      readyTimeoutMs: opts.readyTimeoutMs,
      ...serviceCommand(serviceGatewayMain, serviceEnv(dataDir, opts.env ?? {}), opts.wrap, opts.nodeArgs),
    });
    return {
      kind: 'service',
      url: p.url,
      procs: [p],
      dataDir,
      stop: async () => {
        await p.stop();
        if (owned) rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    if (owned) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Cluster mode: nats-server on a random port, one actor node, one gateway. The order of the
 * returned procs is gateway, actor node, nats-server. `gateway` runs the gateway alone under a
 * wrapper or with node options of its own (ServiceOptions), e.g. to count its instructions.
 */
export async function startCluster(token: string, gateway: Pick<ServiceOptions, 'wrap' | 'nodeArgs' | 'readyTimeoutMs'> = {}): Promise<Subject> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-cluster-'));
  const started: Proc[] = [];
  const stopAll = async (): Promise<void> => {
    for (const p of [...started].reverse()) await p.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const natsPort = await freePort();
    const natsUrl = `nats://127.0.0.1:${natsPort}`;
    const nats = await startProcess({
      name: 'nats-server',
      cmd: 'nats-server',
      args: ['-a', '127.0.0.1', '-p', String(natsPort), '-js', '-sd', join(dir, 'js')],
      ready: /Server is ready/,
    });
    started.push(nats);
    const actor = await startProcess({
      name: 'actors',
      cwd: projectRoot,
      ...serviceCommand(serviceActorsMain, serviceEnv(join(dir, 'a1'), { NATS_URL: natsUrl, NODE_ID: 'a1' })),
      // The actor node's ready line is not part of the contract: wait a little for anything
      // that looks like one, then rely on the gateway's end-to-end probe below.
      ready: /ready|listening|started|serving|partitions/i,
      readyTimeoutMs: 5000,
      readyOptional: true,
    });
    started.push(actor);
    const gw = await startProcess({
      name: 'gateway',
      cwd: projectRoot,
      readyTimeoutMs: gateway.readyTimeoutMs,
      ...serviceCommand(serviceGatewayMain, serviceEnv(join(dir, 'gw'), { NATS_URL: natsUrl }), gateway.wrap, gateway.nodeArgs),
    });
    started.push(gw);
    // Ready means a write goes all the way to the actor node and back.
    const deadline = Date.now() + Math.max(30_000, gateway.readyTimeoutMs ?? 0);
    let last = '';
    for (;;) {
      try {
        const r = await call(`${gw.url}/v1/orders`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: '{"currency":"EUR","items":[]}',
          timeoutMs: 5000,
        });
        if (r.status === 201) break;
        last = `${r.status} ${r.body.slice(0, 200)}`;
      } catch (err) {
        last = String(err);
      }
      if (Date.now() > deadline) throw new Error(`cluster never created an order; last answer: ${last}`);
      await sleep(250);
    }
    return { kind: 'service-cluster', url: gw.url, procs: [gw, actor, nats], dataDir: dir, stop: stopAll };
  } catch (err) {
    const tails = started.map((p) => `  ${p.name}:\n${p.tail()}`).join('\n');
    await stopAll();
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${tails}`, { cause: err });
  }
}
