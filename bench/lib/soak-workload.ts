// The soak's well-behaved traffic: loops that each own their orders, so every answer can be
// checked against what the loop knows it wrote, and so the state of every order at the end is
// predictable. A loop reads about four times as often as it writes; its writes cover every way
// an order changes (create with and without Idempotency-Key, keyed retries that must replay,
// PATCH with and without If-Match, items, pay, cancel, delete, batches), each recorded once
// acknowledged (2xx, CONTRACT §7: on disk).
//
// What is an error here (CONTRACT §4, §5, §7): a 5xx other than 503 with Retry-After, a 429
// without Retry-After, any status the loop did not expect from what it knows (a 412 for an
// If-Match it knows to be current, a 404 for an order it never deleted), an answer whose body
// disagrees with the loop's own record, and any socket error or timeout.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool } from 'undici';
import type { Group, Tally } from './soak-tally.js';

export interface Reply {
  status: number;
  headers: Record<string, string>;
  text: string;
}

export interface Product {
  id: string;
  price: number;
}

type Status = 'pending' | 'paid' | 'cancelled';

export interface OrderState {
  id: string;
  /** The version of the last acknowledged write (1 after the create). */
  version: number;
  note: string | null;
  status: Status;
  items: number;
  total: number;
  deleted: boolean;
  /** The last acknowledged write, for the report of a mismatch. */
  last: string;
  /** Re-read after an answer that left its state unknown (503, socket error); the record then follows the server. */
  resynced: boolean;
}

/** What the loops share: the variant part of an order's plain ETag, and ids and keys the hostile stream aims at. */
export interface Shared {
  /** `"<version>-<variant>"` (docs/api-guide.md, "Caching"): the variant of the plain JSON representation. */
  plainVariant: string | undefined;
  /** Recent order ids and Idempotency-Keys of this tenant, for cross-tenant probes. */
  recentIds: string[];
  recentKeys: string[];
}

export interface WorkloadOptions {
  pool: Pool;
  token: string;
  products: Product[];
  tally: Tally;
  shared: Shared;
  /** Live orders a loop keeps at most; past it, creates become deletes so the data stays bounded. */
  liveCap: number;
  runId: string;
  timeoutMs: number;
}

interface OrderBody {
  id?: string;
  status?: string;
  note?: string | null;
  total?: number;
  items?: unknown[];
}

/** What an answer about an order must say; `items` only where the answer embeds them. */
interface Expect {
  status: Status;
  note: string | null;
  total: number;
  version: number;
  items?: number;
}

const expectOf = (m: OrderState, changes: Partial<Expect> = {}): Expect => ({ status: m.status, note: m.note, total: m.total, version: m.version, ...changes });

interface BatchBody {
  results?: { index: number; status: number; id?: string; etag?: string }[];
}

const ETAG = /^"(\d+)-([A-Za-z0-9_-]+)"$/;
const RING = 256;

export function tagVersion(tag: string | undefined): number | undefined {
  const m = ETAG.exec(tag ?? '');
  return m ? Number(m[1]) : undefined;
}

