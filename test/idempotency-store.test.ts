// The owner's half of Idempotency-Key (CONTRACT §7), against a real actor host on LMDB with a
// clock the tests move: the result is kept with the effect, answered again to a retry whose
// first answer was lost, kept no longer than the TTL, and never kept for a failure of ours.

import anyTest, { type TestFn } from 'ava';
import { newId, partitionOf } from '../common/ids.js';
import { ActorHost } from '../actors/host.js';
import type { Command, IdemTag, OrderRecord, Result } from '../proto/messages.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { allPartitions } from '../common/partitions.js';
import { RECORD_MARK, Store, type TableSpec } from '../storage/store.js';
import { IDEMPOTENCY, idemCodec, type IdemRecord } from '../actors/idem-record.js';

interface Context {
  dir: string;
  host: ActorHost;
  clock: { now: number };
}

const test = anyTest as TestFn<Context>;
const ALL = allPartitions();
const HOUR = 3600_000;
const TTL = 24 * HOUR;

test.beforeEach(async (t) => {
  const dir = await tempDir('idem-store');
  const clock = { now: Date.UTC(2026, 0, 1) };
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, idempotencyTtlMs: TTL, now: () => clock.now, log: silentLog() });
  t.context = { dir, host, clock };
});

test.afterEach.always(async (t) => {
  await t.context.host.close();
  await removeDir(t.context.dir);
});

function create(tenant: string, idem: IdemTag | undefined, note = 'n'): Command {
  const id = newId('order', 7);
  return { kind: 'order.create', tenant, partition: partitionOf(id), id, input: { currency: 'EUR', customerId: null, note, metadata: {} }, items: [], ...(idem ? { idem } : {}) };
}

const tag = (key: string, fingerprint = 'fp-1'): IdemTag => ({ key, fingerprint });
// The host's idempotency table as an earlier build defined it, to write and read its records directly.
const IDEM_SPEC: TableSpec<{ id: string; expiresAt: number }> = { name: 'idempotency', missesKept: true, indexKeys: (r) => [[r.expiresAt, r.id]] };
const idOf = (r: Result<unknown>): string => (r.ok ? (r.value as OrderRecord).id : `error ${r.error.code}`);

test('a keyed write whose answer was lost is answered again to the retry, and runs once', async (t) => {
  const { host } = t.context;
  const first = await host.handle(create('t1', tag('k')));
  t.true(first.ok);
  t.falsy(first.replayed);
  // The retry carries another freshly minted id: the stored result answers, not a second create.
  const retry = await host.handle(create('t1', tag('k')));
  t.true(retry.replayed);
  t.is(idOf(retry), idOf(first));
  t.deepEqual(retry.ok && retry.value, first.ok && first.value);
  const other = await host.handle(create('t1', tag('k', 'fp-2')));
  t.like(other, { ok: false, error: { code: 'idempotency-key-reused' } });
});

test('a keyed write commits its effect and its kept answer in one transaction, for a create, a patch and a batch', async (t) => {
  const { host } = t.context;
  const store = (host as unknown as { store: { commit(writes: { table: { spec: { name: string } }; id: string }[], how?: unknown): Promise<void> } }).store;
  const commit = store.commit.bind(store);
  const commits: string[][] = [];
  store.commit = (writes, how) => {
    commits.push(writes.map((w) => w.table.spec.name));
    return commit(writes, how);
  };
  const created = await host.handle(create('t1', tag('one-tx')));
  const id = idOf(created);
  await host.handle({ kind: 'order.patch', tenant: 't1', partition: partitionOf(id), id, ifMatch: undefined, patch: { note: 'p' }, idem: tag('one-tx-patch') });
  const batchId = newId('order', 7);
  await host.handle({ kind: 'order.batch', tenant: 't1', partition: 7, atomic: true, ops: [{ index: 0, op: 'create', id: batchId, input: { currency: 'EUR', customerId: null, note: null, metadata: {} }, items: [] }], idem: tag('one-tx-batch') });
  // Each keyed write is one commit holding the order and the key (and its event and outbox row).
  t.is(commits.length, 3, JSON.stringify(commits));
  for (const tables of commits) {
    t.true(tables.includes('orders'), JSON.stringify(tables));
    t.true(tables.includes(IDEMPOTENCY.name), JSON.stringify(tables));
  }
});

