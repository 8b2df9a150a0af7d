// The peer: what a user would otherwise write for the same resource with a mainstream framework.
// Fastify v5, orders in a Map (no durability, no tenancy, no JWT verification: the bearer header
// must only be present), ajv-validated create body, a version-based ETag with 304, and a list
// that filters by status with an early exit once the page is full.
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { orderLinks, type OrderDoc } from '../lib/fixtures.js';

interface Stored {
  doc: OrderDoc;
  version: number;
}

interface CreateBody {
  currency: string;
  customerId?: string;
  note?: string;
  metadata?: Record<string, string>;
  items?: unknown[];
}

const orders = new Map<string, Stored>();
const app = Fastify({ logger: false });

const createSchema = {
  type: 'object',
  required: ['currency'],
  additionalProperties: false,
  properties: {
    currency: { type: 'string', pattern: '^[A-Z]{3}$' },
    customerId: { type: 'string', maxLength: 64 },
    note: { type: 'string', maxLength: 1000 },
    metadata: { type: 'object', additionalProperties: { type: 'string' } },
    items: { type: 'array', maxItems: 100 },
  },
} as const;

function etagOf(s: Stored): string {
  return `"${s.doc.id}.${s.version}"`;
}

function create(body: CreateBody): Stored {
  const id = `ord_${randomUUID().replaceAll('-', '')}`;
  const now = new Date().toISOString();
  const doc: OrderDoc = {
    id,
    status: 'pending',
    currency: body.currency,
    total: 0,
    metadata: body.metadata ?? {},
    createdAt: now,
    updatedAt: now,
    _links: orderLinks(id, 'pending'),
  };
  if (body.customerId !== undefined) doc.customerId = body.customerId;
  if (body.note !== undefined) doc.note = body.note;
  const stored = { doc, version: 1 };
  orders.set(id, stored);
  return stored;
}

app.addHook('onRequest', async (req, reply) => {
  if (!req.headers.authorization?.startsWith('Bearer ')) {
    await reply
      .code(401)
      .header('WWW-Authenticate', 'Bearer')
      .type('application/problem+json')
      .send({ type: '/problems/unauthenticated', title: 'Unauthenticated', status: 401 });
  }
});

app.get<{ Params: { id: string } }>('/v1/orders/:id', async (req, reply) => {
  const stored = orders.get(req.params.id);
  if (!stored) return reply.code(404).send({ type: '/problems/not-found', status: 404 });
  const etag = etagOf(stored);
  reply.header('ETag', etag).header('Cache-Control', 'private, no-cache');
  if (req.headers['if-none-match'] === etag) return reply.code(304).send();
  return stored.doc;
});

app.post<{ Body: CreateBody }>('/v1/orders', { schema: { body: createSchema } }, async (req, reply) => {
  const stored = create(req.body);
  return reply
    .code(201)
    .header('Location', `/v1/orders/${stored.doc.id}`)
    .header('ETag', etagOf(stored))
    .send(stored.doc);
});

app.post<{ Body: { operations: { method: string; body?: CreateBody }[] } }>('/v1/orders/batch', async (req, reply) => {
  const ops = req.body.operations;
  if (!Array.isArray(ops) || ops.length > 1000) return reply.code(413).send({ status: 413 });
  const results = ops.map((op, index) => {
    if (op.method !== 'POST' || !op.body) return { index, status: 422 };
    const s = create(op.body);
    return { index, status: 201, id: s.doc.id, etag: etagOf(s) };
  });
  return reply.code(207).send({ results });
});

app.post<{ Params: { id: string } }>('/v1/orders/:id/cancel', async (req, reply) => {
  const stored = orders.get(req.params.id);
  if (!stored) return reply.code(404).send({ type: '/problems/not-found', status: 404 });
  if (stored.doc.status !== 'pending') return reply.code(409).send({ type: '/problems/invalid-state', status: 409 });
  stored.doc.status = 'cancelled';
  stored.doc.updatedAt = new Date().toISOString();
  stored.doc._links = orderLinks(stored.doc.id, 'cancelled');
  stored.version++;
  return reply.header('ETag', etagOf(stored)).send(stored.doc);
});

app.get<{ Querystring: { status?: string; limit?: string } }>('/v1/orders', async (req, reply) => {
  const limit = req.query.limit === undefined ? 20 : Number(req.query.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) {
    return reply.code(400).send({ type: '/problems/invalid-parameter', status: 400 });
  }
  const status = req.query.status;
  const data: OrderDoc[] = [];
  let hasMore = false;
  for (const { doc } of orders.values()) {
    if (status !== undefined && doc.status !== status) continue;
    if (data.length === limit) {
      hasMore = true;
      break;
    }
    data.push(doc);
  }
  const self = `/v1/orders?${new URLSearchParams(req.query as Record<string, string>).toString()}`;
  const links: Record<string, { href: string }> = { self: { href: self } };
  const last = data[data.length - 1];
  if (hasMore && last) links.next = { href: `${self}&cursor=${encodeURIComponent(last.id)}` };
  // A cheap page ETag (size, last id and its version); a user might hash the body instead.
  return reply
    .header('ETag', `"${data.length}-${last?.id ?? ''}-${last ? orders.get(last.id)?.version : 0}"`)
    .header('Cache-Control', 'private, no-cache')
    .send({ data, hasMore, _links: links });
});

const port = Number(process.env.PORT ?? 0);
const host = process.env.HOST ?? '127.0.0.1';
app
  .listen({ port, host })
  .then(() => {
    const addr = app.server.address();
    const actual = typeof addr === 'object' && addr ? addr.port : port;
    console.log(`listening on http://${host}:${actual}`);
  })
  .catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
