// Teams and their members (CONTRACT §6). A membership is its own resource because it carries
// data (role, joinedAt): /v1/teams/{teamId}/members/{userId}. Teams live with the tenant's users
// (actors/teams.ts), so a membership checks its user and a user's delete removes its
// memberships in one turn.

import { ApiError } from '../../common/errors.js';
import { newId, parseId, partitionFor } from '../../common/ids.js';
import type { MembershipRecord, TeamRecord, TeamRole } from '../../proto/messages.js';
import { membershipId, TEAM_SORTS } from '../../actors/teams.js';
import { LIST_PARAMS, fieldsParam, parseFields, project, sortParam, variantOf } from '../collection.js';
import { type Ctx, type JsonSchema, type Outcome, type RouteDef, guards, principalOf, route } from '../route.js';
import { idParam, collectionSchema, iso, linksSchema, plainListPage, problemResponses, READ_ONLY } from './common.js';

const BASE = '/v1/teams';
const TEAM_FIELDS = ['id', 'name', 'createdAt', 'updatedAt'] as const;
const MEMBER_FIELDS = ['userId', 'teamId', 'role', 'joinedAt', 'updatedAt'] as const;
const ROLES: TeamRole[] = ['owner', 'admin', 'member'];

const nameSchema: JsonSchema = { type: 'string', minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]+$' };
const roleSchema: JsonSchema = { type: 'string', enum: ROLES };
const createTeamSchema: JsonSchema = { type: 'object', additionalProperties: false, required: ['name'], properties: { name: nameSchema } };
const addMemberSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['userId', 'role'],
  properties: { userId: { type: 'string', minLength: 1, maxLength: 64 }, role: roleSchema },
};
const patchMemberSchema: JsonSchema = { type: 'object', additionalProperties: false, required: ['role'], properties: { role: roleSchema } };

const teamSchema: JsonSchema = {
  type: 'object',
  properties: { id: { type: 'string' }, name: nameSchema, createdAt: { type: 'string', format: 'date-time' }, updatedAt: { type: 'string', format: 'date-time' }, _links: linksSchema },
};
const memberSchema: JsonSchema = {
  type: 'object',
  properties: {
    userId: { type: 'string' },
    teamId: { type: 'string' },
    role: roleSchema,
    joinedAt: { type: 'string', format: 'date-time', description: 'Set by the server.' },
    updatedAt: { type: 'string', format: 'date-time' },
    _links: linksSchema,
  },
};

function renderTeam(t: TeamRecord): Record<string, unknown> {
  const self = `${BASE}/${t.id}`;
  return { id: t.id, name: t.name, createdAt: iso(t.createdAt), updatedAt: iso(t.updatedAt), _links: { self: { href: self }, members: { href: `${self}/members` } } };
}

export function renderMember(m: MembershipRecord): Record<string, unknown> {
  return {
    userId: m.userId,
    teamId: m.teamId,
    role: m.role,
    joinedAt: iso(m.joinedAt),
    updatedAt: iso(m.updatedAt),
    _links: { self: { href: `${BASE}/${m.teamId}/members/${m.userId}` }, team: { href: `${BASE}/${m.teamId}` }, user: { href: `/v1/users/${m.userId}` } },
  };
}

/** Teams live in the caller's tenant partition, with its users. */
function home(ctx: Ctx): { tenant: string; partition: number } {
  const tenant = principalOf(ctx).tenant;
  return { tenant, partition: partitionFor(tenant) };
}

const teamIdOf = (ctx: Ctx): string => idParam(ctx, 'team', 'teamId', 'team');

function memberTarget(ctx: Ctx): { tenant: string; partition: number; id: string } {
  const userId = parseId('user', ctx.params.userId ?? '');
  if (!userId) throw new ApiError('not-found', 'No membership of that user in this team.');
  return { ...home(ctx), id: membershipId(teamIdOf(ctx), userId) };
}

function teamOutcome(t: TeamRecord, status = 200): Outcome {
  const out: Outcome = { status, render: () => renderTeam(t), cacheKey: t.id, tag: { version: t.version, variant: variantOf(undefined, new Set()) } };
  if (status === 201) out.location = `${BASE}/${t.id}`;
  return out;
}

function memberOutcome(m: MembershipRecord, status = 200): Outcome {
  const out: Outcome = { status, render: () => renderMember(m), cacheKey: m.id, tag: { version: m.version, variant: variantOf(undefined, new Set()) } };
  if (status === 201) out.location = `${BASE}/${m.teamId}/members/${m.userId}`;
  return out;
}

