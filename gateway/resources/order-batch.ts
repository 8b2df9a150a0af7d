// POST /v1/orders/batch (SPEC §4.2, CONTRACT §7): up to MAX_BATCH creates, patches and deletes of
// orders in one request.
//
//   partial (default): every operation stands alone; 207 with one result per operation.
//   atomic:            all or nothing; 200 with the results, or one problem naming every failed
//                      operation, and then nothing was written, even if a process dies halfway.
//
// The gateway checks and prices every operation, then sends the operations to the owners of
// their orders, one `order.batch` command per partition. An atomic batch must fit one partition
// (ARCHITECTURE property 6: cross-partition atomicity only by co-location), so the owner commits
// it in one transaction; the orders it creates are minted in that partition.

import { ApiError, PROBLEMS, fromWire, toWire, underPointer, type FieldError, type WireError } from '../../common/errors.js';
import { newId, parseId, partitionOf } from '../../common/ids.js';
import type { BatchOp, BatchOutcome, IdemTag, ProductRecord } from '../../proto/messages.js';
import { parseIfMatch } from '../representation.js';
import { type Ctx, type JsonSchema, type RouteDef, partitionForNew, principalOf, route } from '../route.js';
import type { Sent } from '../bus-client.js';
import { homePartition } from '../idempotency.js';
import { validateBody } from '../validate.js';
import { READ_ONLY, problemResponses } from './common.js';
import { createSchema, createSchemaV2, inputOf, patchSchema, plainOrderTag, priceWith, productIdsOf } from './orders.js';
import { fetchProducts } from './products.js';
import type { OrderPatch } from '../../proto/messages.js';

const METHODS = ['POST', 'PATCH', 'DELETE'] as const;
export const MAX_BATCH_PRODUCTS = 1000;
/** Places an atomic batch's retry, refused here now, looks for its kept answer (keptGroup). */
const MAX_KEPT_LOOKS = 8;
type BatchMethod = (typeof METHODS)[number];
const SUCCESS_STATUS: Record<BatchMethod, number> = { POST: 201, PATCH: 200, DELETE: 204 };

const operationSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['method'],
  properties: {
    method: { type: 'string', enum: [...METHODS] },
    id: { type: 'string', minLength: 1, maxLength: 64, description: 'The order to PATCH or DELETE.' },
    ifMatch: { type: 'string', minLength: 1, maxLength: 512, description: 'An ETag of the order, as If-Match would carry it.' },
    body: { type: 'object', description: 'POST: an order to create (as POST /v1/orders). PATCH: a JSON Merge Patch.' },
  },
};

// The envelope only: each operation is checked on its own, so in partial mode a bad one fails
// alone. The count is checked before anything else (413, CONTRACT §7).
const batchSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['operations'],
  properties: {
    atomic: { type: 'boolean', description: 'All or nothing (default false: each operation on its own).' },
    // maxItems is the ceiling MAX_BATCH may be set to; the configured limit is checked first (413).
    operations: { type: 'array', minItems: 1, maxItems: 10_000, items: { type: 'object', maxProperties: 4 }, description: 'At most MAX_BATCH (default 100) operations.' },
  },
};

const resultSchema: JsonSchema = {
  type: 'object',
  properties: {
    results: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          index: { type: 'integer' },
          status: { type: 'integer' },
          id: { type: 'string' },
          etag: { type: 'string' },
          problem: { type: 'object', description: 'A problem (RFC 9457) when the operation failed.' },
        },
      },
    },
  },
};

interface RawOp {
  method: BatchMethod;
  id?: string;
  ifMatch?: string;
  body?: Record<string, unknown>;
}

type Checked = { index: number; method: BatchMethod; op: BatchOp; itemsRaw: Record<string, unknown>[] };

/** The products the creates not priced yet name (a create's id is minted with its price). */
function unpricedProducts(checked: Checked[]): Set<string> {
  return new Set(checked.flatMap((c) => (c.op.op === 'create' && c.op.id === '' ? [...productIdsOf(c.itemsRaw)] : [])));
}

/**
 * `checked` with each create not priced yet given an id minted in `home` and its items priced
 * from `products`; a create that cannot be priced goes to `refuse` and is left out.
 */
