// Storage that can no longer be trusted ends the node (storage/store.ts Store.appliedAnyway,
// Store.failedWith), and a stop that cannot finish is cut short (common/shutdown.ts). The faults
// are made where lmdb-js hands them over: a commit that rejects with a cause, as lmdb-js rejects
// one whose fdatasync, page write or meta write failed; LMDB's own reads and writes are real.

import { spawn } from 'node:child_process';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { ActorHost } from '../actors/host.js';
import { allPartitions } from '../common/partitions.js';
import { newId } from '../common/ids.js';
import { Store, type Table, type TableSpec } from '../storage/store.js';
import { removeDir, ROOT, silentLog, tempDir } from './helpers/edge-kit.js';

interface Doc {
  id: string;
  version: number;
  note: string;
}

const DOCS: TableSpec<Doc> = { name: 'docs', indexKeys: () => [] };

/** lmdb-js's rejection of a failed commit: its cause (`commitError`) rejects with the errno. */
function commitFailure(code = 5): Error {
  const commitError = Promise.reject(Object.assign(new Error('Input/output error'), { code }));
  return Object.assign(new Error('Commit failed (see commitError for details)'), { commitError });
}

type Queue = (list: unknown[]) => Promise<unknown>;

/** What lmdb-js throws once LMDB has had a fatal error. */
function lmdbPanic(): Error {
  return Object.assign(new Error('MDB_PANIC: Update of meta page failed or environment had fatal error'), { code: 22 });
}

/**
 * The store's next commit goes to LMDB as `how` says, then is reported failed as lmdb-js reports
 * it; 'refused after' leaves LMDB refusing reads of `table` as it does after a failed meta write.
 */
function failNextCommit(store: Store, how: 'applied' | 'not applied' | 'refused after', table = 'docs'): void {
  const inner = store as unknown as { queue: Queue };
  const queue = inner.queue.bind(store);
  inner.queue = async (list) => {
    inner.queue = queue;
    if (how === 'applied') await queue(list);
    if (how === 'refused after') {
      (store.tableNamed(table) as unknown as { db: { getBinary(key: unknown): unknown } }).db.getBinary = () => {
        throw lmdbPanic();
      };
    }
    throw commitFailure();
  };
}

async function storeWithFatal(t: { teardown(fn: () => Promise<void>): void }, stallProbeMs?: number): Promise<{ store: Store; fatal: unknown[] }> {
  const dir = await tempDir('storage-fatal');
  const fatal: unknown[] = [];
  const store = Store.open(dir, { onFatal: (err) => fatal.push(err), stallProbeMs });
  await store.ready;
  t.teardown(async () => {
    await store.close().catch(() => undefined);
    await removeDir(dir);
  });
  return { store, fatal };
}

test('a commit reported failed that changed nothing (no room, a page not written) is answered as failed, and the store serves on', async (t) => {
  const { store, fatal } = await storeWithFatal(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'kept' } }]);
  failNextCommit(store, 'not applied');
  await t.throwsAsync(store.commit([{ table: docs, id: 'd1', before: docs.get('d1'), after: { id: 'd1', version: 2, note: 'lost' } }]), { message: /Commit failed/ });
  t.deepEqual(fatal, []);
  t.is(docs.get('d1')?.note, 'kept');
  await store.commit([{ table: docs, id: 'd2', before: undefined, after: { id: 'd2', version: 1, note: 'later' } }]);
  t.is(docs.get('d2')?.note, 'later');
});

test('a commit reported failed whose transaction is visible anyway (a failed fdatasync) is fatal before it is answered', async (t) => {
  const { store, fatal } = await storeWithFatal(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'first' } }]);
  failNextCommit(store, 'applied');
  const failed = store.commit([{ table: docs, id: 'd1', before: docs.get('d1'), after: { id: 'd1', version: 2, note: 'visible' } }]);
  await t.throwsAsync(failed, { message: /Commit failed/ });
  t.is(fatal.length, 1, 'reported once, by the time the failure is answered');
  t.regex(String((fatal[0] as Error).message), /applied/);
  t.regex(String(((fatal[0] as Error).cause as Error).message), /Commit failed/);

  // A delete counts the same way: found gone, it was applied.
  const again = await storeWithFatal(t);
  const more = again.store.table(DOCS);
  await again.store.commit([{ table: more, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'x' } }]);
  failNextCommit(again.store, 'applied');
  await t.throwsAsync(again.store.commit([{ table: more, id: 'd1', before: more.get('d1'), after: undefined }]));
  t.is(again.fatal.length, 1);
});

