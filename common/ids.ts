import { Buffer } from 'node:buffer';
import { hash, randomBytes } from 'node:crypto';

// Ids are opaque to clients (CONTRACT §2) but not to us. After the type prefix come:
//   9 base-36 digits of the creation time in milliseconds, so new keys land at the end of the
//     B-trees that hold them: a commit dirties a few tail pages instead of one random page per
//     record (LMDB copies every page it touches);
//   2 hex digits naming the partition that owns the record, so any node routes an id without a
//     lookup and an atomic batch can mint all its ids in one partition (ARCHITECTURE property
//     6); children (line items) carry their parent's partition;
//  11 random base-36 digits (56 bits), so ids cannot be guessed (a derived id, below, has a
//     hash there instead).

/** Fixed for the life of the data: changing it would move every key (ARCHITECTURE). */
export const PARTITIONS = 256;

export const ID_PREFIXES = {
  order: 'ord_',
  item: 'itm_',
  product: 'prd_',
  refund: 'ref_',
  user: 'usr_',
  team: 'team_',
  article: 'art_',
  operation: 'op_',
  webhookEndpoint: 'we_',
  event: 'evt_',
  delivery: 'dlv_',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

declare const brand: unique symbol;
export type Id<K extends IdKind> = string & { readonly [brand]: K };
export type OrderId = Id<'order'>;
export type ItemId = Id<'item'>;
export type ProductId = Id<'product'>;

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';
const TIME_CHARS = 9;
const RANDOM_CHARS = 11;

// Randomness drawn in blocks: one getrandom call per ~200 ids instead of one per id.
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let poolAt = 0;

function randomByte(): number {
  if (poolAt >= pool.length) {
    pool = randomBytes(POOL_BYTES);
    poolAt = 0;
  }
  return pool[poolAt++]!;
}

// The random part's characters, written into one buffer and read out as a string once: joined a
// character at a time, an id cost about 1 µs.
const ALPHABET_CODES = Buffer.from(ALPHABET, 'latin1');
const randomChars = Buffer.alloc(RANDOM_CHARS);

function randomPart(): string {
  let n = 0;
  // 252 is the largest multiple of 36 below 256: rejecting the rest keeps every character equally likely.
  while (n < RANDOM_CHARS) {
    const b = randomByte();
    if (b < 252) randomChars[n++] = ALPHABET_CODES[b % 36]!;
  }
  return randomChars.toString('latin1', 0, RANDOM_CHARS);
}

/** Two hex digits for each partition. */
const PARTITION_HEX = Array.from({ length: 256 }, (_, p) => p.toString(16).padStart(2, '0'));

// The time part of the last millisecond an id was made in: ids come many to a millisecond.
let timeAt = -1;
let timePart = '';

function timeChars(now: number): string {
  if (now !== timeAt) {
    timeAt = now;
    timePart = now.toString(36).padStart(TIME_CHARS, '0');
  }
  return timePart;
}

/**
 * A partition fixed by a string (FNV-1a): where everything named by it lives, e.g. all users of
 * a tenant, or what a request with an Idempotency-Key creates. Spreads, need not be secret.
 */
export function partitionFor(name: string): number {
  return (fnv(0x811c9dc5, name) >>> 0) % PARTITIONS;
}

/** partitionFor(`${first}\u0000${second}`), without joining them into a string first. */
export function partitionForPair(first: string, second: string): number {
  return (fnv(Math.imul(fnv(0x811c9dc5, first), 0x01000193), second) >>> 0) % PARTITIONS;
}

function fnv(h: number, s: string): number {
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h;
}

export function randomPartition(): number {
  return randomByte();
}

export function newId<K extends IdKind>(kind: K, partition: number = randomPartition()): Id<K> {
  const hex = PARTITION_HEX[partition] ?? partition.toString(16).padStart(2, '0');
  return `${ID_PREFIXES[kind]}${timeChars(Date.now())}${hex}${randomPart()}` as Id<K>;
}

/**
 * An id fixed by another id and a name: the base's time and partition, then 11 base-36 digits of
 * a hash of both (52 bits). The same pair always gives the same id, so work redone after a
 * restart finds what it stored the first time; two names under one base collide with odds of
 * about 2^-52. Not secret: anyone who knows both ids can work it out.
 */
export function derivedId<K extends IdKind>(kind: K, base: string, name: string): Id<K> {
  const at = base.indexOf('_') + 1;
  const digest = parseInt(hash('sha256', `${base}\u0000${name}`, 'hex').slice(0, 13), 16);
  return `${ID_PREFIXES[kind]}${base.slice(at, at + TIME_CHARS + 2)}${digest.toString(36).padStart(RANDOM_CHARS, '0')}` as Id<K>;
}

const patterns = Object.fromEntries(
  Object.entries(ID_PREFIXES).map(([kind, prefix]) => [kind, new RegExp(`^${prefix}[0-9a-z]{${TIME_CHARS}}[0-9a-f]{2}[0-9a-z]{${RANDOM_CHARS}}$`)]),
) as Record<IdKind, RegExp>;

/** Narrows a client-supplied string to an id of the kind, or undefined (which callers answer 404). */
export function parseId<K extends IdKind>(kind: K, raw: string): Id<K> | undefined {
  return patterns[kind].test(raw) ? (raw as Id<K>) : undefined;
}

export function partitionOf(id: string): number {
  const at = id.indexOf('_') + 1 + TIME_CHARS;
  return parseInt(id.slice(at, at + 2), 16);
}