test('a replay says how much longer its key is kept, by its owner\'s clock, for a gateway whose clock differs', async (t) => {
  const { host, clock } = t.context;
  const first = await host.handle(create('t1', tag('left')));
  t.is(first.keptUntil, clock.now + TTL);
  clock.now += HOUR;
  const retry = await host.handle(create('t1', tag('left')));
  t.true(retry.replayed);
  t.is(retry.keptUntil, first.keptUntil);
  t.is(retry.keptForMs, TTL - HOUR);
});

test('a kept answer is the record as the first request left it, not as it is now, after a restart too', async (t) => {
  const { dir, clock } = t.context;
  const command = create('t1', tag('snapshot'));
  const first = await t.context.host.handle(command);
  t.true(first.ok);
  const created = first.ok ? (first.value as OrderRecord) : undefined;
  await t.context.host.close();
  // The key's record holds the order's stored bytes, not a copy of the answer.
  const store = Store.open(dir);
  const raw = store.table(IDEMPOTENCY).get('t1\u0000snapshot') as Record<string, unknown> | undefined;
  const stored = store.table(IDEMPOTENCY).db.getBinary('t1\u0000snapshot');
  // Table.decode reads what Table.encode wrote, as replays of kept bytes rely on.
  t.deepEqual(store.table(IDEMPOTENCY).decode(stored!, 't1\u0000snapshot'), raw);
  await store.close();
  t.is(stored?.[0], RECORD_MARK, 'in the fixed layout');
  t.truthy(raw?.bytes instanceof Uint8Array, 'kept as bytes');
  t.is(raw?.table, 'orders');
  t.is(raw?.result, undefined);
  // Restarted: the bytes decode with the record shapes the orders table reloads from disk.
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, idempotencyTtlMs: TTL, now: () => clock.now, log: silentLog() });
  t.context.host = host;
  // The order moves on under another request.
  const cancelled = await host.handle({ kind: 'order.cancel', tenant: 't1', partition: command.partition, id: created!.id, ifMatch: undefined });
  t.true(cancelled.ok, JSON.stringify(cancelled));
  const now = cancelled.ok ? (cancelled.value as OrderRecord) : undefined;
  t.not(now!.version, created!.version);
  t.not(now!.status, created!.status);
  const retry = await host.handle(create('t1', tag('snapshot')));
  t.true(retry.replayed);
  t.deepEqual(retry.ok && retry.value, created, 'the order as created, not as cancelled');
});

test('a key kept in the earlier format, the whole answer beside its id, still replays', async (t) => {
  const { dir } = t.context;
  await t.context.host.close();
  // Written as the host wrote a key before it kept a record's bytes instead of a copy of it.
  const value = { id: 'ord_earlier', status: 'open', version: 3 };
  const store = Store.open(dir);
  const table = store.table(IDEM_SPEC);
  const id = 't1\u0000earlier';
  const record = { id, fingerprint: 'fp-1', result: { ok: true, value }, expiresAt: t.context.clock.now + HOUR };
  await store.commit([{ table: table as never, id, before: undefined, after: record }]);
  await store.close();
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, idempotencyTtlMs: TTL, now: () => t.context.clock.now, log: silentLog() });
  t.context.host = host;
  const retry = await host.handle(create('t1', tag('earlier')));
  t.true(retry.replayed);
  t.deepEqual(retry.ok && retry.value, value);
  t.like(await host.handle(create('t1', tag('earlier', 'fp-2'))), { ok: false, error: { code: 'idempotency-key-reused' } });
  // And the sweep still finds it by the expiry it was indexed under.
  t.context.clock.now += HOUR + 1;
  t.is(await host.sweepIdempotency(), 1);
});