test('LMDB refusing transactions after a failed commit (a failed meta write) is fatal; so is its panic thrown by a read', async (t) => {
  const { store, fatal } = await storeWithFatal(t);
  const docs = store.table(DOCS);
  failNextCommit(store, 'refused after');
  await t.throwsAsync(store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'x' } }]));
  t.is(fatal.length, 1);
  t.regex(String((fatal[0] as Error).message), /refuses transactions/);

  const other = await storeWithFatal(t);
  other.store.failedWith(new Error('a bug of ours, not storage'));
  t.deepEqual(other.fatal, []);
  const panic = lmdbPanic();
  other.store.failedWith(panic);
  other.store.failedWith(panic);
  t.deepEqual(other.fatal, [panic], 'reported once');
});

test('a flush LMDB answers as done while refusing everything after it (a failed write of the synced meta page) acknowledges nothing', async (t) => {
  const { store, fatal } = await storeWithFatal(t);
  const docs = store.table(DOCS);
  await store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'on disk' } }]);
  t.deepEqual(fatal, []);
  const panic = lmdbPanic();
  (store as unknown as { root: { getBinary(key: unknown): unknown } }).root.getBinary = () => {
    throw panic;
  };
  const both = [
    store.commit([{ table: docs, id: 'd2', before: undefined, after: { id: 'd2', version: 1, note: 'x' } }]),
    store.commit([{ table: docs, id: 'd3', before: undefined, after: { id: 'd3', version: 1, note: 'y' } }]),
  ];
  for (const commit of both) await t.throwsAsync(commit, { message: /not known to be on disk/ });
  t.deepEqual(fatal, [panic]);
});

/** The store's next `flushed` is one lmdb-js never settles, as when its resolver went with a failed batch. */
function loseNextFlush(store: Store): void {
  const root = (store as unknown as { root: object }).root;
  const real = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(root), 'flushed') ?? Object.getOwnPropertyDescriptor(root, 'flushed')!;
  let lost = 1;
  Object.defineProperty(root, 'flushed', {
    configurable: true,
    get(this: object) {
      if (lost-- > 0) return { then: (resolve: () => void, reject: (err: unknown) => void) => new Promise<never>(() => {}).then(resolve, reject) };
      return real.get ? real.get.call(this) : real.value;
    },
  });
}

const within = <T>(ms: number, p: Promise<T>): Promise<T | 'still waiting'> => Promise.race([p, new Promise<'still waiting'>((resolve) => setTimeout(() => resolve('still waiting'), ms))]);

/** A store with commit d1 waiting on a flush lmdb-js never settles, and nothing else written. */
async function commitLeftBehind(t: ExecutionContext): Promise<{ store: Store; fatal: unknown[]; docs: Table<Doc>; lost: Promise<void> }> {
  const { store, fatal } = await storeWithFatal(t, 60_000);
  const docs = store.table(DOCS);
  loseNextFlush(store);
  const lost = store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'x' } }]);
  t.is(await within(300, lost.then(() => 'acknowledged')), 'still waiting');
  return { store, fatal, docs, lost };
}

test('a commit whose flush lmdb-js never settles (its resolver dropped with a failed batch) is released by a later commit\'s flush', async (t) => {
  const { store, fatal, docs, lost } = await commitLeftBehind(t);
  await store.commit([{ table: docs, id: 'd2', before: undefined, after: { id: 'd2', version: 1, note: 'y' } }]);
  t.is(await within(1000, lost.then(() => 'acknowledged')), 'acknowledged');
  t.deepEqual(fatal, []);
});

