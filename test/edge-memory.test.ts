// Refusals at the HTTP edge (414, 431, 400 for bad framing, 411, 413) close their connection. A
// socket this uWS build closes from the event loop's check phase (setImmediate) is never freed:
// about 460 bytes of native memory per refused connection, for as long as the process lives, so
// a client opening connections only to be refused grew the service without bound. Measured on
// the real service in a child process, by its anonymous resident memory (native and heap alike).

import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import anyTest, { type TestFn } from 'ava';
import { startChild, useChildren, type ChildContext } from './helpers/child-service.js';

const test = anyTest as TestFn<ChildContext>;
useChildren(test, 'edge-memory');

const SECRET = 'edge-memory-secret-0123456789abcdef';
const ROUND = 20_000;
const AT_ONCE = 200;

function anonMb(pid: number): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]) / 1024;
}

/** One connection sending `bytes`, until the server closes it (or 2 s pass); resolves with what came back. */
function exchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    const timer = setTimeout(() => socket.destroy(), 2000);
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
  });
}

async function refusals(port: number, requests: readonly string[], count: number): Promise<Map<string, number>> {
  const statuses = new Map<string, number>();
  for (let sent = 0; sent < count; sent += AT_ONCE) {
    const answers = await Promise.all(Array.from({ length: Math.min(AT_ONCE, count - sent) }, (_, i) => exchange(port, requests[(sent + i) % requests.length]!)));
    for (const a of answers) {
      const status = a.slice(9, 12) || 'none';
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  }
  return statuses;
}

test('connections refused at the edge leave no memory behind: the service stays flat over rounds of 20,000', async (t) => {
  const svc = await startChild(t.context.children, t.context.dir, SECRET, { RATE_LIMIT_PER_SECOND: '1000000', RATE_LIMIT_BURST: '1000000' });
  const port = Number(new URL(svc.url).port);
  const pid = svc.child.pid!;
  const requests = [
    `GET /v1/orders?${'a'.repeat(4000)} HTTP/1.1\r\nHost: x\r\n\r\n`, // 414
    'POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx', // 400, framing
    `GET /v1/orders HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(5000)}\r\n\r\n`, // 431
  ];
  // Warm-up: the heap and the allocator's arenas grow to their working size first.
  const warm = await refusals(port, requests, ROUND);
  t.deepEqual([...warm.keys()].sort(), ['400', '414', '431'], JSON.stringify([...warm]));
  // Then rounds of the same: leaking, every round held about 9 MB more. The heap may still step
  // up once in a round; the smallest growth of three tells a leak from that.
  const readings = [anonMb(pid)];
  for (let round = 0; round < 3; round++) {
    await refusals(port, requests, ROUND);
    readings.push(anonMb(pid));
  }
  const growth = readings.slice(1).map((mb, i) => mb - readings[i]!);
  t.log(`anonymous RSS ${readings.map((mb) => mb.toFixed(1)).join(' → ')} MB, rounds of ${ROUND} refusals`);
  t.true(Math.min(...growth) < 3, `every round grew: ${growth.map((mb) => mb.toFixed(1)).join(', ')} MB; ${svc.report()}`);
});
