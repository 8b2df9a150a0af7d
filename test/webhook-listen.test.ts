// `npm run webhooks:listen`: the local receiver verifies each delivery and prints it; a bad
// signature is answered 400 and not printed as an event.

import { spawn } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { request } from 'undici';
import { newSigningSecret, sign, signatureHeaders } from '../common/webhook-signature.js';
import { ROOT } from './helpers/edge-kit.js';

test('webhooks:listen verifies, prints and acknowledges events; refuses a bad signature with 400', async (t) => {
  const secret = newSigningSecret();
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'common', 'webhook-listen.js'), '--port', '0', '--secret', secret], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 10_000);
      child.stdout.on('data', () => {
        const m = /on (http:\/\/127\.0\.0\.1:\d+)\//.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
    });
    const body = JSON.stringify({ id: 'evt_listen1', type: 'order.created', created: new Date().toISOString(), apiVersion: 'v1', data: { id: 'ord_1', note: 'hello-listen' } });
    const t0 = Math.floor(Date.now() / 1000);
    const headers = { 'content-type': 'application/json', ...signatureHeaders('evt_listen1', t0, sign({ id: 'evt_listen1', t: t0, body, secrets: [secret] })) };
    const ok = await request(url, { method: 'POST', headers, body });
    t.is(ok.statusCode, 200);
    await ok.body.text();
    const bad = await request(url, { method: 'POST', headers, body: body.replace('hello', 'HELLO') });
    t.is(bad.statusCode, 400);
    await bad.body.text();
    const again = await request(url, { method: 'POST', headers, body });
    t.is(again.statusCode, 200);
    await again.body.text();
    await new Promise((done) => setTimeout(done, 100));
    t.regex(out, /order\.created {2}evt_listen1\n/);
    t.regex(out, /hello-listen/);
    t.notRegex(out, /HELLO-listen/);
    t.regex(out, /refused POST \/: No signature matches/);
    t.regex(out, /evt_listen1 {2}\(repeat, acknowledged\)/);
  } finally {
    child.kill('SIGTERM');
  }
});
