// Users (CONTRACT §6): the uniform interface, an email unique per tenant (409 `conflict`), and
// POST /v1/users/batch-get. Users are personal data: every answer is `private, no-cache` (the
// default for authenticated reads), never shared-cacheable.
//
// Every user of a tenant lives in the tenant's partition (actors/users.ts), so a batch-get is one
// read at one owner, and the email check is one turn.

import { Buffer } from 'node:buffer';
import { ApiError } from '../../common/errors.js';
import { newId, partitionFor } from '../../common/ids.js';
import type { UserInput, UserPatch, UserRecord } from '../../proto/messages.js';
import { USER_SORTS } from '../../actors/users.js';
import { LIST_PARAMS, fieldsParam, parseFields, project, sortParam, variantOf } from '../collection.js';
import { type Ctx, type JsonSchema, type Outcome, type RouteDef, guards, principalOf, route } from '../route.js';
import { homePartition } from '../idempotency.js';
import { cachedRenderingBytes } from '../representation.js';
import { idParam, collectionSchema, iso, linksSchema, problemResponses, READ_ONLY, plainListPage } from './common.js';

const BASE = '/v1/users';
const USER_FIELDS = ['id', 'email', 'name', 'createdAt', 'updatedAt'] as const;
export const MAX_BATCH_GET = 100;
const DATA_OPEN = Buffer.from('{"data":[');
const COMMA = 0x2c;

// No spaces, no control characters, no lone surrogates; one @ with something on both sides.
const EMAIL_PART = '[^\\s@\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]+';
const writable = {
  email: { type: 'string', minLength: 3, maxLength: 254, pattern: `^${EMAIL_PART}@${EMAIL_PART}$`, description: 'Unique per tenant, ignoring case.' },
  name: { type: ['string', 'null'], minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]+$' },
};

const createSchema: JsonSchema = { type: 'object', additionalProperties: false, required: ['email'], properties: writable };
const patchSchema: JsonSchema = { type: 'object', additionalProperties: false, properties: writable };
const batchGetSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['ids'],
  properties: {
    // The configured limit is checked first (413); maxItems bounds the schema itself.
    ids: { type: 'array', minItems: 1, maxItems: 10_000, items: { type: 'string', minLength: 1, maxLength: 64 }, description: `At most ${MAX_BATCH_GET} user ids.` },
  },
};

const userSchema: JsonSchema = {
  type: 'object',
  properties: { id: { type: 'string' }, ...writable, createdAt: { type: 'string', format: 'date-time' }, updatedAt: { type: 'string', format: 'date-time' }, _links: linksSchema },
};

/** One slot per id, in order, from a reply that lists only the users found. */
function slotsOf(ids: string[], found: (UserRecord | null)[]): (UserRecord | null)[] {
  const byId = new Map<string, UserRecord>();
  for (const u of found) if (u) byId.set(u.id, u);
  return ids.map((id) => byId.get(id) ?? null);
}

export function renderUser(u: UserRecord): Record<string, unknown> {
  return { id: u.id, email: u.email, name: u.name, createdAt: iso(u.createdAt), updatedAt: iso(u.updatedAt), _links: { self: { href: `${BASE}/${u.id}` } } };
}

/** Where the caller's tenant keeps its users. */
function usersPartition(ctx: Ctx): number {
  return partitionFor(principalOf(ctx).tenant);
}

function userTarget(ctx: Ctx): { tenant: string; partition: number; id: string } {
  return { tenant: principalOf(ctx).tenant, partition: usersPartition(ctx), id: idParam(ctx, 'user', 'userId', 'user') };
}

function outcome(u: UserRecord, status = 200): Outcome {
  const out: Outcome = { status, render: () => renderUser(u), cacheKey: u.id, record: u, tag: { version: u.version, variant: variantOf(undefined, new Set()) } };
  // The answer's id, not one minted for this request: a replay answers the first attempt's user.
  if (status === 201) out.location = `${BASE}/${u.id}`;
  return out;
}

function inputOf(body: Record<string, unknown>): UserInput {
  return { email: body.email as string, name: (body.name as string | null | undefined) ?? null };
}