export const teamRoutes: RouteDef[] = [
  route({
    method: 'GET',
    path: BASE,
    operationId: 'listTeams',
    summary: 'List teams.',
    tag: 'teams',
    scope: 'teams:read',
    query: { sort: sortParam(TEAM_SORTS, '-createdAt'), fields: fieldsParam(TEAM_FIELDS), ...LIST_PARAMS },
    responses: { 200: 'A page of teams.', ...problemResponses(400) },
    response: collectionSchema(teamSchema),
    handle(ctx) {
      return plainListPage(ctx, { kind: 'team.list', base: BASE, sorts: TEAM_SORTS, fields: TEAM_FIELDS, stringSorts: ['name'], render: renderTeam });
    },
  }),

  route({
    method: 'POST',
    path: BASE,
    operationId: 'createTeam',
    summary: 'Create a team.',
    tag: 'teams',
    scope: 'teams:write',
    body: { schema: createTeamSchema, readOnly: READ_ONLY },
    responses: { 201: 'The new team; Location names it.', ...problemResponses(415, 422) },
    response: teamSchema,
    async handle(ctx) {
      const h = home(ctx);
      const team = await ctx.bus.call({ kind: 'team.create', ...h, id: newId('team', h.partition), name: (ctx.body as { name: string }).name });
      return teamOutcome(team, 201);
    },
    replay: { partition: (ctx) => home(ctx).partition, outcome: (_ctx, reply) => teamOutcome(reply as TeamRecord, 201) },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{teamId}`,
    operationId: 'getTeam',
    summary: 'Read a team.',
    tag: 'teams',
    scope: 'teams:read',
    query: { fields: fieldsParam(TEAM_FIELDS) },
    responses: { 200: 'The team.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400, 404) },
    response: teamSchema,
    async handle(ctx) {
      const fields = parseFields(ctx.query, TEAM_FIELDS);
      const t = await ctx.bus.call({ kind: 'team.get', ...home(ctx), id: teamIdOf(ctx) });
      return { status: 200, render: () => project(renderTeam(t), fields, new Set()), cacheKey: t.id, tag: { version: t.version, variant: variantOf(fields, new Set()) } };
    },
  }),

  route({
    method: 'DELETE',
    path: `${BASE}/{teamId}`,
    operationId: 'deleteTeam',
    summary: 'Delete a team and its memberships.',
    tag: 'teams',
    scope: 'teams:write',
    responses: { 204: 'Deleted.', ...problemResponses(404, 412) },
    async handle(ctx) {
      await ctx.bus.call({ kind: 'team.delete', ...home(ctx), id: teamIdOf(ctx), ...guards(ctx) });
      return { status: 204, cache: 'no-store' };
    },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{teamId}/members`,
    operationId: 'listTeamMembers',
    summary: 'List the members of a team, in the order they joined.',
    tag: 'teams',
    scope: 'teams:read',
    query: { fields: fieldsParam(MEMBER_FIELDS), ...LIST_PARAMS },
    responses: { 200: 'A page of memberships.', ...problemResponses(400, 404) },
    response: collectionSchema(memberSchema),
    async handle(ctx) {
      const teamId = teamIdOf(ctx);
      const page = await plainListPage(ctx, {
        kind: 'member.list',
        base: `${BASE}/${teamId}/members`,
        filter: teamId,
        sorts: ['joinedAt'],
        defaultSort: 'joinedAt',
        fields: MEMBER_FIELDS,
        stringSorts: [],
        render: renderMember,
      });
      await ctx.bus.call({ kind: 'team.get', ...home(ctx), id: teamId }); // 404 for a team that is not there
      return page;
    },
  }),

  route({
    method: 'POST',
    path: `${BASE}/{teamId}/members`,
    operationId: 'addTeamMember',
    summary: 'Add a user to a team with a role; a repeat is 409, an unknown user 422.',
    tag: 'teams',
    scope: 'teams:write',
    body: { schema: addMemberSchema, readOnly: ['teamId', 'joinedAt', 'updatedAt', '_links'] },
    responses: { 201: 'The membership; Location names it.', ...problemResponses(404, 409, 415, 422) },
    response: memberSchema,
    async handle(ctx) {
      const teamId = teamIdOf(ctx);
      const body = ctx.body as { userId: string; role: TeamRole };
      const userId = parseId('user', body.userId);
      if (!userId) throw new ApiError('validation-failed', 'No user with that id.', { errors: [{ pointer: '/userId', detail: 'names no user' }] });
      const m = await ctx.bus.call({ kind: 'member.add', ...home(ctx), id: membershipId(teamId, userId), teamId, userId, role: body.role });
      return memberOutcome(m, 201);
    },
    replay: { partition: (ctx) => home(ctx).partition, outcome: (_ctx, reply) => memberOutcome(reply as MembershipRecord, 201) },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{teamId}/members/{userId}`,
    operationId: 'getTeamMember',
    summary: 'Read one membership.',
    tag: 'teams',
    scope: 'teams:read',
    responses: { 200: 'The membership.', 304: 'The tag in If-None-Match is current.', ...problemResponses(404) },
    response: memberSchema,
    async handle(ctx) {
      return memberOutcome(await ctx.bus.call({ kind: 'member.get', ...memberTarget(ctx) }));
    },
  }),

  route({
    method: 'PATCH',
    path: `${BASE}/{teamId}/members/{userId}`,
    operationId: 'updateTeamMember',
    summary: "Change a member's role.",
    tag: 'teams',
    scope: 'teams:write',
    body: { schema: patchMemberSchema, readOnly: ['userId', 'teamId', 'joinedAt', 'updatedAt', '_links'], mediaTypes: ['application/merge-patch+json', 'application/json'] },
    responses: { 200: 'The membership.', ...problemResponses(404, 412, 415, 422) },
    response: memberSchema,
    async handle(ctx) {
      return memberOutcome(await ctx.bus.call({ kind: 'member.patch', ...memberTarget(ctx), ...guards(ctx), role: (ctx.body as { role: TeamRole }).role }));
    },
  }),

  route({
    method: 'DELETE',
    path: `${BASE}/{teamId}/members/{userId}`,
    operationId: 'removeTeamMember',
    summary: 'Remove a user from a team.',
    tag: 'teams',
    scope: 'teams:write',
    responses: { 204: 'Removed.', ...problemResponses(404, 412) },
    async handle(ctx) {
      await ctx.bus.call({ kind: 'member.remove', ...memberTarget(ctx), ...guards(ctx) });
      return { status: 204, cache: 'no-store' };
    },
  }),
];
