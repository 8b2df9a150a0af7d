// Webhook receivers and a service to send to them, for the webhook tests: real sockets on
// 127.0.0.1 (plain HTTP, or TLS with a test CA made at test time), each receiver recording every
// request it gets, raw body included, and answering as the test says.

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { loadConfig } from '../../common/config.js';
import { newId, partitionFor } from '../../common/ids.js';
import { newSigningSecret } from '../../common/webhook-signature.js';
import type { ActorHost } from '../../actors/host.js';
import type { Command, Result } from '../../proto/messages.js';
import type { DeliveryRecord } from '../../proto/webhooks.js';
import { createLogger } from '../../common/log.js';
import { startService, type Service } from '../../gateway/app.js';
import type { WebhookHooks } from '../../gateway/webhook-wiring.js';
import { Api } from './client.js';

export interface Received {
  path: string;
  headers: http.IncomingHttpHeaders;
  raw: Buffer;
  // Tests read many event shapes; the members they touch are asserted.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

export interface Receiver {
  url: string;
  port: number;
  got: Received[];
  /** Decides the status of each request (200 by default), with extra headers. */
  answer: (r: Received, n: number) => { status: number; headers?: Record<string, string>; delayMs?: number };
  /** Stops listening (connections refused from then on) but keeps `got`. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

export async function startReceiver(opts: { tls?: { key: string; cert: string }; host?: string; port?: number } = {}): Promise<Receiver> {
  const got: Received[] = [];
  const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      let json: unknown;
      try {
        json = JSON.parse(raw.toString('utf8'));
      } catch {
        json = undefined;
      }
      const r: Received = { path: req.url ?? '', headers: req.headers, raw, json };
      got.push(r);
      const a = receiver.answer(r, got.length);
      const reply = (): void => {
        res.writeHead(a.status, a.headers ?? {});
        res.end('ok');
      };
      if (a.delayMs) setTimeout(reply, a.delayMs);
      else reply();
    });
  };
  let server = opts.tls ? https.createServer(opts.tls, handler) : http.createServer(handler);
  const listen = (port: number): Promise<number> =>
    new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
    });
  const port = await listen(opts.port ?? 0);
  const host = opts.host ?? '127.0.0.1';
  const close = (): Promise<void> =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  const receiver: Receiver = {
    url: `${opts.tls ? 'https' : 'http'}://${host}:${port}/hook`,
    port,
    got,
    answer: () => ({ status: 200 }),
    stop: close,
    async restart() {
      server = opts.tls ? https.createServer(opts.tls, handler) : http.createServer(handler);
      await listen(port);
    },
    close,
  };
  return receiver;
}

/** Waits until `check` holds, polling; fails with `what` after `ms`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

export interface WebhookService {
  service: Service;
  api: Api;
  secret: string;
  dataDir: string;
  close(): Promise<void>;
}

export const WEBHOOK_SCOPES = 'products:read products:write orders:read orders:write users:read users:write webhooks:read webhooks:write events:read teams:read teams:write articles:read articles:write';

/** The service in embedded mode with a short retry schedule; `env` and `hooks` override. */
export async function startWebhookService(env: Record<string, string> = {}, hooks: WebhookHooks = {}): Promise<WebhookService> {
  const dataDir = await mkdtemp(join(tmpdir(), 'orders-webhooks-'));
  const secret = randomBytes(32).toString('base64url');
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    AUTH_JWT_SECRET: secret,
    LOG_LEVEL: 'silent',
    WEBHOOK_ALLOW_PRIVATE_TARGETS: '1',
    WEBHOOK_RETRY_SCHEDULE: '1,1,1',
    WEBHOOK_TIMEOUT_MS: '2000',
    ...env,
  });
  const service = await startService(config, createLogger('silent', 'test'), hooks);
  const api = new Api(service.url, secret);
  return {
    service,
    api,
    secret,
    dataDir,
    async close() {
      await api.close();
      await service.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export interface TestCa {
  ca: string;
  key: string;
  cert: string;
}

/** A CA and a certificate for `localhost` and 127.0.0.1 it signed, made with openssl. */
export async function makeTestCa(): Promise<TestCa> {
  const dir = await mkdtemp(join(tmpdir(), 'orders-ca-'));
  const run = (args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  };
  try {
    run(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=orders-test-ca']);
    run(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', '/CN=localhost']);
    await writeFile(join(dir, 'ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
    run(['x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'srv.pem', '-days', '2', '-extfile', 'ext.cnf']);
    const [ca, key, cert] = await Promise.all(['ca.pem', 'srv.key', 'srv.pem'].map((f) => readFile(join(dir, f), 'utf8')));
    return { ca: ca!, key: key!, cert: cert! };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The bus command that creates a webhook endpoint of `tenant` for `eventTypes`, in its tenant's partition. */
export function endpointCreate(tenant: string, endpointUrl: string, eventTypes: string[] = ['order.created']): Command {
  return {
    kind: 'webhook.create',
    tenant,
    partition: partitionFor(tenant),
    id: newId('webhookEndpoint', partitionFor(tenant)),
    input: { endpointUrl, eventTypes, apiVersion: 'v1', description: null },
    secret: newSigningSecret(),
  } as Command;
}

/** The value of an actor host's answer; a refusal throws, naming its problem. */
export async function ok<T>(p: Promise<Result<unknown>>): Promise<T> {
  const r = await p;
  if (!r.ok) throw new Error(`${r.error.code}: ${r.error.detail}`);
  return r.value as T;
}

/** An endpoint's deliveries as the actor host lists them, newest first (at most 100). */
export async function deliveries(host: ActorHost, tenant: string, endpointId: string): Promise<DeliveryRecord[]> {
  const pages = await ok<{ rows: { record: DeliveryRecord }[] }>(
    host.query({ kind: 'delivery.list', query: { tenant, filter: endpointId, sort: 'createdAt', dir: 'desc', after: undefined, limit: 100, withChildren: true } }),
  );
  return pages.rows.map((r) => r.record);
}
