// Teams and memberships (CONTRACT §6). They live in the tenant's partition with its users and
// are written under the tenant's user lock (actors/users.ts), so a new membership sees whether
// its user exists, and a user's or a team's delete removes its memberships, in one transaction.

import { ApiError } from '../common/errors.js';
import type { CommandOf, ListQuery, MembershipRecord, TeamRecord, UserRecord } from '../proto/messages.js';
import type { Table, Write } from '../storage/store.js';
import { type ActorDef, existing, existingMatching } from './actor.js';
import type { Plan } from './batch.js';
import { emit } from './events.js';
import type { EventRecord } from '../proto/webhooks.js';

export const TEAM_SORTS = ['createdAt', 'name'] as const;

export const membershipId = (teamId: string, userId: string): string => `${teamId}:${userId}`;
/** The index filter under which a user's memberships are listed (team ids never start so). */
export const byUser = (userId: string): string => `user:${userId}`;

export const teamActor: ActorDef<TeamRecord, CommandOf<'team.get'>> = {
  table: {
    name: 'teams',
    cached: true,
    indexKeys: (t) => [
      [t.tenant, '*', 'createdAt', t.createdAt, t.id],
      [t.tenant, '*', 'name', t.name, t.id],
    ],
  },
  isRead: (cmd) => cmd.kind === 'team.get',
  listPrefix: (q: ListQuery) => [q.tenant, '*', q.sort],
  decide: (_cmd, current) => ({ next: current, reply: existing(current, 'team') }),
};

export const memberActor: ActorDef<MembershipRecord, CommandOf<'member.get'>> = {
  table: {
    name: 'memberships',
    cached: true,
    indexKeys: (m) => [
      [m.tenant, m.teamId, 'joinedAt', m.joinedAt, m.id],
      [m.tenant, byUser(m.userId), 'joinedAt', m.joinedAt, m.id],
    ],
  },
  isRead: (cmd) => cmd.kind === 'member.get',
  listPrefix: (q: ListQuery) => [q.tenant, q.filter ?? '', 'joinedAt'],
  decide: (_cmd, current) => ({ next: current, reply: existing(current, 'membership') }),
};

export interface TeamTables {
  teams: Table<TeamRecord>;
  members: Table<MembershipRecord>;
  users: Table<UserRecord>;
  /** Membership ids under an index filter (a team id, or byUser(userId)). */
  memberIds(tenant: string, filter: string): string[];
}

type TeamWrite = CommandOf<'team.create' | 'team.delete' | 'member.add' | 'member.patch' | 'member.remove'>;

function own<T extends { tenant: string }>(rec: T | undefined, tenant: string): T | undefined {
  return rec && rec.tenant === tenant ? rec : undefined;
}

/** Writes removing every membership under `filter` (a team's, or a user's). */
export function dropMemberships(t: TeamTables, tenant: string, filter: string): Write<unknown>[] {
  return t.memberIds(tenant, filter).flatMap((id) => {
    const m = t.members.get(id);
    return m && m.tenant === tenant ? [{ table: t.members as Table<unknown>, id, before: m, after: undefined }] : [];
  });
}

/** A `team.member.removed` event for each membership a cascade (team or user delete) removes. */
export function memberRemovals(dropped: Write<unknown>[], now: number): EventRecord[] {
  return dropped.flatMap((w) => (w.before ? [emit('team.member.removed', 'membership', w.before as MembershipRecord, now)] : []));
}

let lastStamp = 0;

/**
 * Versions of memberships: hundredths of a millisecond of the write, and above every stamp this
 * process gave before, so strictly increasing (a team's memberships have one owner, one process).
 * A restart starts again from the clock, ahead of the last process's stamps unless that one gave
 * more than a hundred a millisecond. 15 digits: what an ETag's version may hold.
 */
export function membershipStamp(now: number): number {
  lastStamp = Math.max(now * 100, lastStamp + 1);
  return lastStamp;
}

export function planTeamWrite(cmd: TeamWrite, t: TeamTables, now: number): Plan {
  const writes: Write<unknown>[] = [];
  switch (cmd.kind) {
    case 'team.create': {
      if (t.teams.get(cmd.id)) throw new ApiError('conflict', 'A team with that id already exists.');
      const team: TeamRecord = { id: cmd.id, tenant: cmd.tenant, version: 1, name: cmd.name, createdAt: now, updatedAt: now };
      writes.push({ table: t.teams as Table<unknown>, id: cmd.id, before: undefined, after: team });
      return { writes, reply: team };
    }
    case 'team.delete': {
      const stored = t.teams.get(cmd.id);
      const team = existingMatching(own(stored, cmd.tenant), cmd, 'team');
      const dropped = dropMemberships(t, cmd.tenant, team.id);
      writes.push(...dropped, { table: t.teams as Table<unknown>, id: cmd.id, before: stored, after: undefined });
      return { writes, reply: null, events: memberRemovals(dropped, now) };
    }
    case 'member.add': {
      existing(own(t.teams.get(cmd.teamId), cmd.tenant), 'team');
      if (!own(t.users.get(cmd.userId), cmd.tenant)) {
        throw new ApiError('validation-failed', 'No user with that id.', { errors: [{ pointer: '/userId', detail: 'names no user' }] });
      }
      if (t.members.get(cmd.id)) throw new ApiError('conflict', 'The user is already a member of this team.');
      // A membership's id is (team, user), so one removed and added again has the same id: its
      // version is a stamp (membershipStamp), never one an earlier membership of the pair had,
      // so neither its ETag nor a kept rendering of the earlier one can stand for it.
      const m: MembershipRecord = { id: cmd.id, tenant: cmd.tenant, version: membershipStamp(now), teamId: cmd.teamId, userId: cmd.userId, role: cmd.role, joinedAt: now, updatedAt: now };
      writes.push({ table: t.members as Table<unknown>, id: cmd.id, before: undefined, after: m });
      return { writes, reply: m, events: [emit('team.member.added', 'membership', m, now)] };
    }
    case 'member.patch': {
      const stored = t.members.get(cmd.id);
      const m = existingMatching(own(stored, cmd.tenant), cmd, 'membership');
      const next: MembershipRecord = { ...m, role: cmd.role, version: membershipStamp(now), updatedAt: now };
      writes.push({ table: t.members as Table<unknown>, id: cmd.id, before: stored, after: next });
      return { writes, reply: next };
    }
    case 'member.remove': {
      const stored = t.members.get(cmd.id);
      const m = existingMatching(own(stored, cmd.tenant), cmd, 'membership');
      writes.push({ table: t.members as Table<unknown>, id: cmd.id, before: stored, after: undefined });
      return { writes, reply: null, events: [emit('team.member.removed', 'membership', m, now)] };
    }
  }
}
