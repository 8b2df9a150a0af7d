// Which store holds each partition's data, recorded in NATS for good (a JetStream KV bucket).
// Assignment is static (README "Modes"): a partition's records live in the LMDB of the node that
// first served it, and nowhere else. A node started with another store (a new DATA_DIR) and a
// range overlapping one already served would otherwise serve those partitions empty: at start
// while their owner runs (as a standby the gateways ignore), and as their owner as soon as the
// owner stops, answering 404 for acknowledged orders and taking writes the owner never sees
// (ARCHITECTURE property 1: one owner per partition). So a node claims its partitions for its
// store before it serves, and a claim on a partition recorded for another store stops it.

import { StringCodec, type KV, type NatsConnection } from 'nats';
import { ConfigError } from './config.js';
import { toRanges } from './partitions.js';

export const PARTITION_OWNERS_BUCKET = 'actor-partitions';

const codec = StringCodec();

interface Owner {
  store: string;
  node: string;
}

function spans(partitions: number[]): string {
  return toRanges(partitions)
    .map(([lo, hi]) => (lo === hi ? `${lo}` : `${lo}-${hi}`))
    .join(',');
}

async function bucket(nc: NatsConnection): Promise<KV> {
  try {
    return await nc.jetstream().views.kv(PARTITION_OWNERS_BUCKET, { history: 1 });
  } catch (err) {
    throw new ConfigError(
      `cannot open the partition register in NATS JetStream (${err instanceof Error ? err.message : String(err)}): run nats-server with JetStream, as nats.conf does`,
    );
  }
}

function ownerOf(value: Uint8Array): Owner | undefined {
  try {
    const o = JSON.parse(codec.decode(value)) as Partial<Owner>;
    return typeof o.store === 'string' && typeof o.node === 'string' ? { store: o.store, node: o.node } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Records `partitions` for `store` where no store holds them yet, and throws a ConfigError naming
 * the partitions recorded for another store (and the node that first served them). Those are
 * looked at first, so a node that stops claims nothing. Each record is created atomically: of two
 * new nodes racing for a partition the first wins, and the other stops.
 */
export async function claimPartitions(nc: NatsConnection, store: string, node: string, partitions: number[]): Promise<void> {
  const kv = await bucket(nc);
  const recorded = async (p: number): Promise<Owner | undefined> => {
    const e = await kv.get(`p${p}`);
    // A record that cannot be read is still someone's: never taken over unseen.
    return e?.operation === 'PUT' ? (ownerOf(e.value) ?? { store: '', node: 'unknown (its record is unreadable)' }) : undefined;
  };
  const owners = await Promise.all(partitions.map(recorded));
  refuseOthers(store, partitions, owners);
  const mine = codec.encode(JSON.stringify({ store, node } satisfies Owner));
  const raced = await Promise.all(
    partitions.map(async (p, i) => {
      if (owners[i] !== undefined) return owners[i];
      try {
        await kv.create(`p${p}`, mine);
        return undefined;
      } catch {
        // Another node created it meanwhile: its record decides.
        return recorded(p);
      }
    }),
  );
  refuseOthers(store, partitions, raced);
}

function refuseOthers(store: string, partitions: number[], owners: (Owner | undefined)[]): void {
  const others = new Map<string, number[]>();
  partitions.forEach((p, i) => {
    const owner = owners[i];
    if (owner === undefined || owner.store === store) return;
    others.set(owner.node, [...(others.get(owner.node) ?? []), p]);
  });
  if (others.size === 0) return;
  const held = [...others].map(([n, ps]) => `${spans(ps)} (first served by node ${n})`).join('; ');
  throw new ConfigError(
    `partitions ${held} hold data of another store than this node's DATA_DIR: start the node whose DATA_DIR holds them, or give this node a disjoint ACTOR_PARTITIONS. If that data is lost for good, \`npm run release-partitions -- <ranges>\` lets another store serve them, empty`,
  );
}

/** Forgets which store holds `partitions`: the next node to claim them serves them. Returns how many were recorded. */
export async function releasePartitions(nc: NatsConnection, partitions: number[]): Promise<number> {
  const kv = await bucket(nc);
  let released = 0;
  for (const p of partitions) {
    const e = await kv.get(`p${p}`);
    if (e?.operation !== 'PUT') continue;
    await kv.delete(`p${p}`);
    released++;
  }
  return released;
}
