// Batched signing for webhook fan-out (issue 5, ARCHITECTURE "Hot paths"). The dispatcher asks
// for a batch's signatures at once (a fan-out's first attempts, or one endpoint's due
// deliveries): inline when the batch is small (a piscina hand-off costs more than a few HMACs),
// otherwise split into pool tasks of TASK_SIZE deliveries, each answered as soon as it is signed.
// bench/webhook-signing.ts measures both sides of the threshold.

import { Buffer } from 'node:buffer';
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { sign, type Signatures, type SignTask } from '../common/webhook-signature.js';
import type { SignBatch } from './sign-worker.js';

/**
 * Bytes to HMAC (body × secrets × 2 schemes) below which a batch is signed inline. A pool task
 * costs about 50 µs of hand-off and HMAC about 8 ns a byte (bench/webhook-signing.ts), so below
 * ~6 KB inline is cheaper; 16 KiB keeps single small deliveries and retries inline.
 */
export const INLINE_BYTES = 16 * 1024;

/**
 * Deliveries per pool task: enough to pay for the hand-off many times over, few enough that the
 * first deliveries of a large fan-out go out while the pool still signs the rest.
 */
export const TASK_SIZE = 128;

export interface SignedPart {
  from: number;
  to: number;
  sigs: Promise<Signatures[]>;
}

/** Each distinct body once: structured clone copies a string per occurrence, not per value. */
export function toBatch(tasks: SignTask[]): SignBatch {
  const index = new Map<string | Uint8Array, number>();
  const bodies: string[] = [];
  const items = tasks.map((t) => {
    let at = index.get(t.body);
    if (at === undefined) {
      at = bodies.push(typeof t.body === 'string' ? t.body : Buffer.from(t.body).toString('utf8')) - 1;
      index.set(t.body, at);
    }
    return { id: t.id, t: t.t, body: at, secrets: t.secrets };
  });
  return { bodies, items };
}

export class Signer {
  private pool: Piscina | undefined;

  constructor(private readonly opts: { inlineBytes?: number; threads?: number } = {}) {}

  /** Signs `tasks` as one batch, in the pool or inline by size. */
  async signMany(tasks: SignTask[]): Promise<Signatures[]> {
    return (await Promise.all(this.parts(tasks).map((p) => p.sigs))).flat();
  }

  /**
   * The batch's signatures in consecutive parts, `tasks[from, to)` each: one inline, or one per
   * pool task of TASK_SIZE. A caller sending a fan-out starts each part's requests as it arrives.
   */
  parts(tasks: SignTask[]): SignedPart[] {
    const bytes = tasks.reduce((n, t) => n + t.body.length * t.secrets.length * 2, 0);
    if (bytes < (this.opts.inlineBytes ?? INLINE_BYTES)) return [{ from: 0, to: tasks.length, sigs: Promise.resolve(tasks.map(sign)) }];
    const pool = this.poolOf();
    const parts: SignedPart[] = [];
    for (let i = 0; i < tasks.length; i += TASK_SIZE) {
      parts.push({ from: i, to: i + TASK_SIZE, sigs: pool.run(toBatch(tasks.slice(i, i + TASK_SIZE))) as Promise<Signatures[]> });
    }
    return parts;
  }

  async close(): Promise<void> {
    await this.pool?.destroy();
    this.pool = undefined;
  }

  private poolOf(): Piscina {
    this.pool ??= new Piscina({
      filename: new URL('./sign-worker.js', import.meta.url).href,
      maxThreads: this.opts.threads ?? Math.max(1, availableParallelism() - 1),
      idleTimeout: 30_000,
    });
    return this.pool;
  }
}