test('a commit left behind by a lost flush is not released by a later flush once the storage failed in that flush\'s turn', async (t) => {
  const { store, fatal, docs, lost } = await commitLeftBehind(t);
  // The later flush passes its check, then LMDB's panic is seen in the same turn, before the
  // commits it left behind are gone over.
  const inner = store as unknown as { releaseFlushed(seq: number): void };
  const release = inner.releaseFlushed.bind(store);
  const panic = lmdbPanic();
  inner.releaseFlushed = (seq) => {
    release(seq);
    store.failedWith(panic);
  };
  await store.commit([{ table: docs, id: 'd2', before: undefined, after: { id: 'd2', version: 1, note: 'y' } }]);
  t.is(await within(500, lost.then(() => 'acknowledged')), 'still waiting');
  t.deepEqual(fatal, [panic]);
});

test('a commit whose flush is lost, with nothing else written, is released by a commit of the store\'s own once nothing has settled for a while', async (t) => {
  const { store, fatal } = await storeWithFatal(t, 200);
  const docs = store.table(DOCS);
  loseNextFlush(store);
  const commit = store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'x' } }]);
  t.is(await within(5000, commit.then(() => 'acknowledged')), 'acknowledged');
  t.is(docs.get('d1')?.note, 'x');
  t.deepEqual(fatal, []);
});

test('commits in flight with none settling: LMDB is probed, and its panic ends the node; a disk merely slow does not', async (t) => {
  const stuck = (store: Store): void => {
    (store as unknown as { queue: Queue }).queue = () => new Promise(() => {});
  };
  const panicking = await storeWithFatal(t, 200);
  const docs = panicking.store.table(DOCS);
  stuck(panicking.store);
  void panicking.store.commit([{ table: docs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'x' } }]);
  const panic = lmdbPanic();
  (panicking.store as unknown as { root: { getBinary(key: unknown): unknown } }).root.getBinary = () => {
    throw panic;
  };
  const slow = await storeWithFatal(t, 200);
  const slowDocs = slow.store.table(DOCS);
  stuck(slow.store);
  void slow.store.commit([{ table: slowDocs, id: 'd1', before: undefined, after: { id: 'd1', version: 1, note: 'x' } }]);
  for (let waited = 0; panicking.fatal.length === 0 && waited < 5000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
  t.deepEqual(panicking.fatal, [panic]);
  t.deepEqual(slow.fatal, [], 'a healthy LMDB answers the probe');
});

async function hostWithFatal(t: { teardown(fn: () => Promise<void>): void }): Promise<{ host: ActorHost; store: Store; fatal: unknown[]; id: string }> {
  const dir = await tempDir('storage-fatal-host');
  const fatal: unknown[] = [];
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: silentLog(), onStorageFatal: (err) => fatal.push(err) });
  t.teardown(async () => {
    await host.close().catch(() => undefined);
    await removeDir(dir);
  });
  await host.ready;
  const id = newId('product', 7);
  const created = await host.handle({ kind: 'product.create', tenant: 't1', partition: 7, id, input: { name: 'p', price: 100, currency: 'EUR' } });
  if (!created.ok) throw new Error(JSON.stringify(created));
  return { host, store: (host as unknown as { store: Store }).store, fatal, id };
}

const INTERNAL = { ok: false, error: { code: 'internal', detail: 'The request could not be completed.' } };

test('the actor host reports a write that failed after it was applied, and answers it 500', async (t) => {
  const { host, store, fatal, id } = await hostWithFatal(t);
  failNextCommit(store, 'applied');
  t.deepEqual(await host.handle({ kind: 'product.patch', tenant: 't1', partition: 7, id, patch: { price: 200 }, ifMatch: undefined }), INTERNAL);
  t.is(fatal.length, 1);
  t.regex(String((fatal[0] as Error).message), /applied/);
});

test("the actor host reports a read that meets LMDB's panic, and answers it 500; any other failure is only answered", async (t) => {
  const { host, store, fatal, id } = await hostWithFatal(t);
  const table = store.tableNamed('products')!;
  const get = table.get.bind(table);
  table.get = () => {
    throw new Error('a bug of ours');
  };
  t.deepEqual(await host.handle({ kind: 'product.get', tenant: 't1', partition: 7, id }), INTERNAL);
  t.deepEqual(fatal, []);
  const panic = lmdbPanic();
  table.get = () => {
    throw panic;
  };
  t.deepEqual(await host.handle({ kind: 'product.get', tenant: 't1', partition: 7, id }), INTERNAL);
  t.deepEqual(fatal, [panic]);
  table.get = get;
});

