// BodyBuffer: a request body gathered from uWS's pieces into one buffer of its declared length.
import test from 'ava';
import { BodyBuffer, maxChunks } from '../gateway/body.js';

const chunk = (bytes: number[]): ArrayBuffer => new Uint8Array(bytes).buffer;

test('a body in one piece is copied once, to exactly its bytes', (t) => {
  const b = new BodyBuffer(3, maxChunks(1024));
  const source = new Uint8Array([1, 2, 3]);
  t.is(b.add(source.buffer, true), 'done');
  source[0] = 9; // uWS reuses the chunk's memory
  t.deepEqual([...b.body], [1, 2, 3]);
  t.is(b.capacity, 3);
});

test('a declared length is held in one buffer of that length, however it is cut', (t) => {
  const b = new BodyBuffer(10_000, maxChunks(100_000));
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

test('a body in one-byte pieces, up to the bound, is read whole', (t) => {
  const limit = 1 << 20;
  const n = maxChunks(limit);
  const b = new BodyBuffer(n, n);
  for (let i = 0; i < n; i++) t.is(b.add(chunk([i & 0xff]), i === n - 1), i === n - 1 ? 'done' : 'more');
  const body = b.body;
  t.is(body.length, n);
  t.is(b.capacity, n);
  t.true(body.every((x, i) => x === (i & 0xff)));
});

test('more pieces than the bound: too fragmented, with nothing past it copied', (t) => {
  const n = maxChunks(4096);
  const b = new BodyBuffer(n + 2, n);
  for (let i = 0; i < n; i++) t.is(b.add(chunk([7]), false), 'more');
  t.is(b.add(chunk([1]), false), 'too-fragmented');
  t.is(b.add(chunk([1]), true), 'too-fragmented');
  t.is(b.body.length, n);
});

test('the bound on pieces admits a body whose pieces average 256 bytes', (t) => {
  for (const limit of [4096, 1 << 20, 16 << 20]) t.true(maxChunks(limit) * 256 >= limit, `limit ${limit}`);
});

test('an empty body (Content-Length: 0) is an empty buffer', (t) => {
  const b = new BodyBuffer(0, maxChunks(1024));
  t.is(b.add(new ArrayBuffer(0), true), 'done');
  t.is(b.body.length, 0);
});
