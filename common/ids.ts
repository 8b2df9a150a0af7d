import { randomBytes } from 'node:crypto';

// Ids are opaque to clients (CONTRACT §2) but not to us: after the type prefix come two hex
// digits naming the partition that owns the record, so any node can route an id without a
// lookup, and an atomic batch can mint all its ids inside one partition (ARCHITECTURE
// property 6). Children (line items) carry their parent's partition.

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
const RANDOM_CHARS = 20;

function randomPart(): string {
  const bytes = randomBytes(RANDOM_CHARS);
  let out = '';
  for (const b of bytes) out += ALPHABET[b % 36];
  return out;
}

export function randomPartition(): number {
  return randomBytes(1)[0]!;
}

export function newId<K extends IdKind>(kind: K, partition: number = randomPartition()): Id<K> {
  return `${ID_PREFIXES[kind]}${partition.toString(16).padStart(2, '0')}${randomPart()}` as Id<K>;
}

const patterns = Object.fromEntries(
  Object.entries(ID_PREFIXES).map(([kind, prefix]) => [kind, new RegExp(`^${prefix}[0-9a-f]{2}[0-9a-z]{${RANDOM_CHARS}}$`)]),
) as Record<IdKind, RegExp>;

/** Narrows a client-supplied string to an id of the kind, or undefined (which callers answer 404). */
export function parseId<K extends IdKind>(kind: K, raw: string): Id<K> | undefined {
  return patterns[kind].test(raw) ? (raw as Id<K>) : undefined;
}

export function partitionOf(id: string): number {
  const at = id.indexOf('_') + 1;
  return parseInt(id.slice(at, at + 2), 16);
}
