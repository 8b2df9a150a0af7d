// The sender's keep-alive pools (actors/webhook-send.ts), over real sockets to local receivers:
// past its bound of pools, the one used longest ago goes, and a request it carries still ends
// with its answer, never reset, its socket closing once that answer is in. Past its bound of
// connections to an origin, a request's wait for one is not counted against the receiver. Closing
// the sender settles every request at once, queued ones too, and sends none of them later.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import test from 'ava';
import { WebhookSender } from '../actors/webhook-send.js';

interface Receiver {
  url: URL;
  connections: number;
  open: number;
  requests: number;
  close(): Promise<void>;
}

async function receiver(answerAfterMs: number): Promise<Receiver> {
  const server = http.createServer((req, res) => {
    r.requests++;
    req.resume();
    // Infinity: a receiver that never answers.
    if (answerAfterMs !== Infinity) req.on('end', () => setTimeout(() => res.end('ok'), answerAfterMs));
  });
  const r: Receiver = { url: new URL('http://127.0.0.1'), connections: 0, open: 0, requests: 0, close: () => new Promise((done) => server.close(() => done())) };
  server.on('connection', (socket) => {
    r.connections++;
    r.open++;
    socket.on('close', () => r.open--);
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  r.url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`);
  return r;
}

const LOOPBACK = [{ address: '127.0.0.1', family: 4 as const }];

test('past its bound, the pool used longest ago goes; its request under way still gets its answer, and its socket then closes', async (t) => {
  const [slow, b, c] = await Promise.all([receiver(400), receiver(0), receiver(0)]);
  const sender = new WebhookSender({ timeoutMs: 5_000, maxAgents: 2 });
  try {
    const send = (r: Receiver): Promise<number | null> => sender.send(r.url, LOOPBACK, {}, '{}').then((x) => x.status);
    const underWay = send(slow);
    await delay(50);
    t.is(await send(b), 200);
    // A third origin: the slow receiver's pool, used longest ago, goes while its request waits.
    t.is(await send(c), 200);
    t.is(sender.pools, 2);
    t.is(await underWay, 200, 'the request of a pool that went was cut off');
    const until = Date.now() + 2_000;
    while (slow.open > 0 && Date.now() < until) await delay(20);
    t.is(slow.open, 0, 'the socket of a pool that went stays open');

    // Used since, b's pool outlives c's: the next new origin takes c's place, and b's socket is
    // used again rather than a new one opened.
    t.is(await send(b), 200);
    t.is(await send(slow), 200);
    t.is(await send(b), 200);
    t.is(b.connections, 1, 'the pool used last was the one that went');
    t.is(sender.pools, 2);
  } finally {
    sender.close();
    await Promise.all([slow, b, c].map((r) => r.close()));
  }
});

test('closing the sender ends the requests of a pool that went too', async (t) => {
  const [slow, b] = await Promise.all([receiver(400), receiver(0)]);
  const sender = new WebhookSender({ timeoutMs: 5_000, maxAgents: 1 });
  try {
    const underWay = sender.send(slow.url, LOOPBACK, {}, '{}');
    await delay(50);
    t.is((await sender.send(b.url, LOOPBACK, {}, '{}')).status, 200);
    sender.close();
    const ended = await underWay;
    t.is(ended.status, null, 'the request outlived close()');
    t.truthy(ended.error);
  } finally {
    sender.close();
    await Promise.all([slow, b].map((r) => r.close()));
  }
});

test('the deadline starts when a request has a connection; one that waits a whole timeout for one is given up unsent', async (t) => {
  const slow = await receiver(400);
  const sender = new WebhookSender({ timeoutMs: 700, socketsPerOrigin: 1 });
  try {
    const [a, b, c] = await Promise.all([1, 2, 3].map(() => sender.send(slow.url, LOOPBACK, {}, '{}')));
    t.is(a!.status, 200);
    // b waited 400 ms for a's connection, then was answered in 400: within its 700 ms.
    t.is(b!.status, 200, `b: ${String(b!.error)}`);
    t.is(b!.withdrawn, undefined);
    // c would have waited 800 ms: given up before it reached the receiver.
    t.deepEqual([c!.status, c!.withdrawn], [null, true]);
    await delay(300);
    t.is(slow.requests, 2, 'the request given up was sent after all');
  } finally {
    sender.close();
    await slow.close();
  }
});

test('closing the sender settles every request at once, queued ones too, and sends none of them afterwards', async (t) => {
  const silent = await receiver(Infinity);
  const sender = new WebhookSender({ timeoutMs: 3_000, socketsPerOrigin: 1 });
  try {
    const closing = { at: 0 };
    const settled = [1, 2, 3].map(() => sender.send(silent.url, LOOPBACK, {}, '{}').then((res) => ({ res, afterCloseMs: Date.now() - closing.at })));
    await delay(200);
    const seen = { connections: silent.connections, requests: silent.requests };
    t.deepEqual(seen, { connections: 1, requests: 1 }, 'one connection to the origin, its other requests queued');
    closing.at = Date.now();
    sender.close();
    for (const { res, afterCloseMs } of await Promise.all(settled)) {
      t.deepEqual([res.status, res.withdrawn], [null, true], String(res.error));
      // Well under the 3 s timeout: close() does not wait on a request it cut off.
      t.true(afterCloseMs < 500, `settled ${afterCloseMs} ms after close()`);
    }
    await delay(300);
    t.deepEqual({ connections: silent.connections, requests: silent.requests }, seen, 'a queued request was sent after close()');
    const late = await sender.send(silent.url, LOOPBACK, {}, '{}');
    t.deepEqual([late.status, late.withdrawn], [null, true]);
  } finally {
    sender.close();
    await silent.close();
  }
});
