// The NATS wire codec (common/nats-wire.ts) on its own: every message decodes by itself, in any
// order and in another process's decoder, and a node or gateway of the release that wrote plain
// maps (useRecords: false) reads this release's messages and is read by it.

import test from 'ava';
import { Packr } from 'msgpackr';
import { decodeReply, decodeRequest, packr } from '../common/nats-wire.js';

const order = (id: string, version: number) => ({ id, tenant: 't1', version, status: 'pending', currency: 'EUR', customerId: null, note: null, metadata: {}, items: [], total: 0, createdAt: 1, updatedAt: 2 });
const reply = (ids: string[]) => ({ results: ids.map((id, i) => ({ ok: true, value: order(id, i + 1) })) });

test('replies decode each on their own, in any order, in a decoder that saw nothing before', (t) => {
  const first = packr.pack(reply(['ord_a', 'ord_b', 'ord_c']));
  const second = packr.pack(reply(['ord_d']));
  // Another process's decoder, as nats-wire.ts configures it: fresh, and given the second message first.
  const elsewhere = new Packr({ mapsAsObjects: true });
  t.deepEqual(elsewhere.unpack(second), reply(['ord_d']));
  t.deepEqual(elsewhere.unpack(first), reply(['ord_a', 'ord_b', 'ord_c']));
  t.deepEqual(decodeReply(second, 1).results, reply(['ord_d']).results);
  t.deepEqual(decodeReply(first, 3).results, reply(['ord_a', 'ord_b', 'ord_c']).results);
});

test('a reply of many orders names their members once', (t) => {
  const many = reply(Array.from({ length: 16 }, (_, i) => `ord_${i}`));
  const asMaps = new Packr({ useRecords: false }).pack(many);
  // Sixteen orders of twelve members: the names alone are over 1 KB when written per order.
  t.true(packr.pack(many).length < asMaps.length * 0.6, `${packr.pack(many).length} against ${asMaps.length} bytes`);
});

test('the release that wrote maps reads these messages, and these read its', (t) => {
  const before = new Packr({ useRecords: false });
  const req = { v: 1 as const, commands: [{ kind: 'order.get', tenant: 't1', partition: 7, id: 'ord_a' }] };
  t.deepEqual(before.unpack(packr.pack(req)), req);
  t.deepEqual(decodeRequest(before.pack(req)), req);
  t.deepEqual(before.unpack(packr.pack(reply(['ord_a', 'ord_b']))), reply(['ord_a', 'ord_b']));
  t.deepEqual(decodeReply(before.pack(reply(['ord_a', 'ord_b'])), 2).results, reply(['ord_a', 'ord_b']).results);
});
