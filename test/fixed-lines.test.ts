// The response header lines the uWS edge keeps encoded (gateway/http.ts FixedLines): one block
// per combination of values, checked for CR and LF once, and never more than MAX_FIXED_BLOCKS.

import test from 'ava';
import { FixedLines, KEEP_ALIVE, MAX_FIXED_BLOCKS } from '../gateway/http.js';

const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');

test('a combination is encoded once as the lines uWS writes, and found again by its values', (t) => {
  const lines = new FixedLines();
  const block = lines.get('private, no-cache', 'Accept, Accept-Encoding', 'application/json', '"default";q=2000;w=2', true)!;
  t.is(text(block.name), 'cache-control');
  t.is(text(block.rest), `private, no-cache\r\nvary: Accept, Accept-Encoding\r\ncontent-type: application/json\r\nratelimit-policy: "default";q=2000;w=2\r\nkeep-alive: ${KEEP_ALIVE}`);
  // Equal values built anew find the same block.
  t.is(lines.get(['private', 'no-cache'].join(', '), 'Accept, Accept-Encoding', 'application/json', '"default";q=2000;w=2', true), block);
  t.not(lines.get('private, no-cache', 'Accept, Accept-Encoding', 'application/json', '"default";q=2000;w=2', false), block);
});

test('absent lines are left out; with none there is no block', (t) => {
  const lines = new FixedLines();
  const block = lines.get(undefined, 'Accept', undefined, undefined, false)!;
  t.is(text(block.name), 'vary');
  t.is(text(block.rest), 'Accept');
  t.is(lines.get(undefined, undefined, undefined, undefined, false), undefined);
  t.is(text(lines.get(undefined, undefined, undefined, undefined, true)!.name), 'keep-alive');
});

test('a CR or LF in a value becomes a space: no line can be forged', (t) => {
  const lines = new FixedLines();
  const block = lines.get('no-store\r\nset-cookie: a=b', undefined, 'text/plain\nx: y', undefined, false)!;
  t.is(text(block.rest), 'no-store  set-cookie: a=b\r\ncontent-type: text/plain x: y');
});

test(`at most ${MAX_FIXED_BLOCKS} combinations are kept: the oldest goes`, (t) => {
  const lines = new FixedLines();
  const first = lines.get('c-0', undefined, undefined, undefined, false);
  t.is(lines.get('c-0', undefined, undefined, undefined, false), first);
  for (let i = 1; i <= MAX_FIXED_BLOCKS; i++) lines.get(`c-${i}`, undefined, undefined, undefined, false);
  t.is(lines.size, MAX_FIXED_BLOCKS);
  // c-0 went: asked again, it is encoded anew.
  t.not(lines.get('c-0', undefined, undefined, undefined, false), first);
  t.is(lines.size, MAX_FIXED_BLOCKS);
});