test('a key kept by msgpackr with its record\'s bytes, as before the fixed layout, still replays and is swept', async (t) => {
  const { dir, clock } = t.context;
  const first = await t.context.host.handle(create('t1', tag('packed')));
  t.true(first.ok);
  await t.context.host.close();
  // The same record, rewritten as msgpackr encodes it (the table without its codec).
  const id = 't1\u0000packed';
  const reader = Store.open(dir);
  const kept = reader.table(IDEMPOTENCY).get(id)!;
  await reader.close();
  t.is(kept.table, 'orders');
  const store = Store.open(dir);
  const table = store.table(IDEM_SPEC);
  const packed = { id, fingerprint: kept.fingerprint, expiresAt: kept.expiresAt, table: kept.table, bytes: kept.bytes };
  await store.commit([{ table: table as never, id, before: kept, after: packed }]);
  t.not(table.db.getBinary(id)?.[0], RECORD_MARK, 'written by msgpackr');
  await store.close();
  const host = new ActorHost({ dataDir: dir, partitions: ALL, mailboxLimit: 100, idempotencyTtlMs: TTL, now: () => clock.now, log: silentLog() });
  t.context.host = host;
  const retry = await host.handle(create('t1', tag('packed')));
  t.true(retry.replayed);
  t.deepEqual(retry.ok && retry.value, first.ok && first.value);
  t.like(await host.handle(create('t1', tag('packed', 'fp-2'))), { ok: false, error: { code: 'idempotency-key-reused' } });
  clock.now = kept.expiresAt + 1;
  t.is(await host.sweepIdempotency(), 1);
});

