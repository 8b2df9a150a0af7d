// Creating orders on any of the servers through the public API (CONTRACT §6, §7): one at a time
// for the few a scenario addresses, or in bulk (batch when the server has it) for seeding. Seeding
// is never timed as part of a measurement.
import { performance } from 'node:perf_hooks';
import { call, pool } from './http.js';
import { ORDER_BODY } from './fixtures.js';

export interface Created {
  id: string;
  path: string;
  etag: string;
}

function auth(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
}

export async function createOrder(base: string, token: string, body = ORDER_BODY): Promise<Created> {
  const r = await call(`${base}/v1/orders`, { method: 'POST', headers: auth(token), body });
  if (r.status !== 201) throw new Error(`POST /v1/orders answered ${r.status}: ${r.body.slice(0, 300)}`);
  const location = r.headers.location;
  if (!location) throw new Error('POST /v1/orders answered 201 without Location');
  const path = new URL(location, base).pathname;
  const id = path.split('/').pop() ?? '';
  return { id, path, etag: r.headers.etag ?? '' };
}

export interface SeedResult {
  requested: number;
  created: number;
  ids: string[];
  seconds: number;
  via: 'batch' | 'single';
  batchSize: number;
  /** True when the time budget ran out before `requested` orders were created. */
  cutShort: boolean;
  failures: number;
  firstFailure?: string;
}

export interface SeedOptions {
  count: number;
  concurrency?: number;
  batchSize?: number;
  maxSeconds?: number;
  keepIds?: boolean;
  /** Called now and then with the number created so far. */
  progress?: (created: number) => void;
}

interface BatchResults {
  results?: { status?: number; id?: string }[];
}

async function postBatch(base: string, token: string, size: number): Promise<{ status: number; ids: string[]; ok: number; body: string }> {
  const operations = Array.from({ length: size }, () => ({ method: 'POST', body: { currency: 'EUR', items: [] } }));
  const r = await call(`${base}/v1/orders/batch`, {
    method: 'POST',
    headers: auth(token),
    body: JSON.stringify({ atomic: false, operations }),
    timeoutMs: 60_000,
  });
  if (r.status !== 200 && r.status !== 207) return { status: r.status, ids: [], ok: 0, body: r.body };
  const parsed = JSON.parse(r.body) as BatchResults;
  const ids: string[] = [];
  let ok = 0;
  for (const res of parsed.results ?? []) {
    if (res.status !== undefined && res.status >= 200 && res.status < 300) {
      ok++;
      if (res.id) ids.push(res.id);
    }
  }
  return { status: r.status, ids, ok, body: r.body };
}

export async function seedOrders(base: string, token: string, opts: SeedOptions): Promise<SeedResult> {
  const t0 = performance.now();
  const deadline = Date.now() + (opts.maxSeconds ?? 600) * 1000;
  const concurrency = opts.concurrency ?? 32;
  const ids: string[] = [];
  let created = 0;
  let failures = 0;
  let firstFailure: string | undefined;
  let lastReport = 0;
  const note = (n: number, newIds: string[]): void => {
    created += n;
    if (opts.keepIds) ids.push(...newIds);
    if (opts.progress && created - lastReport >= 50_000) {
      lastReport = created;
      opts.progress(created);
    }
  };
  const fail = (why: string): void => {
    failures++;
    firstFailure ??= why;
  };

  // Batch when the server has it: probe with a batch of one.
  let batchSize = Math.max(1, opts.batchSize ?? 100);
  const probe = await postBatch(base, token, 1);
  const via = probe.status === 200 || probe.status === 207 ? 'batch' : 'single';
  if (via === 'batch') {
    note(probe.ok, probe.ids);
    // Past MAX_BATCH the server answers 413; step down until a batch fits.
    while (batchSize > 1 && created < opts.count) {
      const r = await postBatch(base, token, Math.min(batchSize, opts.count - created));
      if (r.status === 413) {
        batchSize = Math.floor(batchSize / 2);
        continue;
      }
      if (r.ok === 0) fail(`batch answered ${r.status}: ${r.body.slice(0, 300)}`);
      note(r.ok, r.ids);
      break;
    }
    const remaining = Math.max(0, opts.count - created);
    const batches = Math.ceil(remaining / batchSize);
    let planned = created;
    await pool(batches, concurrency, async () => {
      if (Date.now() > deadline || failures > 100) return;
      const size = Math.min(batchSize, opts.count - planned);
      if (size <= 0) return;
      planned += size;
      try {
        const r = await postBatch(base, token, size);
        if (r.ok < size) fail(`batch answered ${r.status} with ${r.ok}/${size} created: ${r.body.slice(0, 300)}`);
        note(r.ok, r.ids);
      } catch (err) {
        fail(String(err));
      }
    });
  } else {
    batchSize = 1;
    await pool(opts.count, concurrency, async () => {
      if (Date.now() > deadline || failures > 100) return;
      try {
        const c = await createOrder(base, token);
        note(1, [c.id]);
      } catch (err) {
        fail(String(err));
      }
    });
  }
  return {
    requested: opts.count,
    created,
    ids,
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    via,
    batchSize,
    cutShort: created < opts.count && Date.now() > deadline,
    failures,
    firstFailure,
  };
}

/** Cancels the given orders (POST /v1/orders/{id}/cancel); returns how many answered 200. */
export async function cancelOrders(base: string, token: string, ids: string[], concurrency = 32): Promise<number> {
  let ok = 0;
  await pool(ids.length, concurrency, async (i) => {
    const r = await call(`${base}/v1/orders/${ids[i] ?? ''}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    if (r.status === 200) ok++;
  });
  return ok;
}
