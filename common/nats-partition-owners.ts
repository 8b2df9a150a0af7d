// Which store holds each partition's data, recorded in NATS for good (a JetStream KV bucket).
// Assignment is static (README "Modes"): a partition's records live in the LMDB of the node that
// first served it, and nowhere else. A node started with another store (a new DATA_DIR) and a
// range overlapping one already served would otherwise serve those partitions empty: at start
// while their owner runs (as a standby the gateways ignore), and as their owner as soon as the
// owner stops, answering 404 for acknowledged orders and taking writes the owner never sees
// (ARCHITECTURE property 1: one owner per partition). So a node claims its partitions for its
// store before it serves, and a claim on a partition recorded for another store stops it.

import { setTimeout as sleep } from 'node:timers/promises';
import { StringCodec, type KV, type NatsConnection } from 'nats';
import { ConfigError } from './config.js';
import { formatPartitions } from './partitions.js';

export const PARTITION_OWNERS_BUCKET = 'actor-partitions';

const codec = StringCodec();

interface Owner {
  store: string;
  node: string;
}

type NatsFailure = { code?: string; api_error?: { err_code?: number } } | null;

/**
 * JetStream is off on this server or account: waiting cannot help, its settings must change. No
 * responders to the JetStream API (a 503 without an API error), or the API saying so (10039,
 * 10076). A cluster without a leader answers 503 too, with 10008: that one passes.
 */
function jetStreamOff(err: unknown): boolean {
  const e = err as NatsFailure;
  const code = e?.api_error?.err_code;
  return (e?.code === '503' && e.api_error === undefined) || code === 10039 || code === 10076;
}

/**
 * What waiting may cure: no answer in time, a lost connection, no responders to a record's
 * subject (its stream offline for now), JetStream without a leader (10008) or short of resources
 * for now (10023). Anything else (limits, permissions, a bucket made with other settings) is a
 * fault to fix, reported at once.
 */
function passing(err: unknown): boolean {
  const e = err as NatsFailure;
  const code = e?.api_error?.err_code;
  if (code !== undefined) return code === 10008 || code === 10023;
  return e?.code === '503' || e?.code === 'TIMEOUT' || e?.code === 'DISCONNECT' || e?.code === 'CONNECTION_CLOSED' || e?.code === 'CONNECTION_REFUSED';
}

/**
 * The bucket's stream made by another node while this one made it too: two nodes opening the
 * bucket for the first time at once. JetStream answers the second "subjects overlap with an
 * existing stream" (10065) or "stream name already in use" (10058); opened again, it is there.
 */
function madeMeanwhile(err: unknown): boolean {
  const code = (err as NatsFailure)?.api_error?.err_code;
  return code === 10065 || code === 10058;
}
/** Opens tried again after madeMeanwhile: past them the answer is a fault (a bucket made elsewhere with other settings, say). */
const MADE_MEANWHILE_TRIES = 3;

/** A create refused because the key holds a record already (JetStream's "wrong last sequence"). */
function exists(err: unknown): boolean {
  return (err as NatsFailure)?.api_error?.err_code === 10071;
}

export function bucket(nc: NatsConnection): Promise<KV> {
  return nc.jetstream().views.kv(PARTITION_OWNERS_BUCKET, { history: 1 });
}

function ownerOf(value: Uint8Array): Owner | undefined {
  try {
    const o = JSON.parse(codec.decode(value)) as Partial<Owner>;
    return typeof o.store === 'string' && typeof o.node === 'string' ? { store: o.store, node: o.node } : undefined;
  } catch {
    return undefined;
  }
}

// Two new nodes claiming overlapping ranges at once may each take part of them: both give back
// what they took and try again after a random pause, and one of them then takes them all.
const RACE_ATTEMPTS = 5;
const RACE_PAUSE_MS = 100;
// JetStream without a leader or a quorum for a while (a NATS cluster restarting): the node waits.
const UNAVAILABLE_PAUSE_MS = 2000;

/**
 * Records `partitions` for `store` where no store holds them yet, and throws a ConfigError naming
 * the partitions recorded for another store (and the node that first claimed them). Those are
 * looked at first, so a node refused claims nothing. Each record is created atomically; a node
 * that lost part of a race gives back what it took (RACE_ATTEMPTS). While JetStream cannot answer
 * the node waits for it, as it waits for NATS, saying so through `warn`.
 */