function parse<T>(text: string): T | undefined {
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

/** A small seeded generator (mulberry32), so a run's choices can be replayed with BENCH_SOAK_SEED. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function send(
  pool: Pool,
  token: string | undefined,
  req: { method: string; path: string; headers?: Record<string, string>; body?: string | Buffer },
  timeoutMs: number,
): Promise<Reply> {
  const headers: Record<string, string> = { ...req.headers };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const res = await pool.request({
    path: req.path,
    method: req.method,
    headers,
    body: req.body,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const text = await res.body.text();
  const flat: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) flat[k] = Array.isArray(v) ? v.join(', ') : v;
  return { status: res.statusCode, headers: flat, text };
}

// Weights in percent; reads add up to 80 and writes to 20.
const ACTIONS = [
  ['get', 28],
  ['get-304', 14],
  ['get-fields', 10],
  ['get-expand', 10],
  ['list', 10],
  ['get-items', 4],
  ['get-gone', 2],
  ['get-product', 2],
  ['create', 3.5],
  ['create-keyed', 3],
  ['patch-if-match', 3],
  ['patch', 1.5],
  ['patch-stale', 0.5],
  ['add-item', 2.5],
  ['pay', 1.5],
  ['cancel', 1],
  ['delete', 2],
  ['batch', 1.5],
] as const;
type Action = (typeof ACTIONS)[number][0];
const WEIGHT_SUM = ACTIONS.reduce((a, [, w]) => a + w, 0);

const LIST_QUERIES = ['?limit=20', '?status=pending&limit=10', '?sort=-total&limit=5', '?status=paid&limit=20&fields=status,total'];

export class Worker {
  /** Every order this loop ever created and had acknowledged, deleted ones included. */
  readonly orders: OrderState[] = [];
  private live: OrderState[] = [];
  private seq = 0;
  private readonly rand: () => number;
  private readonly auth: Record<string, string>;
  resyncs = 0;
  shed = 0;

  constructor(
    readonly index: number,
    private readonly o: WorkloadOptions,
    seed: number,
  ) {
    this.rand = prng(seed);
    this.auth = { authorization: `Bearer ${o.token}` };
  }

  /** Takes over orders created for this loop before the run (seeding). */
  adopt(orders: OrderState[]): void {
    this.orders.push(...orders);
    this.live.push(...orders);
  }

  async run(keepGoing: () => boolean): Promise<void> {
    while (keepGoing()) {
      try {
        await this.step();
      } catch (err) {
        // A bug of the bench, not of the service; still counted, so it cannot pass unseen.
        this.fail('loop', 'read', 'bench exception', err instanceof Error ? (err.stack ?? err.message) : String(err));
      }
    }
  }

  // ---- plumbing ----

  private pick<T>(xs: T[]): T | undefined {
    return xs.length === 0 ? undefined : xs[Math.floor(this.rand() * xs.length)];
  }

  private liveWhere(f: (m: OrderState) => boolean): OrderState[] {
    return this.live.filter(f);
  }

  private tag(m: OrderState, version = m.version): string {
    return `"${version}-${this.o.shared.plainVariant ?? 'unknown'}"`;
  }

  private remember(ring: string[], value: string): void {
    if (ring.length < RING) ring.push(value);
    else ring[Math.floor(this.rand() * RING)] = value;
  }

  private fail(kind: string, group: Group, reason: string, detail: string): void {
    this.o.tally.error(kind, group, reason, `loop ${this.index}: ${detail}`);
  }

  /** One request, timed and counted; undefined after a socket error or timeout (an error). */
  private async call(kind: string, group: Group, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Reply | undefined> {
    const t0 = performance.now();
    try {
      const r = await send(this.o.pool, undefined, { method, path, headers: { ...this.auth, ...headers }, body }, this.o.timeoutMs);
      this.o.tally.answer(kind, group, String(r.status), performance.now() - t0);
      return r;
    } catch (err) {
      this.o.tally.answer(kind, group, 'socket', performance.now() - t0);
      this.fail(kind, group, 'socket error', `${method} ${path}: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
  }

  /**
   * `ok` when the status is one the loop expects; `shed` for 503 or 429 with Retry-After (the
   * service asking for room: allowed, and honoured up to a second); anything else is an error.
   */
  private async judge(kind: string, group: Group, r: Reply | undefined, expected: number[], what: string): Promise<'ok' | 'shed' | 'bad'> {
    if (!r) return 'bad';
    if (expected.includes(r.status)) return 'ok';
    if (r.status === 503 || r.status === 429) {
      const header = r.headers['retry-after'];
      if (header !== undefined) {
        // Seconds or an HTTP-date (RFC 9110 §10.2.3).
        const ms = /^\d+$/.test(header) ? Number(header) * 1000 : Date.parse(header) - Date.now();
        this.shed++;
        await sleep(Math.min(1000, Math.max(0, Number.isFinite(ms) ? ms : 1000)));
        return 'shed';
      }
      this.fail(kind, group, `${r.status} without Retry-After`, `${what}: ${r.text.slice(0, 200)}`);
      return 'bad';
    }
    this.fail(kind, group, `unexpected ${r.status}`, `${what} expected ${expected.join('/')}: ${r.text.slice(0, 240)}`);
    return 'bad';
  }

  /** The variant of the plain representation, learned from the first order answer that carries it. */
  private learnVariant(etag: string | undefined): void {
    if (this.o.shared.plainVariant !== undefined) return;
    const m = ETAG.exec(etag ?? '');
    if (m) this.o.shared.plainVariant = m[2];
  }

  /** Checks an order answer against what the loop expects it to say. */
  private check(kind: string, group: Group, r: Reply, expect: Expect, id: string): boolean {
    const body = parse<OrderBody>(r.text);
    const problems: string[] = [];
    if (!body) problems.push('body is not JSON');
    else {
      if (body.id !== id) problems.push(`id ${String(body.id)} != ${id}`);
      if (body.status !== expect.status) problems.push(`status ${String(body.status)} != ${expect.status}`);
      if (body.note !== expect.note) problems.push(`note ${JSON.stringify(body.note)} != ${JSON.stringify(expect.note)}`);
      if (body.total !== expect.total) problems.push(`total ${String(body.total)} != ${expect.total}`);
      if (expect.items !== undefined && body.items?.length !== expect.items) problems.push(`items ${String(body.items?.length)} != ${expect.items}`);
    }
    const v = tagVersion(r.headers.etag);
    if (v !== expect.version) problems.push(`ETag ${String(r.headers.etag)} is not version ${expect.version}`);
    if (problems.length === 0) return true;
    this.fail(kind, group, 'answer disagrees with the loop', `${id}: ${problems.join('; ')}`);
    return false;
  }

  /**
   * After an answer that leaves an order's state unknown (503, socket error, a wrong answer), read
   * it and follow the server from there: a write the client was not told about may have happened.
   */
  private async resync(m: OrderState): Promise<void> {
    this.resyncs++;
    m.resynced = true;
    const r = await this.call('resync', 'read', 'GET', `/v1/orders/${m.id}?expand=items`);
    if (r?.status === 404) {
      this.markDeleted(m, 'resync: gone');
      return;
    }
    const body = r?.status === 200 ? parse<OrderBody>(r.text) : undefined;
    const v = tagVersion(r?.headers.etag);
    if (!body || v === undefined) return;
    m.version = v;
    m.note = body.note ?? null;
    m.status = (body.status as Status | undefined) ?? m.status;
    m.total = body.total ?? m.total;
    m.items = body.items?.length ?? m.items;
    m.last = 'resync';
  }

  private markDeleted(m: OrderState, last: string): void {
    m.deleted = true;
    m.last = last;
    this.live = this.live.filter((x) => x !== m);
  }

  private newOrder(id: string, note: string, items: number, total: number, last: string): OrderState {
    const m: OrderState = { id, version: 1, note, status: 'pending', items, total, deleted: false, last, resynced: false };
    this.orders.push(m);
    this.live.push(m);
    this.remember(this.o.shared.recentIds, id);
    return m;
  }

  private orderBody(): { body: Record<string, unknown>; note: string; items: number; total: number } {
    const note = `n${this.index}-${++this.seq}`;
    const body: Record<string, unknown> = { currency: 'EUR', note };
    let items = 0;
    let total = 0;
    if (this.rand() < 0.4) {
      const list = [];
      const n = 1 + Math.floor(this.rand() * 3);
      for (let i = 0; i < n; i++) {
        const p = this.pick(this.o.products)!;
        const quantity = 1 + Math.floor(this.rand() * 3);
        list.push({ productId: p.id, quantity });
        total += p.price * quantity;
      }
      body.items = list;
      items = n;
    }
    return { body, note, items, total };
  }

  // ---- the actions ----

  private choose(): Action {
    let x = this.rand() * WEIGHT_SUM;
    for (const [name, w] of ACTIONS) {
      x -= w;
      if (x < 0) return name;
    }
    return 'get';
  }

  async step(): Promise<void> {
    let action = this.choose();
    const growing = action === 'create' || action === 'create-keyed' || action === 'batch';
    // At the cap a create becomes a delete: a soak measures a steady state, not a growing one.
    if (growing && this.live.length >= this.o.liveCap) action = 'delete';
    if (this.live.length === 0 && !growing) action = 'create';
    switch (action) {
      case 'get':
        return this.get();
      case 'get-304':
        return this.get304();
      case 'get-fields':
        return this.getFields();
      case 'get-expand':
        return this.getExpand();
      case 'list':
        return this.list();
      case 'get-items':
        return this.getItems();
      case 'get-gone':
        return this.getGone();
      case 'get-product':
        return this.getProduct();
      case 'create':
        return this.create();
      case 'create-keyed':
        return this.createKeyed();
      case 'patch-if-match':
        return this.patch('patch-if-match', true);
      case 'patch':
        return this.patch('patch', false);
      case 'patch-stale':
        return this.patchStale();
      case 'add-item':
        return this.addItem();
      case 'pay':
        return this.pay();
      case 'cancel':
        return this.cancel();
      case 'delete':
        return this.delete();
      case 'batch':
        return this.batch();
    }
  }

  private async get(): Promise<void> {
    const m = this.pick(this.live)!;
    const r = await this.call('get', 'read', 'GET', `/v1/orders/${m.id}`);
    if ((await this.judge('get', 'read', r, [200], `GET ${m.id}`)) !== 'ok' || !r) return;
    this.learnVariant(r.headers.etag);
    this.check('get', 'read', r, expectOf(m), m.id);
  }

  private async get304(): Promise<void> {
    const m = this.pick(this.live)!;
    const r = await this.call('get-304', 'read', 'GET', `/v1/orders/${m.id}`, { 'if-none-match': this.tag(m) });
    if ((await this.judge('get-304', 'read', r, [304], `GET ${m.id} If-None-Match ${this.tag(m)} (last write: ${m.last})`)) !== 'ok' || !r) return;
    if (r.text !== '') this.fail('get-304', 'read', '304 with a body', m.id);
  }

  private async getFields(): Promise<void> {
    const m = this.pick(this.live)!;
    const r = await this.call('get-fields', 'read', 'GET', `/v1/orders/${m.id}?fields=status,note`);
    if ((await this.judge('get-fields', 'read', r, [200], `GET ${m.id}?fields`)) !== 'ok' || !r) return;
    const body = parse<OrderBody>(r.text);
    if (!body || body.status !== m.status || body.note !== m.note || 'total' in body || body.id !== m.id) {
      this.fail('get-fields', 'read', 'answer disagrees with the loop', `${m.id}: ${r.text.slice(0, 200)} (expected status ${m.status}, note ${m.note})`);
    }
  }

  private async getExpand(): Promise<void> {
    const m = this.pick(this.live)!;
    const r = await this.call('get-expand', 'read', 'GET', `/v1/orders/${m.id}?expand=items`);
    if ((await this.judge('get-expand', 'read', r, [200], `GET ${m.id}?expand=items`)) !== 'ok' || !r) return;
    this.check('get-expand', 'read', r, expectOf(m, { items: m.items }), m.id);
  }

  private async getItems(): Promise<void> {
    const m = this.pick(this.live)!;
    const r = await this.call('get-items', 'read', 'GET', `/v1/orders/${m.id}/items?limit=100`);
    if ((await this.judge('get-items', 'read', r, [200], `GET ${m.id}/items`)) !== 'ok' || !r) return;
    const n = parse<{ data?: unknown[] }>(r.text)?.data?.length;
    if (n !== Math.min(100, m.items)) this.fail('get-items', 'read', 'answer disagrees with the loop', `${m.id}/items: ${String(n)} items, expected ${m.items}`);
  }

  private async getGone(): Promise<void> {
    const m = this.pick(this.orders.filter((x) => x.deleted && !x.resynced));
    if (!m) return this.get();
    const r = await this.call('get-gone', 'read', 'GET', `/v1/orders/${m.id}`);
    await this.judge('get-gone', 'read', r, [404], `GET deleted ${m.id}`);
  }

  private async getProduct(): Promise<void> {
    const p = this.pick(this.o.products)!;
    const r = await this.call('get-product', 'read', 'GET', `/v1/products/${p.id}`);
    await this.judge('get-product', 'read', r, [200], `GET ${p.id}`);
  }

  private async list(): Promise<void> {
    const q = this.pick(LIST_QUERIES)!;
    const r = await this.call('list', 'read', 'GET', `/v1/orders${q}`);
    if ((await this.judge('list', 'read', r, [200], `GET /v1/orders${q}`)) !== 'ok' || !r) return;
    const page = parse<{ data?: unknown[]; hasMore?: boolean; _links?: { next?: { href?: string } } }>(r.text);
    if (!Array.isArray(page?.data) || typeof page.hasMore !== 'boolean') {
      this.fail('list', 'read', 'malformed page', r.text.slice(0, 200));
      return;
    }
    const next = page._links?.next?.href;
    if (next && this.rand() < 0.3) {
      const r2 = await this.call('list-next', 'read', 'GET', next);
      await this.judge('list-next', 'read', r2, [200], `GET ${next}`);
    }
  }

  private async create(): Promise<void> {
    const { body, note, items, total } = this.orderBody();
    const r = await this.call('create', 'write', 'POST', '/v1/orders', { 'content-type': 'application/json' }, JSON.stringify(body));
    // An unacknowledged create without a key is simply not tracked: nothing was promised.
    if ((await this.judge('create', 'write', r, [201], 'POST /v1/orders')) !== 'ok' || !r) return;
    this.acceptCreate('create', r, note, items, total);
  }

  private acceptCreate(kind: string, r: Reply, note: string, items: number, total: number): OrderState | undefined {
    const body = parse<OrderBody>(r.text);
    const id = body?.id;
    if (!id) {
      this.fail(kind, 'write', 'answer disagrees with the loop', `201 without an id: ${r.text.slice(0, 200)}`);
      return undefined;
    }
    this.learnVariant(r.headers.etag);
    if (r.headers.location !== `/v1/orders/${id}`) this.fail(kind, 'write', 'answer disagrees with the loop', `Location ${String(r.headers.location)} for ${id}`);
    const m = this.newOrder(id, note, items, total, kind);
    this.check(kind, 'write', r, { status: 'pending', note, total, version: 1 }, id);
    return m;
  }

  /**
   * A create with an Idempotency-Key. Sometimes retried at once with the same bytes (must replay:
   * same status, id, Location, body, plus `Idempotent-Replayed: true`), sometimes sent twice at
   * the same moment (one runs; the other replays it or is told the key is in flight).
   */
  private async createKeyed(): Promise<void> {
    const { body, note, items, total } = this.orderBody();
    const key = `soak-${this.o.runId}-${this.index}-${this.seq}`;
    this.remember(this.o.shared.recentKeys, key);
    const text = JSON.stringify(body);
    const headers = { 'content-type': 'application/json', 'idempotency-key': key };
    const post = (kind: string): Promise<Reply | undefined> => this.call(kind, 'write', 'POST', '/v1/orders', headers, text);
    const dice = this.rand();
    if (dice < 0.1) return this.createRace(post, note, items, total, key);

    // A keyed create is retried until it is acknowledged (a client's duty after 503 or a lost answer).
    let first: Reply | undefined;
    for (let attempt = 0; attempt < 5 && !first; attempt++) {
      const kind = attempt === 0 ? 'create-keyed' : 'create-keyed-retry';
      const r = await post(kind);
      const verdict = await this.judge(kind, 'write', r, [201], `POST /v1/orders key ${key}`);
      if (verdict === 'ok') first = r;
      else if (verdict === 'bad' && r) return;
    }
    if (!first) return;
    const m = this.acceptCreate('create-keyed', first, note, items, total);
    if (!m || dice > 0.5) return;
    const again = await post('create-replay');
    if ((await this.judge('create-replay', 'write', again, [201], `replay of key ${key}`)) !== 'ok' || !again) return;
    const problems: string[] = [];
    if (again.headers['idempotent-replayed'] !== 'true') problems.push('no Idempotent-Replayed: true');
    if (again.headers.location !== first.headers.location) problems.push(`Location ${String(again.headers.location)} != ${String(first.headers.location)}`);
    if (again.headers.etag !== first.headers.etag) problems.push(`ETag ${String(again.headers.etag)} != ${String(first.headers.etag)}`);
    if (again.text !== first.text) problems.push('body differs');
    if (problems.length) this.fail('create-replay', 'write', 'replay differs', `${key}: ${problems.join('; ')}`);
  }

  private async createRace(post: (kind: string) => Promise<Reply | undefined>, note: string, items: number, total: number, key: string): Promise<void> {
    const kind = 'create-keyed-race';
    let answers: (Reply | undefined)[] = await Promise.all([post(kind), post(kind)]);
    const done: Reply[] = [];
    for (let round = 0; round < 100 && answers.length > 0; round++) {
      const pending: Promise<Reply | undefined>[] = [];
      for (const r of answers) {
        const verdict = await this.judge(kind, 'write', r, [201, 409], `racing POST key ${key}`);
        if (!r || verdict === 'bad') continue;
        if (r.status === 201) done.push(r);
        else if (r.status === 409 && !(r.text.includes('idempotency-key-in-flight') && r.headers['retry-after'])) {
          this.fail(kind, 'write', 'unexpected 409', `key ${key}: ${r.text.slice(0, 200)}`);
        } else {
          // In flight, or shed: ask again shortly. Retry-After says 1 s; a client may ask sooner and
          // gets the same answer or the replay, and a second's pause here would idle the loop.
          await sleep(20);
          pending.push(post(kind));
        }
      }
      answers = await Promise.all(pending);
    }
    if (done.length === 0) return;
    const ids = new Set(done.map((r) => parse<OrderBody>(r.text)?.id));
    const originals = done.filter((r) => r.headers['idempotent-replayed'] !== 'true');
    if (ids.size !== 1 || originals.length > 1) {
      this.fail(kind, 'write', 'two effects for one key', `key ${key}: ids ${[...ids].join(', ')}, ${originals.length} answers not marked replayed`);
    }
    this.acceptCreate(kind, originals[0] ?? done[0]!, note, items, total);
  }

  private async patch(kind: 'patch' | 'patch-if-match', guarded: boolean): Promise<void> {
    const m = this.pick(this.live)!;
    const note = `p${this.index}-${++this.seq}`;
    const headers: Record<string, string> = { 'content-type': this.rand() < 0.5 ? 'application/merge-patch+json' : 'application/json' };
    if (guarded) headers['if-match'] = this.tag(m);
    const r = await this.call(kind, 'write', 'PATCH', `/v1/orders/${m.id}`, headers, JSON.stringify({ note }));
    const verdict = await this.judge(kind, 'write', r, [200], `PATCH ${m.id}${guarded ? ` If-Match ${this.tag(m)}` : ''} (last write: ${m.last})`);
    if (verdict !== 'ok' || !r) return this.resync(m);
    this.check(kind, 'write', r, expectOf(m, { note, version: m.version + 1 }), m.id);
    Object.assign(m, { note, version: m.version + 1, last: kind });
  }

  /** A PATCH guarded by the previous version's tag: must be 412, and change nothing. */
  private async patchStale(): Promise<void> {
    const m = this.pick(this.liveWhere((x) => x.version > 1));
    if (!m) return this.patch('patch-if-match', true);
    const r = await this.call('patch-stale', 'write', 'PATCH', `/v1/orders/${m.id}`, { 'content-type': 'application/merge-patch+json', 'if-match': this.tag(m, m.version - 1) }, JSON.stringify({ note: 'stale' }));
    if ((await this.judge('patch-stale', 'write', r, [412], `PATCH ${m.id} with a stale If-Match`)) !== 'ok') await this.resync(m);
  }

  private async addItem(): Promise<void> {
    const refused = this.rand() < 0.1 ? this.pick(this.liveWhere((x) => x.status !== 'pending')) : undefined;
    const m = refused ?? this.pick(this.liveWhere((x) => x.status === 'pending' && x.items < 100));
    if (!m) return this.create();
    const p = this.pick(this.o.products)!;
    const quantity = 1 + Math.floor(this.rand() * 3);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.rand() < 0.4) headers['if-match'] = this.tag(m);
    const kind = refused ? 'add-item-refused' : 'add-item';
    const r = await this.call(kind, 'write', 'POST', `/v1/orders/${m.id}/items`, headers, JSON.stringify({ productId: p.id, quantity }));
    const verdict = await this.judge(kind, 'write', r, [refused ? 409 : 201], `POST ${m.id}/items (${m.status})`);
    if (verdict !== 'ok' || !r) return this.resync(m);
    if (refused) return;
    const item = parse<{ productId?: string; quantity?: number; unitPrice?: number }>(r.text);
    const v = tagVersion(r.headers.etag);
    if (item?.productId !== p.id || item.quantity !== quantity || item.unitPrice !== p.price || v !== m.version + 1) {
      this.fail(kind, 'write', 'answer disagrees with the loop', `${m.id}/items: ${r.text.slice(0, 200)} ETag ${String(r.headers.etag)}, expected version ${m.version + 1}`);
    }
    Object.assign(m, { items: m.items + 1, total: m.total + p.price * quantity, version: m.version + 1, last: kind });
  }

  private async action(kind: 'pay' | 'cancel', m: OrderState, to: Status): Promise<void> {
    const headers: Record<string, string> = this.rand() < 0.5 ? { 'if-match': this.tag(m) } : {};
    const r = await this.call(kind, 'write', 'POST', `/v1/orders/${m.id}/${kind}`, headers);
    if ((await this.judge(kind, 'write', r, [200], `POST ${m.id}/${kind} (${m.status})`)) !== 'ok' || !r) return this.resync(m);
    this.check(kind, 'write', r, expectOf(m, { status: to, version: m.version + 1 }), m.id);
    Object.assign(m, { status: to, version: m.version + 1, last: kind });
  }

  private async pay(): Promise<void> {
    const paid = this.liveWhere((x) => x.status === 'paid').length;
    // Paid orders cannot be deleted; keeping them under half the cap keeps the data bounded.
    const m = paid < this.o.liveCap / 2 ? this.pick(this.liveWhere((x) => x.status === 'pending' && x.total > 0)) : undefined;
    if (!m) return this.addItem();
    return this.action('pay', m, 'paid');
  }

  private async cancel(): Promise<void> {
    const m = this.pick(this.liveWhere((x) => x.status === 'pending'));
    if (!m) return this.create();
    return this.action('cancel', m, 'cancelled');
  }

  private async delete(): Promise<void> {
    const paid = this.rand() < 0.1 ? this.pick(this.liveWhere((x) => x.status === 'paid')) : undefined;
    if (paid) {
      const r = await this.call('delete-paid', 'write', 'DELETE', `/v1/orders/${paid.id}`);
      if ((await this.judge('delete-paid', 'write', r, [409], `DELETE paid ${paid.id}`)) !== 'ok') await this.resync(paid);
      return;
    }
    const m = this.pick(this.liveWhere((x) => x.status !== 'paid'));
    if (!m) return this.patch('patch', false);
    const headers: Record<string, string> = this.rand() < 0.5 ? { 'if-match': this.tag(m) } : {};
    const r = await this.call('delete', 'write', 'DELETE', `/v1/orders/${m.id}`, headers);
    if ((await this.judge('delete', 'write', r, [204], `DELETE ${m.id} (${m.status})`)) !== 'ok') return this.resync(m);
    this.markDeleted(m, 'delete');
  }

  /**
   * Partial batches (a create, a guarded patch of one order, a guarded delete of another: 207
   * with 201, 200, 204) and atomic batches of creates (200); some carry an Idempotency-Key and
   * are sent again, which must replay the same results.
   */
  private async batch(): Promise<void> {
    const atomic = this.rand() < 0.3;
    const ops: Record<string, unknown>[] = [];
    // Each operation: the status it must answer, the version its ETag must name, and what it set.
    const plan: { expect: number; version?: number; apply: (res: { id?: string }) => void; target?: OrderState }[] = [];
    const creates = atomic ? 2 + Math.floor(this.rand() * 2) : 1;
    for (let i = 0; i < creates; i++) {
      const { body, note, items, total } = this.orderBody();
      ops.push({ method: 'POST', body });
      plan.push({ expect: 201, version: 1, apply: (res) => res.id && this.newOrder(res.id, note, items, total, 'batch create') });
    }
    if (!atomic) {
      const p = this.pick(this.live);
      if (p) {
        const note = `b${this.index}-${++this.seq}`;
        ops.push({ method: 'PATCH', id: p.id, ifMatch: this.tag(p), body: { note } });
        plan.push({ expect: 200, version: p.version + 1, target: p, apply: () => Object.assign(p, { note, version: p.version + 1, last: 'batch patch' }) });
      }
      const d = this.pick(this.liveWhere((x) => x !== p && x.status !== 'paid'));
      if (d) {
        ops.push({ method: 'DELETE', id: d.id, ifMatch: this.tag(d) });
        plan.push({ expect: 204, target: d, apply: () => this.markDeleted(d, 'batch delete') });
      }
    }
    const keyed = this.rand() < 0.3;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (keyed) headers['idempotency-key'] = `soak-${this.o.runId}-${this.index}-b${++this.seq}`;
    const text = JSON.stringify({ atomic, operations: ops });
    const kind = atomic ? 'batch-atomic' : 'batch';
    const r = await this.call(kind, 'write', 'POST', '/v1/orders/batch', headers, text);
    const verdict = await this.judge(kind, 'write', r, [atomic ? 200 : 207], `POST /v1/orders/batch ${text.slice(0, 200)}`);
    if (verdict !== 'ok' || !r) {
      for (const step of plan) if (step.target) await this.resync(step.target);
      return;
    }
    const results = parse<BatchBody>(r.text)?.results ?? [];
    for (const [i, step] of plan.entries()) {
      const res = results[i];
      if (res?.status !== step.expect || (step.version !== undefined && tagVersion(res.etag) !== step.version)) {
        this.fail(kind, 'write', 'answer disagrees with the loop', `operation ${i}: ${JSON.stringify(res)} expected ${step.expect} (version ${String(step.version)})`);
        if (step.target) await this.resync(step.target);
        continue;
      }
      this.learnVariant(res.etag);
      step.apply(res);
    }
    if (keyed && this.rand() < 0.5) {
      const again = await this.call('batch-replay', 'write', 'POST', '/v1/orders/batch', headers, text);
      if ((await this.judge('batch-replay', 'write', again, [r.status], `replay of batch ${headers['idempotency-key']}`)) !== 'ok' || !again) return;
      if (again.headers['idempotent-replayed'] !== 'true' || again.text !== r.text) {
        this.fail('batch-replay', 'write', 'replay differs', `${headers['idempotency-key']}: replayed=${String(again.headers['idempotent-replayed'])}, same body ${again.text === r.text}`);
      }
    }
  }
}

// ---- after the run ----

export interface LostWrite {
  id: string;
  expected: string;
  found: string;
}

export interface Verification {
  /** Orders checked one by one (every acknowledged create, deleted ones included). */
  checked: number;
  lost: number;
  /** Of the checked, those whose record follows a re-read rather than only acknowledged writes. */
  resynced: number;
  samples: LostWrite[];
  /** Live orders missing from the status-filtered list they belong in (a lost index entry). */
  unlisted: number;
  /** Orders listed under a status they do not have, or listed though deleted (a stale index entry). */
  misfiled: number;
  /** Listed orders no loop knows: creates whose answer was lost (allowed; counted). */
  unknownListed: number;
  /** Answers to the checks other than 200/404 (errors of the check itself). */
  checkErrors: number;
}

function describe(m: { status: string; note: string | null; items: number; total: number; version: number }): string {
  return `${m.status}, note ${JSON.stringify(m.note)}, ${m.items} items, total ${m.total}, v${m.version}`;
}

/**
 * Every acknowledged create still exists unless an acknowledged delete removed it, and holds
 * what the last acknowledged write set (note, status, items, total, and its version: one more
 * write than acknowledged shows as a version too high). Then each status list must hold every
 * live order of that status.
 */
export async function verify(pool: Pool, token: string, workers: Worker[], timeoutMs: number, concurrency = 32): Promise<Verification> {
  const all = workers.flatMap((w) => w.orders);
  const out: Verification = { checked: 0, lost: 0, resynced: 0, samples: [], unlisted: 0, misfiled: 0, unknownListed: 0, checkErrors: 0 };
  const lose = (id: string, expected: string, found: string): void => {
    out.lost++;
    if (out.samples.length < 20) out.samples.push({ id, expected, found });
  };
  let next = 0;
  const one = async (): Promise<void> => {
    while (next < all.length) {
      const m = all[next++]!;
      out.checked++;
      if (m.resynced) out.resynced++;
      let r: Reply;
      try {
        r = await send(pool, token, { method: 'GET', path: `/v1/orders/${m.id}?expand=items` }, timeoutMs);
      } catch (err) {
        out.checkErrors++;
        lose(m.id, m.deleted ? 'deleted' : describe(m), `no answer: ${String(err)}`);
        continue;
      }
      if (r.status === 404) {
        if (!m.deleted) lose(m.id, `${describe(m)} (last: ${m.last})`, '404');
        continue;
      }
      if (r.status !== 200) {
        out.checkErrors++;
        lose(m.id, m.deleted ? 'deleted' : describe(m), `${r.status} ${r.text.slice(0, 120)}`);
        continue;
      }
      const body = parse<OrderBody>(r.text);
      const found = { status: String(body?.status), note: body?.note ?? null, items: body?.items?.length ?? -1, total: body?.total ?? -1, version: tagVersion(r.headers.etag) ?? -1 };
      if (m.deleted) lose(m.id, `deleted (last: ${m.last})`, describe(found));
      else if (describe(found) !== describe(m)) lose(m.id, `${describe(m)} (last: ${m.last})`, describe(found));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, one));

  // The status indexes: every live order is listed under its status.
  const known = new Map(all.map((m) => [m.id, m]));
  for (const status of ['pending', 'paid', 'cancelled'] as const) {
    const listed = new Set<string>();
    let path: string | undefined = `/v1/orders?status=${status}&limit=100`;
    while (path) {
      const r: Reply = await send(pool, token, { method: 'GET', path }, timeoutMs);
      if (r.status !== 200) {
        out.checkErrors++;
        break;
      }
      const page = parse<{ data?: { id: string }[]; _links?: { next?: { href?: string } } }>(r.text);
      for (const o of page?.data ?? []) listed.add(o.id);
      path = page?._links?.next?.href;
    }
    for (const m of all) if (!m.deleted && m.status === status && !listed.has(m.id)) out.unlisted++;
    for (const id of listed) {
      const m = known.get(id);
      if (!m) out.unknownListed++;
      else if (m.deleted || m.status !== status) out.misfiled++;
    }
  }
  return out;
}