export const userRoutes: RouteDef[] = [
  route({
    method: 'GET',
    path: BASE,
    operationId: 'listUsers',
    summary: 'List users.',
    tag: 'users',
    scope: 'users:read',
    query: { sort: sortParam(USER_SORTS, '-createdAt'), fields: fieldsParam(USER_FIELDS), ...LIST_PARAMS },
    responses: { 200: 'A page of users.', ...problemResponses(400) },
    response: collectionSchema(userSchema),
    handle(ctx) {
      return plainListPage(ctx, { kind: 'user.list', base: BASE, sorts: USER_SORTS, fields: USER_FIELDS, stringSorts: ['email'], render: renderUser });
    },
  }),

  route({
    method: 'POST',
    path: BASE,
    operationId: 'createUser',
    summary: 'Create a user. The email must be unused in your tenant (409 otherwise).',
    tag: 'users',
    scope: 'users:write',
    body: { schema: createSchema, readOnly: READ_ONLY },
    responses: { 201: 'The new user; Location names it.', ...problemResponses(409, 415, 422) },
    response: userSchema,
    async handle(ctx) {
      const partition = usersPartition(ctx);
      const id = newId('user', partition);
      const u = await ctx.bus.call({ kind: 'user.create', tenant: principalOf(ctx).tenant, partition, id, input: inputOf(ctx.body as Record<string, unknown>) });
      return outcome(u, 201);
    },
    replay: { partition: usersPartition, outcome: (_ctx, reply) => outcome(reply as UserRecord, 201) },
  }),

  route({
    method: 'POST',
    path: `${BASE}/batch-get`,
    operationId: 'batchGetUsers',
    summary: `Read up to ${MAX_BATCH_GET} users at once: the found ones in the order asked, and the ids that name none.`,
    tag: 'users',
    scope: 'users:read',
    body: {
      schema: batchGetSchema,
      precheck(body) {
        const ids = (body as { ids?: unknown } | null)?.ids;
        if (Array.isArray(ids) && ids.length > MAX_BATCH_GET) {
          throw new ApiError('payload-too-large', `A batch-get reads at most ${MAX_BATCH_GET} users; this one names ${ids.length}.`);
        }
      },
    },
    responses: { 200: '`data`: the users found, in request order; `notFound`: the other ids.', ...problemResponses(413, 415, 422) },
    response: { type: 'object', properties: { data: { type: 'array', items: userSchema }, notFound: { type: 'array', items: { type: 'string' } } } },
    async handle(ctx) {
      const tenant = principalOf(ctx).tenant;
      // A read keeps nothing under an Idempotency-Key and runs again on a retry, but the key is
      // still checked at its home (CONTRACT §7): one kept for another request is 422, one whose
      // request still runs is 409.
      if (ctx.idempotencyKey !== undefined) await ctx.bus.kept(tenant, homePartition(tenant, ctx.idempotencyKey), ctx.bus.idempotency!);
      // Each id once, in the order first asked. One that names no user (whatever its shape) is
      // not found: the owner's lookup misses. Most batches name each id once: their list is used
      // as it came.
      const asked = (ctx.body as { ids: string[] }).ids;
      const distinct = new Set(asked);
      const ids = distinct.size === asked.length ? asked : [...distinct];
      // The owner answers one slot per id, in order: the user or null. An actor node of an
      // earlier release answers only the users it found, in order; read by id, that shape is
      // right too, so gateways can be upgraded before the actor nodes.
      const reply = await ctx.bus.call({ kind: 'user.batchGet', tenant, partition: usersPartition(ctx), ids });
      const found = reply.length === ids.length ? reply : slotsOf(ids, reply);
      const variant = variantOf(undefined, new Set());
      // The answer is the users' cached UTF-8 renderings copied side by side into one buffer,
      // the commas between them written as bytes.
      const renderings: Buffer[] = [];
      let size = DATA_OPEN.length;
      const notFound: string[] = [];
      for (let i = 0; i < ids.length; i++) {
        const u = found[i];
        // The id check keeps an answer from ever naming another id's user in a wrong slot.
        if (!u || u.id !== ids[i]) {
          notFound.push(ids[i]!);
          continue;
        }
        const bytes = cachedRenderingBytes(u.id, u.version, variant, () => renderUser(u), u);
        renderings.push(bytes);
        size += bytes.length;
      }
      const tail = Buffer.from(`],"notFound":${JSON.stringify(notFound)}}`);
      const text = Buffer.allocUnsafe(size + Math.max(0, renderings.length - 1) + tail.length);
      text.set(DATA_OPEN, 0);
      let at = DATA_OPEN.length;
      for (let i = 0; i < renderings.length; i++) {
        if (i > 0) text[at++] = COMMA;
        const bytes = renderings[i]!;
        text.set(bytes, at);
        at += bytes.length;
      }
      text.set(tail, at);
      return { status: 200, text };
    },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{userId}`,
    operationId: 'getUser',
    summary: 'Read a user.',
    tag: 'users',
    scope: 'users:read',
    query: { fields: fieldsParam(USER_FIELDS) },
    responses: { 200: 'The user.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400, 404) },
    response: userSchema,
    async handle(ctx) {
      const fields = parseFields(ctx.query, USER_FIELDS);
      const u = await ctx.bus.call({ kind: 'user.get', ...userTarget(ctx) });
      return { status: 200, render: () => project(renderUser(u), fields, new Set()), cacheKey: u.id, record: u, tag: { version: u.version, variant: variantOf(fields, new Set()) } };
    },
  }),

  route({
    method: 'PUT',
    path: `${BASE}/{userId}`,
    operationId: 'replaceUser',
    summary: 'Replace a user (an omitted name is cleared).',
    tag: 'users',
    scope: 'users:write',
    body: { schema: createSchema, readOnly: READ_ONLY },
    responses: { 200: 'The replaced user.', ...problemResponses(404, 409, 412, 415, 422) },
    response: userSchema,
    async handle(ctx) {
      return outcome(await ctx.bus.call({ kind: 'user.replace', ...userTarget(ctx), ...guards(ctx), input: inputOf(ctx.body as Record<string, unknown>) }));
    },
  }),

  route({
    method: 'PATCH',
    path: `${BASE}/{userId}`,
    operationId: 'updateUser',
    summary: 'Change some members of a user (JSON Merge Patch).',
    tag: 'users',
    scope: 'users:write',
    body: { schema: patchSchema, readOnly: READ_ONLY, mediaTypes: ['application/merge-patch+json', 'application/json'] },
    responses: { 200: 'The updated user.', ...problemResponses(404, 409, 412, 415, 422) },
    response: userSchema,
    async handle(ctx) {
      return outcome(await ctx.bus.call({ kind: 'user.patch', ...userTarget(ctx), ...guards(ctx), patch: ctx.body as UserPatch }));
    },
  }),

  route({
    method: 'DELETE',
    path: `${BASE}/{userId}`,
    operationId: 'deleteUser',
    summary: 'Delete a user; its email is free again.',
    tag: 'users',
    scope: 'users:write',
    responses: { 204: 'Deleted.', ...problemResponses(404, 412) },
    async handle(ctx) {
      await ctx.bus.call({ kind: 'user.delete', ...userTarget(ctx), ...guards(ctx) });
      return { status: 204, cache: 'no-store' };
    },
  }),
];