test('the fixed layout gives back every kind of record it is given', (t) => {
  // msgpack stood in by JSON: the layout only carries its bytes.
  const pack = (v: unknown): Uint8Array => Buffer.from(JSON.stringify(v));
  const unpack = (b: Uint8Array): unknown => JSON.parse(Buffer.from(b).toString()) as unknown;
  const records: IdemRecord[] = [
    { id: 'a', fingerprint: 'fp-é-1', expiresAt: 1_767_225_600_123, taken: true },
    { id: 'b', fingerprint: 'x'.repeat(43), expiresAt: 1, table: 'orders', bytes: Uint8Array.from([0xc1, 0, 255, 7]) },
    { id: 'c', fingerprint: '', expiresAt: 2 ** 52, result: { ok: false, error: { code: 'not-found', detail: 'ünïcode' } } },
    { id: 'd', fingerprint: 'fp', expiresAt: 5, result: { ok: true, value: null } },
  ];
  for (const r of records) {
    const bytes = idemCodec.encode(r, pack);
    t.is(bytes[0], RECORD_MARK);
    const back = idemCodec.decode(Buffer.from(bytes), r.id, unpack);
    if (r.bytes) t.deepEqual(Uint8Array.from(back.bytes!), r.bytes);
    t.deepEqual({ ...back, bytes: undefined }, { ...r, bytes: undefined }, r.id);
  }
  t.throws(() => idemCodec.decode(Buffer.from([RECORD_MARK, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), 'z', unpack), { message: /unknown kind/ });
});

test('two writes with one key at once: the second is refused as in flight, not queued', async (t) => {
  const { host } = t.context;
  const a = host.handle(create('t1', tag('race')));
  const b = await host.handle(create('t1', tag('race')));
  t.like(b, { ok: false, error: { code: 'idempotency-key-in-flight' } });
  t.true((await a).ok);
});

test('a retry that peeks while the first request is still being flushed hears "in flight", never a replay', async (t) => {
  const { host } = t.context;
  // The first request's answer is readable from its commit on, a moment before its flush; a
  // retry peeking in that moment must not be answered 2xx. The window is narrow: many tries.
  for (let i = 0; i < 30; i++) {
    const key = tag(`flush-${i}`);
    const first = create('t1', key);
    let done = false;
    const running = host.handle(first).then((r) => {
      done = true;
      return r;
    });
    const early: string[] = [];
    while (!done) {
      const peeked = await host.handle({ kind: 'idem.peek', tenant: 't1', partition: first.partition, idem: key });
      if (!done) early.push(peeked.ok ? (peeked.replayed ? 'replayed' : 'free') : peeked.error.code);
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.true((await running).ok);
    t.deepEqual([...new Set(early)], early.length ? ['idempotency-key-in-flight'] : [], `try ${i}`);
    const after = await host.handle({ kind: 'idem.peek', tenant: 't1', partition: first.partition, idem: key });
    t.true(after.replayed, 'once flushed, the answer is replayed');
  }
});

test('an answer that asks for a retry (a race lost) is not kept: the retry under the same key runs', async (t) => {
  const { host } = t.context;
  const order = create('t1', undefined);
  t.true((await host.handle(order)).ok);
  const add = (currency: string): Command => ({
    kind: 'order.addItem',
    tenant: 't1',
    partition: order.partition,
    id: (order as { id: string }).id,
    ifMatch: undefined,
    item: { id: newId('item', order.partition), productId: newId('product'), quantity: 1, unitPrice: 100 },
    currency,
    idem: tag('priced'),
  });
  // Priced in the currency the gateway read, which changed before the item reached the order.
  const lost = await host.handle(add('USD'));
  t.like(lost, { ok: false, error: { code: 'conflict' } });
  const retry = await host.handle(add('EUR'));
  t.true(retry.ok, 'the retry ran');
  t.falsy(retry.replayed);
  t.is(retry.ok ? (retry.value as OrderRecord).items.length : 0, 1);
  t.true((await host.handle(add('EUR'))).replayed, 'and its answer is kept');
});

test('a key is kept for the TTL: after it, the same key runs anew, and the sweep forgets it', async (t) => {
  const { host, clock } = t.context;
  const first = await host.handle(create('t1', tag('ttl')));
  clock.now += TTL - 1;
  const within = await host.handle(create('t1', tag('ttl')));
  t.true(within.replayed, 'still kept one millisecond before expiry');
  clock.now += 2;
  const after = await host.handle(create('t1', tag('ttl')));
  t.true(after.ok);
  t.falsy(after.replayed, 'an expired key is a new key');
  t.not(idOf(after), idOf(first));

  // The sweep removes what is due, and only that. Winding the clock back afterwards shows it:
  // a key still kept would be replayed at that time, a swept one runs anew.
  const start = clock.now;
  await host.handle(create('t1', tag('due')));
  clock.now = start + TTL / 2;
  const notDue = await host.handle(create('t1', tag('not-due')));
  clock.now = start + TTL + 1;
  await host.sweepIdempotency();
  clock.now = start + 1;
  const due = await host.handle(create('t1', tag('due')));
  t.falsy(due.replayed, 'the key past its expiry was swept');
  const kept = await host.handle(create('t1', tag('not-due')));
  t.true(kept.replayed, 'a key not yet due survives the sweep');
  t.is(idOf(kept), idOf(notDue));
});

test('a key whose expired record the sweep is deleting is not "in flight": a new request waits for the sweep, then runs', async (t) => {
  const { host, clock } = t.context;
  const first = create('t1', tag('swept'));
  t.true((await host.handle(first)).ok);
  clock.now += TTL + 1;
  // The sweep takes the key's mailbox at once and holds it over its commit.
  const sweep = host.sweepIdempotency();
  const peeked = await host.handle({ kind: 'idem.peek', tenant: 't1', partition: first.partition, idem: tag('swept', 'fp-2') });
  t.deepEqual(peeked, { ok: true, value: null });
  const next = await host.handle(create('t1', tag('swept', 'fp-2'), 'second'));
  t.true(next.ok, JSON.stringify(next));
  t.falsy(next.replayed);
  t.is(await sweep, 1);
  // What the new request kept is there after the sweep: the retry of it replays.
  t.true((await host.handle(create('t1', tag('swept', 'fp-2'), 'second'))).replayed);
});

test('a failure of ours (5xx) is not kept: the retry runs', async (t) => {
  const { host } = t.context;
  // items: null makes the order actor throw a TypeError: an internal failure, not a refusal.
  const broken = { ...create('t1', tag('bug')), items: null } as unknown as Command;
  const failed = await host.handle(broken);
  t.like(failed, { ok: false, error: { code: 'internal' } });
  const retry = await host.handle(create('t1', tag('bug')));
  t.true(retry.ok);
  t.falsy(retry.replayed);
});

test('keys are per tenant', async (t) => {
  const { host } = t.context;
  const a = await host.handle(create('t1', tag('same')));
  const b = await host.handle(create('t2', tag('same')));
  t.true(a.ok && b.ok);
  t.falsy(b.replayed);
  t.not(idOf(a), idOf(b));
});

test('one sweep forgets every key that is due, however many, in chunks', async (t) => {
  const { host, clock } = t.context;
  const start = clock.now;
  const n = 2500;
  // Written in waves so the mailboxes stay far from their limit.
  for (let at = 0; at < n; at += 500) {
    const wave = await Promise.all(Array.from({ length: 500 }, (_, i) => host.handle(create('t1', tag(`bulk-${at + i}`)))));
    t.true(wave.every((r) => r.ok));
  }
  clock.now = start + TTL + 1;
  t.is(await host.sweepIdempotency(), n);
  clock.now = start + 1;
  for (const i of [0, 999, 1000, 2499]) t.falsy((await host.handle(create('t1', tag(`bulk-${i}`)))).replayed, `bulk-${i} was swept`);
});

test("a key taken at its home (idem.take) has no answer: the request's own write runs and keeps its answer there; another request is refused", async (t) => {
  const { host, clock } = t.context;
  const take = (fingerprint: string): Promise<Result<unknown>> => host.handle({ kind: 'idem.take', tenant: 't1', partition: 9, idem: tag('taken', fingerprint) });
  const took = await take('fp-1');
  t.like(took, { ok: true, value: null });
  const until = took.keptUntil!;
  t.is(until, clock.now + TTL);
  // Taken again by the same request, later: still taken, its expiry unchanged.
  clock.now += HOUR;
  t.like(await take('fp-1'), { ok: true, replayed: true, keptUntil: until });
  t.like(await take('fp-2'), { ok: false, error: { code: 'idempotency-key-reused' } });
  // A peek finds no answer yet, so the gateway goes on to the write: not a replay of nothing.
  const peeked = await host.handle({ kind: 'idem.peek', tenant: 't1', partition: 9, idem: tag('taken') });
  t.like(peeked, { ok: true, value: null });
  t.falsy(peeked.replayed);
  // The write (in this store too) runs under the take's expiry, and its answer replaces the mark.
  const first = await host.handle(create('t1', { ...tag('taken'), until }));
  t.true(first.ok, JSON.stringify(first));
  t.falsy(first.replayed);
  t.is(first.keptUntil, until);
  const retry = await host.handle(create('t1', tag('taken')));
  t.true(retry.replayed);
  t.is(idOf(retry), idOf(first));
  t.like(await take('fp-1'), { ok: true, replayed: true, keptUntil: until });
  t.like(await take('fp-2'), { ok: false, error: { code: 'idempotency-key-reused' } });
  t.like(await host.handle(create('t1', tag('taken', 'fp-2'))), { ok: false, error: { code: 'idempotency-key-reused' } });
});
