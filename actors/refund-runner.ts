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

/**
 * Waits between processor attempts that failed; the last entry repeats. There is no last attempt:
 * a call that failed or timed out may still have moved the money, so only the processor's own
 * answer ends a refund. Failing it without one would free its amount for a second refund.
 */
export const BACKOFF_MS: readonly number[] = [1_000, 5_000, 30_000, 120_000, 600_000];
/** Jobs running at once on a node; more wait for the next resume pass. */
export const MAX_JOBS = 256;
/**
 * Failed calls in a row after which a job gives up its slot (the refund stays running, holding
 * its amount) and rests for the longest backoff before a resume pass takes it again: refunds a
 * processor keeps failing cannot hold every slot while others wait.
 */
export const YIELD_AFTER_FAILURES = 8;
/** Resting operations remembered; past it the oldest may be taken again sooner. */
const MAX_RESTING = 10_000;
/** A job that stopped on an error of ours (a commit refused, say) waits this long to run again. */
const AFTER_ERROR_MS = 60_000;
/** How long close() waits for jobs to stop before it lets go of them. */
const CLOSE_GRACE_MS = 2_000;

export interface RunnerDeps {
  tables: RefundTables;
  processor: RefundProcessor;
  retentionMs: number;
  /** How long one processor call may take before it counts as failed (and is asked again). */
  processorTimeoutMs: number;
  /** Pauses after failed calls (default BACKOFF_MS); tests shorten them. */
  backoffMs?: readonly number[];
  /** Jobs at once (default MAX_JOBS). */
  maxJobs?: number;
  /** A job ended, so there is room for one that waits: the host runs a resume pass. */
  onRoom?: () => void;
  /** Runs `plan` in the order's turn and commits what it writes, durably; resolves to the plan committed. */
  commit(orderId: string, kind: string, plan: (now: number) => Plan | undefined): Promise<Plan | undefined>;
  log: Logger;
}

export class RefundRunner {
  private readonly jobs = new Map<string, Promise<void>>();
  private readonly stop = new AbortController();
  /** Operations whose job gave up its slot: when they may run again, and the failures so far. */
  private readonly resting = new Map<string, { until: number; failures: number }>();

  /** Pauses after failed calls. */
  private readonly backoff: readonly number[];

  constructor(private readonly deps: RunnerDeps) {
    this.backoff = deps.backoffMs ?? BACKOFF_MS;
  }

  /** Room for more jobs right now. */
  get room(): number {
    return this.stop.signal.aborted ? 0 : (this.deps.maxJobs ?? MAX_JOBS) - this.jobs.size;
  }

  /**
   * Starts the job for an operation unless one runs already or the node is at MAX_JOBS (the next
   * resume pass takes it then); finished operations are ignored.
   */
  kick(op: Pick<OperationRecord, 'id' | 'orderId'>): void {
    if (this.jobs.has(op.id) || this.room <= 0) return;
    const resting = this.resting.get(op.id);
    if (resting !== undefined) {
      if (resting.until > Date.now()) return;
      this.resting.delete(op.id);
    }
    const job = this.run(op.id, op.orderId, resting?.failures ?? 0)
      .catch((err: unknown) => {
        // Left pending or running in LMDB: a resume pass picks it up again, after a rest (a pass
        // right away would meet the same error, again and again).
        if (this.stop.signal.aborted) return;
        this.deps.log.warn({ err, operation: op.id }, 'refund job stopped; it will be resumed');
        this.rest(op.id, AFTER_ERROR_MS, resting?.failures ?? 0);
      })
      .finally(() => {
        this.jobs.delete(op.id);
        if (!this.stop.signal.aborted) this.deps.onRoom?.();
      });
    this.jobs.set(op.id, job);
  }

  get active(): number {
    return this.jobs.size;
  }

  /**
   * Stops taking jobs and abandons the running ones where they are (a processor answer already in
   * hand is still committed); a restart resumes them. A processor that ignores the abort is let go
   * after a short grace: its job commits nothing more.
   */
  async close(): Promise<void> {
    this.stop.abort();
    await Promise.race([Promise.allSettled([...this.jobs.values()]), sleep(CLOSE_GRACE_MS, undefined, { ref: false })]);
  }

  /** Keeps `opId` from starting for `ms`, then asks for a resume pass. */
  private rest(opId: string, ms: number, failures: number): void {
    if (this.resting.size >= MAX_RESTING) this.resting.delete(this.resting.keys().next().value!);
    this.resting.set(opId, { until: Date.now() + ms, failures });
    setTimeout(() => this.stop.signal.aborted || this.deps.onRoom?.(), ms + 1).unref();
  }

  /** `failures`: the processor's failures in a row before this run (it rested after them). */
  private async run(opId: string, orderId: string, failures: number): Promise<void> {
    const { tables, processor, retentionMs, commit } = this.deps;
    for (let inRun = 0; ; ) {
      const started = await commit(orderId, 'refund.run', (now) => planRefundRun(opId, tables, now));
      const op = started?.reply as OperationRecord | undefined;
      const refund = op && tables.refunds.get(op.refundId);
      if (!op || !refund) return; // finished meanwhile, or gone
      // Stopping: the processor is not asked (a restart resumes the job).
      if (this.stop.signal.aborted) return;
      let outcome: ProcessorOutcome | undefined;
      // The timeout's own controller, held by its timer: Node 20's AbortSignal.any() holds an
      // AbortSignal.timeout() weakly, and one collected before it fires never aborts, so a call
      // that hangs would hold its job for good (nodejs/node#57736).
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(new DOMException('The payment processor did not answer in time.', 'TimeoutError')), this.deps.processorTimeoutMs).unref();
      try {
        const signal = AbortSignal.any([this.stop.signal, timeout.signal]);
        outcome = await untilAborted(processor.refund({ refundId: refund.id, orderId: refund.orderId, amount: refund.amount, currency: refund.currency }, signal), signal);
        clearTimeout(timer);
      } catch (err) {
        clearTimeout(timer);
        if (this.stop.signal.aborted) return;
        failures++;
        inRun++;
        // The operation stays running and the refund keeps holding its amount until the
        // processor answers; each failure is logged for the operator.
        this.deps.log.warn({ err, operation: opId, failures }, 'payment processor failed; retrying');
        // After YIELD_AFTER_FAILURES in a row, and then after each single failure, the job gives
        // up its slot; a resume pass after the longest backoff takes it up again.
        if (inRun >= YIELD_AFTER_FAILURES || failures > YIELD_AFTER_FAILURES) {
          this.rest(opId, this.backoff[this.backoff.length - 1]!, failures);
          return;
        }
      }
      if (outcome) {
        const result = outcome;
        // Committed even while stopping: the store closes only after the jobs are done.
        await commit(orderId, 'refund.finish', (now) => planRefundFinish(opId, result, tables, now, retentionMs));
        return;
      }
      await sleep(this.backoff[Math.min(failures - 1, this.backoff.length - 1)], undefined, { signal: this.stop.signal });
    }
  }
}

/** The work's result, or a rejection as soon as `signal` aborts, whether or not the work heeds it. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    // The work was started all the same: its failure, unheard, must not end the process.
    work.catch(() => undefined);
    return Promise.reject(signal.reason as Error);
  }
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
