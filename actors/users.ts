// The user actor (CONTRACT §6): users with an email unique per tenant, ignoring case.
//
// Every user of a tenant lives in the tenant's partition (common/ids.ts partitionFor), beside
// the tenant's email claims: a claim is a record keyed by (tenant, lower-cased email) naming the
// user that holds it. A write takes the tenant's user lock (actors/host.ts), so two creates with
// one email, through any gateway, in either mode, meet in one turn, and the user and its claim
// are committed in one transaction: exactly one of them gets 201, the other 409.

import { ApiError } from '../common/errors.js';
import type { CommandOf, ListQuery, UserInput, UserRecord } from '../proto/messages.js';
import type { Table, TableSpec, Write } from '../storage/store.js';
import { type ActorDef, existing, existingMatching } from './actor.js';
import type { Plan } from './batch.js';
import { emit } from './events.js';
import { memberRemovals } from './teams.js';

export const USER_SORTS = ['createdAt', 'email'] as const;

/** An email held by a user of a tenant. */
export interface EmailClaim {
  id: string;
  tenant: string;
  userId: string;
}

export const EMAIL_CLAIMS: TableSpec<EmailClaim> = { name: 'user-emails', indexKeys: () => [] };

// Emails hold no control characters (the schema's pattern refuses them), so NUL separates.
const claimId = (tenant: string, email: string): string => `${tenant}\u0000${email.toLowerCase()}`;

/** The lock every user write of a tenant takes: the email check and the write are one turn. */
export const usersLock = (tenant: string): string => `users\u0000${tenant}`;

type UserWrite = CommandOf<'user.create' | 'user.replace' | 'user.patch' | 'user.delete'>;

export const userActor: ActorDef<UserRecord, CommandOf<'user.get'> | UserWrite> = {
  table: {
    name: 'users',
    cached: true,
    indexKeys: (u) => [
      [u.tenant, '*', 'createdAt', u.createdAt, u.id],
      [u.tenant, '*', 'email', u.email.toLowerCase(), u.id],
    ],
  },
  isRead: (cmd) => cmd.kind === 'user.get',
  listPrefix: (q: ListQuery) => [q.tenant, '*', q.sort],
  decide(cmd, current) {
    // Reads only: writes go through planUserWrite, which also keeps the email claims.
    if (cmd.kind !== 'user.get') throw new Error(`${cmd.kind} is planned by planUserWrite`);
    return { next: current, reply: existing(current, 'user') };
  },
};

function conflict(email: string): ApiError {
  return new ApiError('conflict', `A user with the email ${email} already exists.`, { errors: [{ pointer: '/email', detail: 'is taken' }] });
}

/** Decides a user write and the claim changes it needs, as one set of writes. */
export function planUserWrite(cmd: UserWrite, users: Table<UserRecord>, claims: Table<EmailClaim>, now: number, onDelete: () => Write<unknown>[] = () => []): Plan {
  const stored = users.get(cmd.id);
  const current = stored && stored.tenant === cmd.tenant ? stored : undefined;
  const writes: Write<unknown>[] = [];
  const claim = (email: string, userId: string): void => {
    const id = claimId(cmd.tenant, email);
    const held = claims.get(id);
    if (held && held.userId !== userId) throw conflict(email);
    if (!held) writes.push({ table: claims as Table<unknown>, id, before: undefined, after: { id, tenant: cmd.tenant, userId } });
  };
  const release = (email: string): void => {
    const id = claimId(cmd.tenant, email);
    const held = claims.get(id);
    if (held && held.userId === cmd.id) writes.push({ table: claims as Table<unknown>, id, before: held, after: undefined });
  };
  const put = (next: UserRecord | undefined): Plan => {
    writes.push({ table: users as Table<unknown>, id: cmd.id, before: stored, after: next });
    const type = cmd.kind === 'user.create' ? 'user.created' : next ? 'user.updated' : 'user.deleted';
    const state = next ?? stored;
    return { writes, reply: next ?? null, events: state ? [emit(type, 'user', state, now)] : [] };
  };
  const changeTo = (user: UserRecord, input: Partial<UserInput>): Plan => {
    const email = input.email ?? user.email;
    if (email.toLowerCase() !== user.email.toLowerCase()) {
      claim(email, user.id);
      release(user.email);
    }
    return put({ ...user, ...input, email, version: user.version + 1, updatedAt: now });
  };

  switch (cmd.kind) {
    case 'user.create': {
      if (stored) throw new ApiError('conflict', 'A user with that id already exists.');
      claim(cmd.input.email, cmd.id);
      return put({ id: cmd.id, tenant: cmd.tenant, version: 1, email: cmd.input.email, name: cmd.input.name, createdAt: now, updatedAt: now });
    }
    case 'user.replace': {
      const user = existingMatching(current, cmd, 'user');
      return changeTo(user, cmd.input);
    }
    case 'user.patch': {
      const user = existingMatching(current, cmd, 'user');
      return changeTo(user, cmd.patch);
    }
    case 'user.delete': {
      const user = existingMatching(current, cmd, 'user');
      release(user.email);
      const dropped = onDelete();
      writes.push(...dropped);
      const plan = put(undefined);
      // Its memberships go with it, each announced as a removal.
      return { ...plan, events: [...memberRemovals(dropped, now), ...(plan.events ?? [])] };
    }
  }
}

/** One slot per id, in order: the tenant's user by that id, or null. The ids are distinct. */
export function batchGetUsers(tenant: string, ids: string[], users: Table<UserRecord>): (UserRecord | null)[] {
  return ids.map((id) => {
    const u = users.get(id);
    return u && u.tenant === tenant && u.id === id ? u : null;
  });
}
