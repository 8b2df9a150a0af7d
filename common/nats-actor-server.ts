// Cluster mode's bus, actor side: serves one node's partitions on `actors.node.<nodeId>` and
// announces that ownership (see nats-wire.ts for the envelopes). Every handler runs inside the
// same wrapper, after nats.js services: count, time, turn a throw into an `internal` wire error,
// and always reply, so a gateway never waits out its deadline because of a bug here.

import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, Events, type ConnectionOptions, type Msg, type NatsConnection } from 'nats';
import { unreachable } from './nats-bus.js';
import type { ActorEndpoint } from './bus.js';
import type { WireError } from './errors.js';
import { isPartition, toRanges } from './partitions.js';
import {
  ANNOUNCE_SUBJECT,
  DISCOVER_SUBJECT,
  HEARTBEAT_MS,
  RECONNECT_WAIT_MS,
  decodeRequest,
  encodeAnnouncement,
  isNodeId,
  nodeSubject,
  packr,
  settleWithin,
  type LateResults,
  type LateTo,
  type WireReply,
  type WireRequest,
} from './nats-wire.js';
import { fitReply } from './reply-fit.js';
import { claimPartitions } from './nats-partition-owners.js';
import type { Command, Result } from '../proto/messages.js';

export interface ActorServerOptions {
  /** Stable name; becomes the subject token, so letters, digits, '-' and '_' only. */
  nodeId: string;
  partitions: number[];
  /**
   * The identity of the store behind the endpoint (storage/store-id.ts): the partitions are
   * claimed for it before anything is served, and a partition another store holds stops the node.
   */
  store: string;
  log?: (msg: string) => void;
  /** Where it says that NATS could not be reached at start, and that it waits (default: `log`). */
  warn?: (msg: string) => void;
}

export interface ActorServerStats {
  /** NATS messages served: a coalesced batch counts once. */
  messages: number;
  commands: number;
  queries: number;
  /** Handlers that threw, plus messages that could not be read or answered. */
  errors: number;
  /** Total handling time across messages, in milliseconds. */
  processingMs: number;
}

export interface ActorServer {
  close(): Promise<void>;
  stats(): ActorServerStats;
}

const FAILED: WireError = { code: 'internal', detail: 'The request could not be completed.' };
const INTERNAL: Result<never> = { ok: false, error: FAILED };
// The gateway's directory was stale: the command reached a node that does not own the key, and
// running it here would break one writer per key (ARCHITECTURE property 1).
const NOT_OWNED: Result<never> = { ok: false, error: { code: 'unavailable', detail: 'This data is moving between nodes; retry shortly.' } };

/** How long close() waits on NATS before giving up on a graceful drain (it may be down). */
const CLOSE_GRACE_MS = 5000;
/**
 * How long a reply waits for a message's writes before it leaves with what is done; the rest
 * follow as they finish. Most writes take one commit, well under it, and go in the one reply.
 */
export const SPLIT_AFTER_MS = 25;

