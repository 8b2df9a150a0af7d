// Runs refund operations in the background, on the node that owns their order (CONTRACT §8).
//
// Each job: mark the operation running (committed), call the payment processor outside any turn,
// then commit the outcome in the order's turn. Everything a job knows is in LMDB, so a job cut
// off by a crash is found again at start (the `open` index) and resumed: a pending one runs, a
// running one asks the processor again. The processor is idempotent per refund id (as real ones
// are per idempotency key), and the finish applies only to a running operation, so a resumed
// job moves the money once.

import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../common/log.js';
import type { OperationRecord } from '../proto/messages.js';
import type { Plan } from './batch.js';
import { planRefundFinish, planRefundRun, type ProcessorOutcome, type RefundTables } from './refunds.js';

export interface RefundRequest {
  refundId: string;
  orderId: string;
  amount: number;
  currency: string;
}

/** The payment processor: must be idempotent per `refundId`. Throwing means "try again later". */
export interface RefundProcessor {
  refund(req: RefundRequest, signal: AbortSignal): Promise<ProcessorOutcome>;
}

/** Stands in for a payment processor: answers success after `latencyMs` (REFUND_PROCESSING_MS). */
export function simulatedProcessor(latencyMs: number): RefundProcessor {
  return {
    async refund(_req, signal) {
      if (latencyMs > 0) await sleep(latencyMs, undefined, { signal });
      return { ok: true };
    },
  };
}

/** Waits between processor attempts that threw; the last entry repeats. */
const BACKOFF_MS = [1_000, 5_000, 30_000, 120_000, 600_000];
/** Processor calls before an operation fails as unavailable. */
export const MAX_ATTEMPTS = 8;

export interface RunnerDeps {
  tables: RefundTables;
  processor: RefundProcessor;
  retentionMs: number;
  /** Runs `plan` in the order's turn and commits what it writes, durably; resolves to the plan committed. */
  commit(orderId: string, kind: string, plan: (now: number) => Plan | undefined): Promise<Plan | undefined>;
  log: Logger;
}

export class RefundRunner {
  private readonly jobs = new Map<string, Promise<void>>();
  private readonly stop = new AbortController();

  constructor(private readonly deps: RunnerDeps) {}

  /** Starts the job for an operation unless one runs already; finished operations are ignored. */
  kick(op: Pick<OperationRecord, 'id' | 'orderId'>): void {
    if (this.jobs.has(op.id) || this.stop.signal.aborted) return;
    const job = this.run(op.id, op.orderId)
      .catch((err: unknown) => {
        // Left pending or running in LMDB: the next resume pass picks it up again.
        if (!this.stop.signal.aborted) this.deps.log.warn({ err, operation: op.id }, 'refund job stopped; it will be resumed');
      })
      .finally(() => this.jobs.delete(op.id));
    this.jobs.set(op.id, job);
  }

  get active(): number {
    return this.jobs.size;
  }

  /** Stops taking jobs and abandons the running ones where they are; a restart resumes them. */
  async close(): Promise<void> {
    this.stop.abort();
    await Promise.allSettled([...this.jobs.values()]);
  }

  private async run(opId: string, orderId: string): Promise<void> {
    const { tables, processor, retentionMs, commit } = this.deps;
    for (;;) {
      const started = await commit(orderId, 'refund.run', (now) => planRefundRun(opId, tables, now));
      const op = started?.reply as OperationRecord | undefined;
      const refund = op && tables.refunds.get(op.refundId);
      if (!op || !refund) return; // finished meanwhile, or gone
      let outcome: ProcessorOutcome | undefined;
      try {
        outcome = await processor.refund({ refundId: refund.id, orderId: refund.orderId, amount: refund.amount, currency: refund.currency }, this.stop.signal);
      } catch (err) {
        if (this.stop.signal.aborted) return;
        this.deps.log.warn({ err, operation: opId, attempt: op.attempts }, 'payment processor failed; retrying');
        if (op.attempts >= MAX_ATTEMPTS) {
          outcome = { ok: false, error: { code: 'unavailable', detail: `The payment processor could not be reached after ${op.attempts} attempts.` } };
        }
      }
      if (this.stop.signal.aborted) return;
      if (outcome) {
        const result = outcome;
        await commit(orderId, 'refund.finish', (now) => planRefundFinish(opId, result, tables, now, retentionMs));
        return;
      }
      await sleep(BACKOFF_MS[Math.min(op.attempts - 1, BACKOFF_MS.length - 1)], undefined, { signal: this.stop.signal });
    }
  }
}