export async function claimPartitions(
  nc: NatsConnection,
  store: string,
  node: string,
  partitions: number[],
  warn: (msg: string) => void = () => {},
  // The bucket as it is opened; tests hand in one that another node's claim races.
  open: (nc: NatsConnection) => Promise<KV> = bucket,
): Promise<void> {
  let madeTries = 0;
  for (let attempt = 1; ; attempt++) {
    let outcome: 'claimed' | 'raced';
    let opened = false;
    try {
      const kv = await open(nc);
      opened = true;
      outcome = await claimOnce(kv, store, node, partitions, attempt === RACE_ATTEMPTS);
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      if (!opened && madeMeanwhile(err) && madeTries++ < MADE_MEANWHILE_TRIES) {
        await sleep(RACE_PAUSE_MS * Math.random());
        attempt--;
        continue;
      }
      // Only the JetStream API, asked to open the bucket, tells that JetStream is off: no
      // responders to a record's subject mean its stream cannot answer for now (its server
      // restarting, a leader being elected), which passes.
      if (!opened && jetStreamOff(err)) throw new ConfigError('NATS has no JetStream, which holds the record of which store serves each partition: run nats-server with JetStream, as nats.conf does');
      const why = err instanceof Error ? err.message : String(err);
      if (!passing(err)) throw new Error(`the partition record in NATS JetStream (bucket ${PARTITION_OWNERS_BUCKET}) cannot be read or written: ${why}`, { cause: err });
      warn(`the partition record in NATS JetStream cannot be read or written for now (${why}); trying again in ${UNAVAILABLE_PAUSE_MS / 1000} s`);
      await sleep(UNAVAILABLE_PAUSE_MS);
      attempt--;
      continue;
    }
    if (outcome === 'claimed') return;
    await sleep(RACE_PAUSE_MS * (1 + 4 * Math.random()));
  }
}

async function claimOnce(kv: KV, store: string, node: string, partitions: number[], last: boolean): Promise<'claimed' | 'raced'> {
  const recorded = async (p: number): Promise<Owner | undefined> => {
    const e = await kv.get(`p${p}`);
    // A record that cannot be read is still someone's: never taken over unseen.
    return e?.operation === 'PUT' ? (ownerOf(e.value) ?? { store: '', node: 'unknown (its record is unreadable)' }) : undefined;
  };
  const owners = await Promise.all(partitions.map(recorded));
  refuseOthers(store, partitions, owners);
  const mine = codec.encode(JSON.stringify({ store, node } satisfies Owner));
  const taken: { key: string; revision: number }[] = [];
  // Every create runs to its end, so that what was taken is known when one of them fails.
  const settled = await Promise.allSettled(
    partitions.map(async (p, i) => {
      if (owners[i] !== undefined) return owners[i];
      try {
        taken.push({ key: `p${p}`, revision: await kv.create(`p${p}`, mine) });
        return undefined;
      } catch (err) {
        if (!exists(err)) throw err;
        // Another node created it meanwhile: its record decides.
        return recorded(p);
      }
    }),
  );
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  const raced = settled.map((r) => (r.status === 'fulfilled' ? r.value : undefined));
  if (!failed && raced.every((o) => o === undefined || o.store === store)) return 'claimed';
  // Lost part of a race, or failed part way: what this attempt took is given back, only where
  // its record is still as this attempt wrote it.
  await Promise.all(taken.map(({ key, revision }) => kv.delete(key, { previousSeq: revision }).catch(() => undefined)));
  if (failed) throw failed.reason;
  if (last) refuseOthers(store, partitions, raced);
  return 'raced';
}

function refuseOthers(store: string, partitions: number[], owners: (Owner | undefined)[]): void {
  const others = new Map<string, number[]>();
  partitions.forEach((p, i) => {
    const owner = owners[i];
    if (owner === undefined || owner.store === store) return;
    others.set(owner.node, [...(others.get(owner.node) ?? []), p]);
  });
  if (others.size === 0) return;
  const held = [...others].map(([n, ps]) => `${formatPartitions(ps)} (claimed by node ${n})`).join('; ');
  throw new ConfigError(
    `partitions ${held} belong to another store than this node's DATA_DIR: start the node whose DATA_DIR holds them, or give this node a disjoint ACTOR_PARTITIONS. If that data is lost for good, \`npm run release-partitions -- <ranges>\` lets another store serve them, empty`,
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
