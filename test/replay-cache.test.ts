// The gateway's cache of kept Idempotency-Key answers: it may only ever answer the very same
// request (tenant, key, method, path, query, Content-Type and body bytes), for a bounded time,
// within a bounded budget.

import { createHash } from 'node:crypto';
import test from 'ava';
import { idemTag, ReplayCache } from '../gateway/idempotency.js';
import type { GatewayRequest } from '../gateway/http-types.js';
import type { Result } from '../proto/messages.js';

const req = (body: string, extra: Partial<GatewayRequest> = {}): GatewayRequest => ({
  method: 'POST',
  path: '/v1/orders',
  query: '',
  headers: { 'content-type': 'application/json' },
  body: Buffer.from(body),
  remoteAddress: '',
  ...extra,
});
const kept: Result<unknown> = { ok: true, value: { id: 'ord_1' }, replayed: true };

test('answers only the same request of the same tenant under the same key', (t) => {
  const cache = new ReplayCache();
  cache.set('t1', 'k', req('{"a":1}'), kept, 0);
  t.is(cache.get('t1', 'k', req('{"a":1}'), 1), kept);
  t.is(cache.get('t2', 'k', req('{"a":1}'), 1), undefined, 'another tenant');
  t.is(cache.get('t1', 'k2', req('{"a":1}'), 1), undefined, 'another key');
  t.is(cache.get('t1', 'k', req('{"a":2}'), 1), undefined, 'another body');
  t.is(cache.get('t1', 'k', req('{"a":1}', { path: '/v1/products' }), 1), undefined, 'another path');
  t.is(cache.get('t1', 'k', req('{"a":1}', { query: 'x=1' }), 1), undefined, 'another query');
  t.is(cache.get('t1', 'k', req('{"a":1}', { headers: { 'content-type': 'text/plain' } }), 1), undefined, 'another Content-Type');
  t.is(cache.get('t1', 'k', req('{"a":1}', { body: undefined }), 1), undefined, 'no body');
});

test('an entry lives entryMs, and the byte budget pushes out the oldest', (t) => {
  const cache = new ReplayCache(64 * 1024, 1000);
  cache.set('t', 'old', req('{}'), kept, 0);
  t.truthy(cache.get('t', 'old', req('{}'), 999));
  t.is(cache.get('t', 'old', req('{}'), 1000), undefined, 'expired');
  // Never past the owner's expiry of the key, which a replayed answer carries.
  cache.set('t', 'ending', req('{}'), { ...kept, keptUntil: 500 }, 0);
  t.truthy(cache.get('t', 'ending', req('{}'), 499));
  t.is(cache.get('t', 'ending', req('{}'), 500), undefined, 'the key expired at its owner');
  const big: Result<unknown> = { ok: true, value: { note: 'x'.repeat(300) }, replayed: true };
  for (let i = 0; i < 200; i++) cache.set('t', `k${i}`, req('{}'), big, 0);
  t.is(cache.get('t', 'k0', req('{}'), 1), undefined, 'the oldest went first');
  t.truthy(cache.get('t', 'k199', req('{}'), 1), 'the newest stays');
  const huge: Result<unknown> = { ok: true, value: { note: 'x'.repeat(64 * 1024) }, replayed: true };
  cache.set('t', 'huge', req('{}'), huge, 0);
  t.is(cache.get('t', 'huge', req('{}'), 1), undefined, 'an answer too big for its share is not kept');
});

test("an entry ends when its owner said the key ends, measured on this gateway's clock, whatever the owner's clock reads", (t) => {
  const cache = new ReplayCache(64 * 1024, 60_000);
  // The owner's clock is 30 s ahead of this gateway's: by its clock the key is kept until
  // 1,070,000, 40 s after it answered at 1,030,000; this gateway caches at 1,000,000.
  cache.set('t', 'skewed', req('{}'), { ...kept, keptUntil: 1_070_000, keptForMs: 40_000 }, 1_000_000);
  t.truthy(cache.get('t', 'skewed', req('{}'), 1_039_999));
  t.is(cache.get('t', 'skewed', req('{}'), 1_040_000), undefined, "the key is gone at its owner: the owner's answer counts from here");
  // An owner of an earlier build sends keptUntil alone: this gateway's clock is all there is.
  cache.set('t', 'older', req('{}'), { ...kept, keptUntil: 1_070_000 }, 1_000_000);
  t.truthy(cache.get('t', 'older', req('{}'), 1_059_999));
  t.is(cache.get('t', 'older', req('{}'), 1_060_000), undefined, 'entryMs still bounds it');
});

test('two tenants with the same key take turns in the cache, and neither gets the other\'s answer', (t) => {
  const cache = new ReplayCache();
  const theirs: Result<unknown> = { ok: true, value: { id: 'ord_2' }, replayed: true };
  cache.set('t1', 'same', req('{"a":1}'), kept, 0);
  cache.set('t2', 'same', req('{"a":1}'), theirs, 0);
  t.is(cache.get('t2', 'same', req('{"a":1}'), 1), theirs);
  t.is(cache.get('t1', 'same', req('{"a":1}'), 1), undefined, "t1's entry made way; t1's retry goes to the owner");
  cache.set('t1', 'same', req('{"a":1}'), kept, 2);
  t.is(cache.get('t1', 'same', req('{"a":1}'), 3), kept);
  t.is(cache.get('t2', 'same', req('{"a":1}'), 3), undefined);
});

test('the fingerprint is SHA-256 over the request line, Content-Type and body bytes, the same however large the request', (t) => {
  // Records kept by earlier builds hold fingerprints taken this way: a retry must match them.
  const expected = (r: GatewayRequest): string =>
    createHash('sha256')
      .update(`${r.method} ${r.path}?${r.query}\n${r.headers['content-type'] ?? ''}\n`)
      .update(r.body ?? Buffer.alloc(0))
      .digest('base64url');
  const requests = [
    req('{"a":1}'),
    req('{"a":1}', { body: undefined }),
    req('{"a":1}', { path: '/v1/orders/\ufffd\u00e9', query: 'q=\u4e2d' }),
    req(`{"note":"${'x'.repeat(20_000)}"}`),
    req(`{"note":"${'\u00e9'.repeat(6_000)}"}`, { path: `/v1/${'\u4e2d'.repeat(2_000)}` }),
  ];
  for (const r of requests) t.is(idemTag(r, 'k').fingerprint, expected(r), `${r.path.length} ${r.body?.length}`);
  // Taken one after another, a short request's fingerprint is not touched by a long one's bytes.
  t.is(idemTag(requests[0]!, 'k').fingerprint, expected(requests[0]!));
  t.not(idemTag(req('{"a":2}'), 'k').fingerprint, idemTag(req('{"a":1}'), 'k').fingerprint);
});
