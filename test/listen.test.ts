// One port, one service: a second process started on a port already served fails to start and
// says why. Had it bound as well (SO_REUSEPORT, which later uSockets builds set by default), the
// kernel would split connections between the two, and tokens of one data directory would get 401
// from the other.

import anyTest, { type TestFn } from 'ava';
import { join } from 'node:path';
import { startChild, useChildren, type ChildContext } from './helpers/child-service.js';
import { token } from './helpers/edge-kit.js';

const test = anyTest as TestFn<ChildContext>;
const SECRET = 'listen-test-secret-0123456789abcdef';

useChildren(test, 'listen');

test('a second service on a port already served exits 1 and says why; the first keeps every connection', async (t) => {
  const first = await startChild(t.context.children, join(t.context.dir, 'first'), SECRET);
  const port = new URL(first.url).port;
  const second = startChild(t.context.children, join(t.context.dir, 'second'), SECRET, { PORT: port });
  const err = await t.throwsAsync(second);
  t.regex(err?.message ?? '', /^exited \(1\) before listening/);
  t.regex(err?.message ?? '', new RegExp(`failed to start: cannot listen on 127\\.0\\.0\\.1:${port}: the port is in use`));
  const auth = { authorization: `Bearer ${await token(SECRET, 'orders:read', { tenant: 'listen' })}` };
  for (let i = 0; i < 10; i++) {
    const res = await fetch(`${first.url}/v1/orders`, { headers: { ...auth, connection: 'close' } });
    t.is(res.status, 200);
    await res.arrayBuffer();
  }
});

test('HOST may name an IPv6 address in brackets, as in a URL: the service listens there and prints a URL that reaches it', async (t) => {
  const running = await startChild(t.context.children, join(t.context.dir, 'bracketed'), SECRET, { HOST: '[::1]' });
  t.regex(running.url, /^http:\/\/\[::1\]:\d+$/);
  const auth = { authorization: `Bearer ${await token(SECRET, 'orders:read', { tenant: 'listen' })}` };
  const res = await fetch(`${running.url}/v1/orders`, { headers: { ...auth, connection: 'close' } });
  t.is(res.status, 200);
  await res.arrayBuffer();
});