function priceCreates(checked: Checked[], products: Map<string, ProductRecord>, home: number, refuse: (index: number, err: unknown) => void): Checked[] {
  const ready: Checked[] = [];
  for (const c of checked) {
    if (c.op.op === 'create' && c.op.id === '') {
      const id = newId('order', home);
      try {
        c.op = { ...c.op, id, items: priceWith(products, id, c.op.input.currency, c.itemsRaw, (i) => `/operations/${c.index}/body/items/${i}`) };
      } catch (err) {
        refuse(c.index, err);
        continue;
      }
    }
    ready.push(c);
  }
  return ready;
}

/** Pointers of a failure inside operation `index`, made absolute in the request document. */
function within(index: number, err: ApiError, prefix: string): ApiError {
  const { errors } = underPointer({ errors: err.extra.errors }, `/operations/${index}${prefix}`);
  return new ApiError(err.slug, err.detail, errors ? { errors } : {});
}

/** `size`: the whole request's bytes, which decides (as for any body) whether every failure is listed or the first. */
function check(index: number, raw: unknown, v2: boolean, size: number): { method: BatchMethod; id: string | undefined; ifMatch: string | undefined; body: Record<string, unknown> | undefined } {
  try {
    validateBody(operationSchema, raw, [], size);
  } catch (err) {
    throw err instanceof ApiError ? within(index, err, '') : err;
  }
  const op = raw as RawOp;
  const fail = (pointer: string, detail: string): never => {
    throw new ApiError('validation-failed', `Operation ${index} is invalid.`, { errors: [{ pointer: `/operations/${index}${pointer}`, detail }] });
  };
  if (op.method === 'POST' && op.id !== undefined) fail('/id', 'is assigned by the server');
  if (op.method !== 'POST' && op.id === undefined) fail('/id', `is required for ${op.method}`);
  if (op.method === 'DELETE' && op.body !== undefined) fail('/body', 'is not allowed for DELETE');
  if (op.method !== 'DELETE' && op.body === undefined) fail('/body', `is required for ${op.method}`);
  if (op.method === 'POST' && op.ifMatch !== undefined) fail('/ifMatch', 'is only for PATCH and DELETE');
  if (op.body !== undefined) {
    try {
      if (op.method === 'POST') validateBody(v2 ? createSchemaV2 : createSchema, op.body, READ_ONLY, size);
      else validateBody(patchSchema, op.body, [...READ_ONLY, 'items'], size);
    } catch (err) {
      throw err instanceof ApiError ? within(index, err, '/body') : err;
    }
  }
  return { method: op.method, id: op.id, ifMatch: op.ifMatch, body: op.body };
}

function problemOf(error: WireError): Record<string, unknown> {
  const p: Record<string, unknown> = { type: `/problems/${error.code}`, title: PROBLEMS[error.code].title, status: PROBLEMS[error.code].status, detail: error.detail };
  if (error.errors) p.errors = error.errors;
  return p;
}

/**
 * The one problem of an atomic batch the gateway refused `failures` of: with what pricing and
 * the owner (order.batchCheck, a read of its committed state) would refuse of the `rest`, so the
 * problem names every operation that fails and has the first one's status. Nothing is written.
 * Should the products or the owner not answer, the problem names what the gateway found.
 */
async function atomicRefusal(ctx: Ctx, tenant: string, home: number, rest: Checked[], failures: { index: number; error: WireError }[]): Promise<ApiError> {
  const all = [...failures];
  try {
    const productIds = unpricedProducts(rest);
    // Too many to price: the creates naming products are left out rather than guessed at.
    const priceable = productIds.size <= MAX_BATCH_PRODUCTS;
    const products = productIds.size && priceable ? await fetchProducts(ctx, productIds) : new Map<string, ProductRecord>();
    const toPrice = priceable ? rest : rest.filter((c) => !(c.op.op === 'create' && c.op.id === '' && c.itemsRaw.length));
    const ops = priceCreates(toPrice, products, home, (index, err) => {
      if (!(err instanceof ApiError)) throw err;
      all.push({ index, error: toWire(err) });
    }).map((c) => c.op);
    if (ops.length) {
      const outcomes = await ctx.bus.call({ kind: 'order.batchCheck', tenant, partition: home, ops });
      for (const o of outcomes) if (!o.ok) all.push({ index: o.index, error: o.error });
    }
  } catch (err) {
    // The products or the owner did not answer (or the owner is of an earlier release): what
    // the gateway found stands alone.
    if (!(err instanceof ApiError)) throw err;
  }
  return atomicFailure(all);
}

