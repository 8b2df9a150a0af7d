// `npm run webhooks:listen -- --port 3000 --secret whsec_… [--secret whsec_…] [--host 127.0.0.1]`
// A local webhook receiver for development, like `stripe listen`: it verifies each delivery's
// Service-Signature over the raw body (verifyWebhook, common/webhook-signature.ts), answers 200
// and prints the event, or answers 400 and says why. Several --secret flags cover a rotation.
// A repeated event id (at-least-once delivery) is acknowledged and marked as a repeat.

import { Buffer } from 'node:buffer';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { cliOptions, usageError } from './cli.js';
import { originOf } from './config.js';
import { verifyWebhook, WebhookVerificationError } from './webhook-signature.js';

const USAGE = 'usage: npm run webhooks:listen -- --port 3000 --secret whsec_… [--secret whsec_…] [--host 127.0.0.1] [--quiet]\n';
const MAX_BODY = 1024 * 1024;
const REMEMBERED = 10_000;

const values = cliOptions(USAGE, {
  port: { type: 'string', default: '3000' },
  host: { type: 'string', default: '127.0.0.1' },
  secret: { type: 'string', multiple: true },
  quiet: { type: 'boolean', default: false },
});
const secrets = values.secret ?? [];
if (!secrets.length) usageError(USAGE, '--secret is required (the signingSecret the endpoint was created with)');
if (!/^\d{1,5}$/.test(values.port)) usageError(USAGE, '--port must be a port number');

const seen = new Set<string>();

function verify(raw: Buffer, headers: http.IncomingHttpHeaders): ReturnType<typeof verifyWebhook> {
  let last: unknown;
  for (const secret of secrets) {
    try {
      return verifyWebhook(raw, headers, secret);
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (c: Buffer) => {
    size += c.length;
    if (size > MAX_BODY) req.destroy();
    else chunks.push(c);
  });
  req.on('end', () => {
    const raw = Buffer.concat(chunks);
    try {
      const event = verify(raw, req.headers);
      const repeat = seen.has(event.id);
      if (!repeat) {
        if (seen.size >= REMEMBERED) seen.clear();
        seen.add(event.id);
      }
      process.stdout.write(`${new Date().toISOString()}  ${event.type}  ${event.id}${repeat ? '  (repeat, acknowledged)' : ''}\n`);
      if (!values.quiet && !repeat) process.stdout.write(`${JSON.stringify(event.data, null, 2)}\n`);
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    } catch (err) {
      const why = err instanceof WebhookVerificationError ? err.message : 'The body is not a JSON event.';
      process.stdout.write(`${new Date().toISOString()}  refused ${req.method ?? ''} ${req.url ?? ''}: ${why}\n`);
      res.writeHead(400, { 'content-type': 'text/plain' }).end(`${why}\n`);
    }
  });
});

server.listen(Number(values.port), values.host, () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`webhooks:listen verifying on ${originOf(values.host, port)}/ (register it with WEBHOOK_ALLOW_PRIVATE_TARGETS=1)\n`);
});