export async function serveActorsOverNats(url: string, endpoint: ActorEndpoint, opts: ActorServerOptions): Promise<ActorServer> {
  const { nodeId } = opts;
  if (!isNodeId(nodeId)) throw new Error(`node id '${opts.nodeId}' must be 1-64 letters, digits, '-' or '_'`);
  const bad = opts.partitions.find((p) => !isPartition(p));
  if (bad !== undefined) throw new Error(`node ${nodeId}: ${bad} is not a partition`);
  const owned = new Set(opts.partitions);
  const log = opts.log ?? (() => {});
  const subject = nodeSubject(nodeId);
  const stats: ActorServerStats = { messages: 0, commands: 0, queries: 0, errors: 0, processingMs: 0 };

  const nc = await connectWhenUp(
    {
      servers: url,
      name: `actor-${nodeId}`,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: RECONNECT_WAIT_MS,
      // No Error captured per request for async stack traces: it costs more than the request.
      noAsyncTraces: true,
    },
    opts.warn ?? log,
  );
  try {
    await claimPartitions(nc, opts.store, nodeId, opts.partitions, opts.warn ?? log);
  } catch (err) {
    await nc.close().catch(() => undefined);
    throw err;
  }

  async function guarded(work: () => Promise<Result<unknown>>): Promise<Result<unknown>> {
    try {
      return await work();
    } catch (err) {
      stats.errors++;
      log(`actor handler failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      return INTERNAL;
    }
  }

  function guardedRead(cmd: Command): Result<unknown> | undefined {
    try {
      return endpoint.read?.(cmd);
    } catch (err) {
      stats.errors++;
      log(`actor read failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      return INTERNAL;
    }
  }

  /** Writes whose results go out late, after their message was answered. */
  const lateWork = new Set<Promise<void>>();

  async function answer(req: WireRequest): Promise<WireReply> {
    if ('query' in req) {
      stats.queries++;
      return { results: [await guarded(() => endpoint.query(req.query))] };
    }
    stats.commands += req.commands.length;
    const results: (Result<unknown> | null)[] = new Array<Result<unknown> | null>(req.commands.length).fill(null);
    const writes: Promise<void>[] = [];
    const running = new Set<number>();
    // Where the results of writes still running at the reply go, once the reply has left.
    const after: { late?: (i: number, r: Result<unknown>) => void } = {};
    req.commands.forEach((cmd, i) => {
      if (!owned.has(cmd.partition)) {
        results[i] = NOT_OWNED;
        return;
      }
      // Reads are answered at once from committed state; only writes wait for a turn.
      const read = guardedRead(cmd);
      if (read) {
        results[i] = read;
        return;
      }
      running.add(i);
      writes.push(
        guarded(() => endpoint.handle(cmd)).then((r) => {
          running.delete(i);
          if (after.late) after.late(i, r);
          else results[i] = r;
        }),
      );
    });
    if (writes.length === 0) return { results };
    const all = Promise.all(writes);
    if (!req.late) {
      await all;
      return { results };
    }
    // Commands of one message wait for none of the others: past SPLIT_AFTER_MS the reply takes
    // what is done, and each write still running (one behind a busy key, say) follows alone.
    let timer: NodeJS.Timeout | undefined;
    const done = await Promise.race([all.then(() => true), new Promise<false>((resolve) => (timer = setTimeout(resolve, SPLIT_AFTER_MS, false)))]);
    clearTimeout(timer);
    if (done || running.size === 0) return { results };
    after.late = lateSender(req.late);
    // close() waits for them: the last results are published a turn after the last write ends.
    const tail = all.then(() => new Promise<void>((resolve) => setImmediate(resolve)));
    lateWork.add(tail);
    void tail.finally(() => lateWork.delete(tail));
    return { results, pending: [...running] };
  }

  /** Publishes results of a message's late commands, those finishing in one turn together. */
  function lateSender(to: LateTo): (i: number, r: Result<unknown>) => void {
    let batch: [number, Result<unknown>][] = [];
    return (i, r) => {
      if (batch.length === 0) {
        setImmediate(() => {
          const results = batch;
          batch = [];
          try {
            nc.publish(to.to, packr.pack({ xid: to.xid, results } satisfies LateResults));
          } catch (err) {
            // The gateway's deadline answers for them.
            stats.errors++;
            log(`could not send late results to ${to.to}: ${err instanceof Error ? err.message : String(err)}`);
          }
        });
      }
      batch.push([i, r]);
    };
  }

  async function serve(msg: Msg): Promise<void> {
    const started = performance.now();
    stats.messages++;
    let req: WireRequest | undefined;
    let reply: WireReply;
    try {
      req = decodeRequest(msg.data);
      reply = await answer(req);
    } catch (err) {
      stats.errors++;
      log(`unreadable request on ${subject}: ${err instanceof Error ? err.message : String(err)}`);
      reply = { error: FAILED };
    }
    try {
      const packed = packr.pack(reply);
      if (packed.length <= maxPayload()) msg.respond(packed);
      else respondFitted(msg, reply, req);
    } catch (err) {
      // A result that cannot be encoded. The commands have run; the gateway answers 500.
      stats.errors++;
      log(`could not reply on ${subject}: ${err instanceof Error ? err.message : String(err)}`);
      try {
        msg.respond(packr.pack({ error: FAILED } satisfies WireReply));
      } catch {
        // Connection gone: the gateway's deadline answers for us.
      }
    }
    stats.processingMs += performance.now() - started;
  }

  function maxPayload(): number {
    return nc.info?.max_payload ?? 1024 * 1024;
  }

  /** A reply over max_payload: what fits (common/reply-fit.ts), then the rest as late results. */
  function respondFitted(msg: Msg, reply: WireReply, req: WireRequest | undefined): void {
    const fitted = fitReply(reply, req, maxPayload());
    if (fitted.dropped) {
      stats.errors += fitted.dropped;
      log(`${fitted.dropped} results on ${subject} are larger than NATS max_payload (${maxPayload()} bytes) and were answered as failed; raise max_payload`);
    }
    msg.respond(packr.pack(fitted.reply));
    const to = req && 'commands' in req ? req.late?.to : undefined;
    if (to === undefined) return;
    for (const late of fitted.late) {
      try {
        nc.publish(to, packr.pack(late));
      } catch (err) {
        // The gateway's deadline answers for them.
        stats.errors++;
        log(`could not send late results to ${to}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  const inFlight = new Set<Promise<void>>();
  const sub = nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) return log(`subscription error on ${subject}: ${err.message}`);
      const work = serve(msg).finally(() => inFlight.delete(work));
      inFlight.add(work);
    },
  });

  const ranges = toRanges(opts.partitions);
  const announce = (leaving = false): void => {
    try {
      nc.publish(ANNOUNCE_SUBJECT, encodeAnnouncement({ nodeId, subject, ranges: leaving ? [] : ranges, at: Date.now() }));
    } catch (err) {
      log(`could not announce node ${nodeId}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  const discover = nc.subscribe(DISCOVER_SUBJECT, { callback: () => announce() });
  // Gateways must not learn of this node before the server routes its subject to us.
  await nc.flush();
  announce();
  const heartbeat = setInterval(() => announce(), HEARTBEAT_MS);

  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === Events.Disconnect) log(`node ${nodeId} lost its NATS connection`);
      else if (s.type === Events.Reconnect) {
        log(`node ${nodeId} reconnected to NATS`);
        announce();
      }
    }
  })().catch((err: unknown) => log(`status watch ended: ${err instanceof Error ? err.message : String(err)}`));

  let closing: Promise<void> | undefined;
  return {
    stats: () => ({ ...stats }),
    close: () =>
      (closing ??= (async () => {
        clearInterval(heartbeat);
        announce(true);
        discover.unsubscribe();
        // Stop taking messages, finish and answer those already taken, then close.
        await settleWithin(sub.drain(), CLOSE_GRACE_MS);
        await Promise.all(inFlight);
        await Promise.all(lateWork);
        await settleWithin(nc.drain(), CLOSE_GRACE_MS);
        if (!nc.isClosed()) await nc.close();
      })()),
  };
}

/**
 * Connects once NATS answers: a node started during an outage waits for it (tried every
 * RECONNECT_WAIT_MS, said once) rather than exit. A bad URL or credentials still fail at once.
 */
async function connectWhenUp(options: ConnectionOptions, warn: (msg: string) => void): Promise<NatsConnection> {
  for (let waiting = false; ; waiting = true) {
    try {
      return await connect(options);
    } catch (err) {
      if (!unreachable(err)) throw err;
      if (!waiting) warn(`cannot reach NATS at ${String(options.servers)} (${err instanceof Error ? err.message : String(err)}); waiting for it`);
      await sleep(RECONNECT_WAIT_MS);
    }
  }
}