/** The failures of an atomic batch as one problem: the first failure's type, every failure listed. */
function atomicFailure(failures: { index: number; error: WireError }[]): ApiError {
  failures.sort((a, b) => a.index - b.index);
  const first = failures[0]!;
  const errors: FieldError[] = [];
  for (const f of failures) {
    const entry = { index: f.index, status: PROBLEMS[f.error.code].status, type: `/problems/${f.error.code}` };
    if (f.error.errors?.length) for (const e of f.error.errors) errors.push({ ...entry, ...e });
    else errors.push({ ...entry, detail: f.error.detail });
  }
  const n = failures.length;
  return new ApiError(first.error.code, `${n} operation${n === 1 ? '' : 's'} failed, the first at index ${first.index}: ${first.error.detail} Nothing was written.`, { errors });
}

export const orderBatchRoute: RouteDef = route({
  method: 'POST',
  path: '/v1/orders/batch',
  operationId: 'batchOrders',
  keyHome: true,
  summary: 'Create, patch and delete orders in one request, each on its own (207) or all or nothing (`atomic`). Safe to retry with Idempotency-Key.',
  tag: 'orders',
  scope: 'orders:write',
  body: {
    schema: batchSchema,
    precheck(body, config) {
      const ops = (body as { operations?: unknown } | null)?.operations;
      if (Array.isArray(ops) && ops.length > config.maxBatch) {
        throw new ApiError('payload-too-large', `A batch holds at most ${config.maxBatch} operations; this one has ${ops.length}. Nothing was written.`);
      }
    },
  },
  responses: {
    200: 'Atomic: every operation succeeded; one result each.',
    207: 'Partial: one result per operation, each with its own status.',
    ...problemResponses(400, 404, 409, 412, 413, 415, 422),
  },
  response: resultSchema,
  async handle(ctx) {
    const body = ctx.body as { atomic?: boolean; operations: unknown[] };
    const atomic = body.atomic === true;
    const tenant = principalOf(ctx).tenant;
    const failures: { index: number; error: WireError }[] = [];
    const fail = (index: number, err: unknown): void => {
      if (!(err instanceof ApiError)) throw err;
      failures.push({ index, error: toWire(err) });
    };

    // ---- check every operation on its own ----
    let checked: Checked[] = [];
    const existing = new Set<number>();
    const size = ctx.req.body?.length ?? 0;
    body.operations.forEach((raw, index) => {
      try {
        const op = check(index, raw, ctx.version === 'v2', size);
        if (op.method === 'POST') {
          const input = inputOf(op.body!);
          const itemsRaw = (op.body!.items as Record<string, unknown>[] | undefined) ?? [];
          checked.push({ index, method: op.method, itemsRaw, op: { index, op: 'create', id: '', input, items: [] } });
          return;
        }
        const id = parseId('order', op.id!);
        if (!id) throw new ApiError('not-found', 'No order with that id.');
        existing.add(partitionOf(id));
        const ifMatch = parseIfMatch(op.ifMatch);
        const bop: BatchOp = op.method === 'PATCH' ? { index, op: 'patch', id, ifMatch, patch: op.body as OrderPatch } : { index, op: 'delete', id, ifMatch };
        checked.push({ index, method: op.method, itemsRaw: [], op: bop });
      } catch (err) {
        fail(index, err);
      }
    });

    // ---- co-location: an atomic batch commits in one partition's transaction ----
    let home: number;
    if (atomic && existing.size > 0) {
      home = partitionOf((checked.find((c) => c.op.op !== 'create')!.op as { id: string }).id);
      const apart = checked.filter((c) => c.op.op !== 'create' && partitionOf(c.op.id) !== home);
      for (const c of apart) {
        fail(c.index, new ApiError('validation-failed', 'An atomic batch commits in one place, and this order is stored apart from the others it names. Orders created by one batch are stored together.'));
      }
      if (apart.length) checked = checked.filter((c) => !apart.includes(c));
    } else {
      home = partitionForNew(ctx);
    }
    // With a key, each group of operations keeps its own result under a key fixed by its
    // partition, so a retry finds every group that ran, however the other operations fare this
    // time. The group in the key's home partition keeps it under the key itself, and is sent even
    // when it holds no operation: the key is then taken, and reusing it for another request is
    // caught (422). The other groups keep theirs under sub-keys.
    const tag = ctx.bus.idempotency;
    const keyHome = tag ? homePartition(tenant, tag.key) : undefined;
    const keyOf = (partition: number): string => (partition === keyHome ? tag!.key : `${tag!.key}\u0001${partition}`);
    const keptAt = (partition: number): Promise<Sent<BatchOutcome[]> | undefined> => keptAnswer(ctx, tenant, partition, { key: keyOf(partition), fingerprint: tag!.fingerprint });
    // An atomic group's kept outcomes, where this attempt places the group or where the orders
    // the request names are (an operation refused now may be the one that placed it before); the
    // group then answers from there. An empty group's (the key's home holds one) answers nothing.
    const keptGroup = async (): Promise<Sent<BatchOutcome[]> | undefined> => {
      const named = body.operations.flatMap((o) => {
        const id = typeof (o as { id?: unknown }).id === 'string' ? parseId('order', (o as { id: string }).id) : undefined;
        return id ? [partitionOf(id)] : [];
      });
      for (const p of [...new Set([home, ...named])].slice(0, MAX_KEPT_LOOKS)) {
        const found = await keptAt(p);
        if (found && found.value.length > 0) {
          home = p;
          return found;
        }
      }
      return undefined;
    };

    // An atomic batch already refused here is one problem naming every operation that fails: the
    // rest are priced and checked by their owner too, and nothing is written. But a retry of one
    // that ran answers as it did, should a check here refuse it now (one tightened since).
    const ranBefore = atomic && failures.length && tag ? await keptGroup() : undefined;
    if (atomic && failures.length && !ranBefore) throw await atomicRefusal(ctx, tenant, home, checked, failures);

    // ---- a retry: the creates' group answers from what it kept ----
    // Its creates were priced when it ran; pricing them again would answer from the catalogue of
    // now (a product deleted since: 422; its owner unreachable: 503), not with the first answer.
    const creates = checked.filter((c) => c.op.op === 'create');
    const kept = ranBefore ?? (tag && creates.length ? await keptAt(home) : undefined);

    // ---- price the items of every create at once, then mint the ids ----
    const productIds = kept ? new Set<string>() : unpricedProducts(creates);
    // Each product is a read; one request may not fan out without bound (ARCHITECTURE 7).
    if (productIds.size > MAX_BATCH_PRODUCTS) {
      throw new ApiError('payload-too-large', `The batch names ${productIds.size} distinct products; at most ${MAX_BATCH_PRODUCTS} may be priced in one batch. Nothing was written.`);
    }
    const products = productIds.size ? await fetchProducts(ctx, productIds) : new Map<string, ProductRecord>();
    // Answered from `kept`, the creates carry no id at all.
    const ready = kept ? checked : priceCreates(checked, products, home, fail);
    if (atomic && failures.length && !ranBefore) throw await atomicRefusal(ctx, tenant, home, ready, failures);

    // ---- one command per partition ----
    const groups = new Map<number, BatchOp[]>();
    for (const c of ready) {
      // Creates are minted in `home` (or, answered from `kept`, carry no id at all).
      const p = c.op.op === 'create' ? home : partitionOf(c.op.id);
      let ops = groups.get(p);
      if (!ops) groups.set(p, (ops = []));
      ops.push(c.op);
    }
    if (keyHome !== undefined && !groups.has(keyHome)) groups.set(keyHome, []);
    // Its kept answer is the whole batch's, whatever is refused here now.
    if (ranBefore && !groups.has(home)) groups.set(home, []);
    // The other groups' sub-keys are kept until the home record expires, not a full TTL after
    // their own commits: a group run on a later retry must not outlive the key and refuse (422)
    // a request the home group, its key expired, has already run.
    let until: number | undefined;
    const idemFor = (partition: number): { idem?: IdemTag } =>
      tag && partition !== keyHome ? { idem: { key: keyOf(partition), fingerprint: tag.fingerprint, ...(until !== undefined && { until }) } } : {};
    // The home group also keeps what the gateway refused, so a retry answers exactly as the first
    // attempt did even if, say, a product it named has appeared since.
    const refused: BatchOutcome[] = failures.map((f) => ({ index: f.index, ok: false, error: f.error }));
    const send = ([partition, ops]: [number, BatchOp[]]): Promise<Sent<BatchOutcome[]>> =>
      kept && partition === home
        ? Promise.resolve(kept)
        : ctx.bus.send({ kind: 'order.batch', tenant, partition, atomic, ops, ...idemFor(partition), ...(partition === keyHome && refused.length ? { refused } : {}) });
    // The home group goes first and alone: it takes the key under the whole request's
    // fingerprint. Nothing else is sent unless it did: a request reusing the key for something
    // else (422), sent while the first is still running (409), or whose home owner cannot be
    // reached (503) writes nothing anywhere.
    const entries = [...groups].sort(([a], [b]) => (a === keyHome ? -1 : b === keyHome ? 1 : 0));
    const settled: PromiseSettledResult<Sent<BatchOutcome[]>>[] = [];
    if (keyHome !== undefined) {
      const home = await send(entries[0]!);
      until = home.keptUntil;
      settled.push({ status: 'fulfilled', value: home });
    }
    settled.push(...(await Promise.allSettled(entries.slice(settled.length).map(send))));
    // A group of the first attempt still running makes the whole request "in flight" too.
    keyRefusal(settled);
    // No group could run at all (every owner unavailable): the request's answer is that 503,
    // with its Retry-After, rather than a 207 of failures.
    if (settled.length > 0 && settled.every((s) => s.status === 'rejected' && s.reason instanceof ApiError && s.reason.status === 503)) {
      throw (settled[0] as PromiseRejectedResult).reason;
    }
    // A replay only if every group that answers for an operation (or keeps the gateway's
    // refusals) answered from an earlier attempt: not when one of them ran only now.
    if (tag) {
      const answering = entries.map(([partition, ops], i) => ({ s: settled[i]!, answers: ops.length > 0 || (partition === keyHome && refused.length > 0) }));
      const parts = answering.some((a) => a.answers) ? answering.filter((a) => a.answers) : answering;
      if (parts.every(({ s }) => s.status === 'fulfilled' && s.value.replayed)) ctx.bus.markReplayed();
    }
    const outcomes: BatchOutcome[] = [];
    entries.forEach(([, ops], i) => {
      const s = settled[i]!;
      if (s.status === 'fulfilled') {
        outcomes.push(...s.value.value);
        return;
      }
      // An atomic batch is one group: its failure is the request's. In partial mode the other
      // groups stand, and this group's operations report why they did not run.
      if (atomic || !(s.reason instanceof ApiError)) throw s.reason;
      const error = toWire(s.reason);
      for (const op of ops) outcomes.push({ index: op.index, ok: false, error });
    });

    // What the owners answered wins over what this attempt decided alone: on a retry it is the
    // first attempt's answer.
    const byIndex = new Map<number, BatchOutcome>(refused.map((o) => [o.index, o]));
    for (const o of outcomes) byIndex.set(o.index, o);
    // An atomic answer is all or nothing: any failure left, the owners' or (on a retry whose kept
    // answer does not cover an operation) this attempt's, makes it the one problem.
    const failed = [...byIndex.values()].filter((o): o is Extract<BatchOutcome, { ok: false }> => !o.ok);
    if (atomic && failed.length) throw atomicFailure(failed);

    // From the request itself: a kept answer may name an operation refused here now.
    const methodOf = (index: number): BatchMethod => (body.operations[index] as { method: BatchMethod }).method;
    const results = [...byIndex.values()]
      .sort((a, b) => a.index - b.index)
      .map((o) => {
        if (!o.ok) return { index: o.index, status: PROBLEMS[o.error.code].status, problem: problemOf(o.error) };
        const r: Record<string, unknown> = { index: o.index, status: SUCCESS_STATUS[methodOf(o.index)], id: o.id };
        // The tag a GET of the order answers, asked as this batch was, ready for the next If-Match.
        if (o.version !== null) r.etag = plainOrderTag(o.version, ctx);
        return r;
      });
    return { status: atomic ? 200 : 207, body: { results }, cache: 'no-store' };
  },
});

/**
 * The answer a batch group kept under `idem` on an earlier attempt, or undefined when it has not
 * run. A key in flight, reused, or whose owner cannot be reached throws, as sending would.
 */
async function keptAnswer(ctx: Ctx, tenant: string, partition: number, idem: IdemTag): Promise<Sent<BatchOutcome[]> | undefined> {
  const kept = await ctx.bus.kept(tenant, partition, idem);
  if (kept === undefined) return undefined;
  if (!kept.ok) throw fromWire(kept.error);
  return { value: kept.value as BatchOutcome[], replayed: true, keptUntil: kept.keptUntil };
}

/** Throws the first answer about the Idempotency-Key itself (reused, or in flight): it is the request's. */
function keyRefusal(settled: PromiseSettledResult<unknown>[]): void {
  for (const s of settled) {
    if (s.status === 'rejected' && s.reason instanceof ApiError && (s.reason.slug === 'idempotency-key-reused' || s.reason.slug === 'idempotency-key-in-flight')) throw s.reason;
  }
}