test('by default a node whose storage cannot be trusted logs it at fatal level and ends at once, killed (SIGKILL), without its exit listeners', async (t) => {
  const dir = await tempDir('storage-fatal-exit');
  t.teardown(() => removeDir(dir));
  const script = `
    const { ActorHost } = await import(${JSON.stringify(join(ROOT, 'dist', 'actors', 'host.js'))});
    const { allPartitions } = await import(${JSON.stringify(join(ROOT, 'dist', 'common', 'partitions.js'))});
    const { createLogger } = await import(${JSON.stringify(join(ROOT, 'dist', 'common', 'log.js'))});
    const host = new ActorHost({ dataDir: ${JSON.stringify(dir)}, partitions: allPartitions(), mailboxLimit: 100, log: createLogger('info', 'actors') });
    // lmdb-js closes its environment in an 'exit' listener, which can block for good after LMDB's panic.
    process.on('exit', () => console.log('an exit listener ran'));
    await host.ready;
    const store = host.store;
    const queue = store.queue.bind(store);
    store.queue = async (list) => {
      await queue(list);
      throw Object.assign(new Error('Commit failed (see commitError for details)'), { commitError: Promise.reject(Object.assign(new Error('Input/output error'), { code: 5 })) });
    };
    await host.handle({ kind: 'product.create', tenant: 't1', partition: 7, id: 'prd_1', input: { name: 'p', price: 100, currency: 'EUR' } });
    setTimeout(() => { console.log('still running'); process.exit(0); }, 2000);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const ended = await new Promise<{ code: number | null; signal: string | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  t.deepEqual(ended, { code: null, signal: 'SIGKILL' }, out);
  t.notRegex(out, /still running/);
  t.notRegex(out, /an exit listener ran/);
  const line = out.split('\n').find((l) => l.includes('"level":60'));
  t.truthy(line, out);
  t.regex(line!, /storage failed and cannot be trusted/);
});

test('a stop that does not finish within its deadline ends the process at once (SIGKILL); one that finishes exits 0', async (t) => {
  const shutdown = JSON.stringify(join(ROOT, 'dist', 'common', 'shutdown.js'));
  const log = JSON.stringify(join(ROOT, 'dist', 'common', 'log.js'));
  const run = async (close: string): Promise<{ code: number | null; signal: string | null; out: string; ms: number }> => {
    const script = `
      const { stopOnSignals } = await import(${shutdown});
      const { createLogger } = await import(${log});
      stopOnSignals(() => ${close}, createLogger('info', 'test'), 300);
      process.on('exit', (code) => { if (code !== 0) console.log('an exit listener ran'); });
      setInterval(() => {}, 1000);
      console.log('ready');
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready\n') && !child.killed) child.kill('SIGTERM');
    });
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const started = Date.now();
    const [code, signal] = await new Promise<[number | null, string | null]>((resolve) => child.once('exit', (c, s) => resolve([c, s])));
    return { code, signal, out, ms: Date.now() - started };
  };
  const stuck = await run('new Promise(() => {})');
  t.is(stuck.signal, 'SIGKILL', stuck.out);
  t.regex(stuck.out, /shutdown did not finish (in time|within 300 ms)/);
  t.notRegex(stuck.out, /an exit listener ran/, 'the deadline ends the process without its exit listeners');
  const clean = await run('Promise.resolve()');
  t.is(clean.code, 0, clean.out);
});

test('a store opened is synced before it is ready: its opening is on disk', async (t) => {
  const { store } = await storeWithFatal(t);
  const opened = store.tableNamed('opened');
  t.truthy(opened, 'the opening marker table exists');
  const at = (opened!.get('last') as { at: number } | undefined)?.at;
  t.true(typeof at === 'number' && Math.abs(Date.now() - at) < 60_000);
});
