// BodyBuffer: a request body gathered from uWS's chunks into one buffer, whatever the chunking.
import test from 'ava';
import { BodyBuffer, maxChunks } from '../gateway/body.js';

const chunk = (bytes: number[]): ArrayBuffer => new Uint8Array(bytes).buffer;

test('a body in one piece is copied once, to exactly its bytes', (t) => {
  const b = new BodyBuffer(1024, 3);
  const source = new Uint8Array([1, 2, 3]);
  t.is(b.add(source.buffer, true), 'done');
  source[0] = 9; // uWS reuses the chunk's memory
  t.deepEqual([...b.body], [1, 2, 3]);
  t.is(b.capacity, 3);
});

test('a declared length is held in one buffer of that length, however it is cut', (t) => {
  const b = new BodyBuffer(100_000, 10_000);
  const piece = new Uint8Array(1000);
  for (let i = 0; i < 10; i++) {
    piece.fill(i);
    t.is(b.add(piece.slice().buffer, i === 9), i === 9 ? 'done' : 'more');
    t.is(b.capacity, 10_000);
  }
  const body = b.body;
  t.is(body.length, 10_000);
  for (let i = 0; i < 10; i++) t.is(body[i * 1000 + 999], i);
});

test('a chunked body in one-byte pieces holds at most twice its bytes, in one buffer', (t) => {
  const limit = 1 << 20;
  const b = new BodyBuffer(limit, undefined);
  const n = maxChunks(limit);
  for (let i = 0; i < n; i++) {
    t.is(b.add(chunk([i & 0xff]), i === n - 1), i === n - 1 ? 'done' : 'more');
    if (b.capacity > Math.max(2 * (i + 1), 4096)) t.fail(`capacity ${b.capacity} for ${i + 1} bytes`);
  }
  const body = b.body;
  t.is(body.length, n);
  t.true(body.every((x, i) => x === (i & 0xff)));
});

test('past the limit: too large, and the buffer never grows past the limit', (t) => {
  const b = new BodyBuffer(10_000, undefined);
  t.is(b.add(new Uint8Array(6000).buffer, false), 'more');
  t.is(b.add(new Uint8Array(3000).buffer, false), 'more');
  t.true(b.capacity <= 10_000);
  t.is(b.add(new Uint8Array(1001).buffer, false), 'too-large');
  t.true(b.capacity <= 10_000);
  // Exactly the limit is allowed.
  const exact = new BodyBuffer(10_000, undefined);
  exact.add(new Uint8Array(9000).buffer, false);
  t.is(exact.add(new Uint8Array(1000).buffer, true), 'done');
  t.is(exact.body.length, 10_000);
});

test('more pieces than the bound: too fragmented, with nothing past it copied', (t) => {
  const limit = 4096;
  const b = new BodyBuffer(limit, undefined);
  const n = maxChunks(limit);
  for (let i = 0; i < n; i++) b.add(chunk([]), false);
  t.is(b.add(chunk([1]), false), 'too-fragmented');
  t.is(b.add(chunk([1]), true), 'too-fragmented');
});

test('the bound on pieces admits a body whose pieces average 256 bytes', (t) => {
  for (const limit of [4096, 1 << 20, 16 << 20]) t.true(maxChunks(limit) * 256 >= limit, `limit ${limit}`);
});

test('an empty body (Content-Length: 0) is an empty buffer', (t) => {
  const b = new BodyBuffer(1024, 0);
  t.is(b.add(new ArrayBuffer(0), true), 'done');
  t.is(b.body.length, 0);
});
