// A real nats-server on a random port for cluster tests (STYLE 10). A missing binary is an error,
// not a skip: a cluster test that silently does not run proves nothing.

import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect as tcpConnect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

export interface NatsServer {
  url: string;
  port: number;
  /** Kills the process but keeps its port and store, to simulate an outage. */
  kill(): Promise<void>;
  /** Starts it again on the same port and store (after kill). */
  restart(): Promise<void>;
  /** Kills it and removes its store. */
  stop(): Promise<void>;
}

const HOST = '127.0.0.1';
const READY_WITHIN_MS = 10_000;

// If a test process dies mid-run, its servers must not outlive it.
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

function findBinary(): string {
  const candidates = [
    process.env.NATS_SERVER_BIN,
    ...(process.env.PATH ?? '').split(delimiter).map((dir) => join(dir, 'nats-server')),
    '/usr/sbin/nats-server',
    '/usr/local/bin/nats-server',
  ];
  for (const path of candidates) {
    if (!path) continue;
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // try the next one
    }
  }
  throw new Error('nats-server not found: install it (apt-get install nats-server) or set NATS_SERVER_BIN');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, HOST, () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect(port, HOST);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startNatsServer(): Promise<NatsServer> {
  const binary = findBinary();
  const port = await freePort();
  const storeDir = await mkdtemp(join(tmpdir(), 'nats-test-'));
  let child: ChildProcess | undefined;

  async function launch(): Promise<void> {
    const proc = spawn(binary, ['-a', HOST, '-p', String(port), '-js', '-sd', storeDir], { stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    running.add(proc);
    let stderr = '';
    proc.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
    let exited = false;
    proc.once('exit', () => {
      exited = true;
      running.delete(proc);
    });
    const until = Date.now() + READY_WITHIN_MS;
    while (!(await accepts(port))) {
      if (exited) throw new Error(`nats-server exited before accepting connections:\n${stderr}`);
      if (Date.now() > until) {
        proc.kill('SIGKILL');
        throw new Error(`nats-server did not accept connections within ${READY_WITHIN_MS} ms:\n${stderr}`);
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async function kill(): Promise<void> {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL');
    await exited;
  }

  await launch();
  return {
    url: `nats://${HOST}:${port}`,
    port,
    kill,
    async restart() {
      await kill();
      await launch();
    },
    async stop() {
      await kill();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
