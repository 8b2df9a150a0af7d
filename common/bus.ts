// The bus between gateway and actor host. Two implementations share this interface: the
// in-process bus of embedded mode (common/local-bus.ts) and NATS for cluster mode
// (common/nats-bus.ts). Nothing outside nats-bus.ts imports `nats` (STYLE 7).

import type { Command, Query, Result } from '../proto/messages.js';

/**
 * Whether a write may still start, settled once between a sender and a host in one process: the
 * sender's deadline and the write's turn race for it, and the first wins. A write that started
 * is awaited however long it then takes (a commit and its flush), so its sender never answers
 * 503 for a write that is applied; a write whose sender gave up never starts.
 */
export class Admission {
  private state: 'waiting' | 'started' | 'given up' = 'waiting';

  /** The write's turn begins: false when the sender has given up on it. */
  start(): boolean {
    if (this.state === 'given up') return false;
    this.state = 'started';
    return true;
  }

  /** The sender's deadline passed: false when the write has started and must be awaited. */
  giveUp(): boolean {
    if (this.state === 'started') return false;
    this.state = 'given up';
    return true;
  }
}

/** A bus that is closing refuses what it is given as a failure to retry (503 with Retry-After). */
export const CLOSING: Result<never> = { ok: false, error: { code: 'unavailable', detail: 'The service is shutting down.' } };

/** What an actor host offers to a bus: the same two calls the gateway makes. */
export interface ActorEndpoint {
  /**
   * Handles one command for a key this host owns. Never throws: errors come back as data. An
   * in-process sender passes `admission`; a write's turn then starts only if it wins it.
   */
  handle(cmd: Command, admission?: Admission): Promise<Result<unknown>>;
  /** Answers a query for the partitions this host owns. Never throws. */
  query(q: Query): Promise<Result<unknown>>;
  /**
   * Answers a read from committed state at once, or undefined when `cmd` is not such a read.
   * Reads need no turn, so an in-process caller skips the mailbox, the deadline and every
   * promise in between (ARCHITECTURE: reads are one hop).
   */
  read?(cmd: Command): Result<unknown> | undefined;
}

export interface Bus {
  /** Sends a command to the owner of cmd.partition. Resolves with data or a wire error. */
  send(cmd: Command): Promise<Result<unknown>>;
  /**
   * Answers a read at once when the owner is in this process (ActorEndpoint.read); undefined
   * when it must be sent. Absent on a bus whose owners are elsewhere.
   */
  read?(cmd: Command): Result<unknown> | undefined;
  /**
   * Whether a write to `partition` is kept by another store of Idempotency-Keys than the one
   * `home`'s owner keeps, so its key must be taken at home first. False when `partition` has no
   * owner: that write answers 503 unsent, and taking its key would only burn it. Absent: apart.
   */
  keptApart?(home: number, partition: number): boolean;
  /** Sends a query to every owner node and collects their answers (one per node). */
  scatter(q: Query): Promise<Result<unknown>[]>;
  close(): Promise<void>;
}
