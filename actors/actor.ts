// What a resource actor is: a table, and pure decisions over (command, current record). The host
// does the loading, the one-turn-per-key scheduling, the transaction and the reply; an actor
// module only says what the new state is. That keeps each resource one file to read.

import { ApiError } from '../common/errors.js';
import type { TableSpec } from '../storage/store.js';
import type { Guarded, IfMatch, KeyedCommand, ListQuery } from '../proto/messages.js';
import type { EventRecord } from '../proto/webhooks.js';

export interface Versioned {
  id: string;
  tenant: string;
  version: number;
}

/** The outcome of one turn: the record to store (undefined deletes it) and the reply. */
export interface Decision<T> {
  next: T | undefined;
  reply: unknown;
  /** Events the change emits (actors/events.ts `emit`), committed in its transaction. */
  events?: EventRecord[];
}

export interface ActorDef<T extends Versioned, C extends KeyedCommand> {
  table: TableSpec<T>;
  /** Kinds answered from committed state without waiting in the key's mailbox. */
  isRead(cmd: C): boolean;
  /** Pure: throws ApiError for a refusal. `current` is already filtered to the caller's tenant. */
  decide(cmd: C, current: T | undefined, now: number): Decision<T>;
  /** The index prefix a list query scans. */
  listPrefix(q: ListQuery): (string | number)[];
  /** The record without its children, for list pages that do not expand them. */
  slim?(record: T): T;
}

export function notFound(what: string): ApiError {
  return new ApiError('not-found', `No ${what} with that id.`);
}

/** RFC 9110 §13.1.1: If-Match passes when any listed tag names the current version. */
export function checkIfMatch(ifMatch: IfMatch, version: number): void {
  if (ifMatch === undefined || ifMatch === '*') return;
  if (!ifMatch.includes(version)) {
    throw new ApiError('precondition-failed', 'The resource has changed since the entity tag in If-Match was issued.');
  }
}

export function existing<T extends Versioned>(current: T | undefined, what: string): T {
  if (current === undefined) throw notFound(what);
  return current;
}

/**
 * RFC 9110 §13.1.2: If-None-Match fails, for a method other than GET and HEAD, when any listed tag
 * names the current version, and `*` when there is a current version at all.
 */
export function checkIfNoneMatch(ifNoneMatch: IfMatch, version: number): void {
  if (ifNoneMatch === undefined) return;
  if (ifNoneMatch === '*' || ifNoneMatch.includes(version)) {
    throw new ApiError('precondition-failed', 'The resource matches the entity tag in If-None-Match.');
  }
}

/**
 * The record a guarded write acts on: it must exist for the caller (404), match If-Match (412),
 * then not match If-None-Match (412), in the order of RFC 9110 §13.2.2.
 */
export function existingMatching<T extends Versioned>(current: T | undefined, guards: Guarded, what: string): T {
  const record = existing(current, what);
  checkIfMatch(guards.ifMatch, record.version);
  checkIfNoneMatch(guards.ifNoneMatch, record.version);
  return record;
}
