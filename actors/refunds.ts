// Refunds and the operations that process them (CONTRACT §6 refund, §8).
//
// A refund, its operation and its order share the order's partition, and every change to any of
// them runs in the order's turn, so one transaction moves all three:
//
//   start   order holds the amount · refund pending · operation pending      (the 202)
//   run     operation running                                                (before the processor is called)
//   finish  succeeded: order refunded += amount (→ refunded when all of it) · refund succeeded
//           failed:    order releases the hold · refund failed · operation failed with its problem
//
// What is left to refund is total − refunded − held, so two refunds started side by side can
// never together exceed the order. The processor is called between `run` and `finish`, outside
// the turn, so a slow processor never blocks other writes to the order.

import { ApiError, type WireError } from '../common/errors.js';
import type { CommandOf, ListQuery, OperationRecord, OrderRecord, RefundRecord } from '../proto/messages.js';
import type { Table, Write } from '../storage/store.js';
import { type ActorDef, existing } from './actor.js';
import type { Plan } from './batch.js';
import { emit } from './events.js';
import { renderMoney } from '../gateway/money.js';

/** Refunds one order may take in its life: every one is a record and a processor call. */
export const MAX_REFUNDS_PER_ORDER = 100;
export const REFUND_SORTS = ['createdAt'] as const;

export interface RefundTables {
  orders: Table<OrderRecord>;
  refunds: Table<RefundRecord>;
  operations: Table<OperationRecord>;
}

export const refundActor: ActorDef<RefundRecord, CommandOf<'refund.get'>> = {
  table: {
    name: 'refunds',
    cached: true,
    indexKeys: (r) => [
      [r.tenant, r.orderId, 'createdAt', r.createdAt, r.id],
      [r.tenant, '*', 'createdAt', r.createdAt, r.id],
    ],
  },
  isRead: (cmd) => cmd.kind === 'refund.get',
  listPrefix: (q: ListQuery) => [q.tenant, q.filter ?? '*', q.sort],
  decide: (_cmd, current) => ({ next: current, reply: existing(current, 'refund') }),
};

const terminal = (op: OperationRecord): boolean => op.status === 'succeeded' || op.status === 'failed';

/** Finished and past OPERATION_RETENTION_HOURS: as good as swept, whether the sweep has come by or not. */
const pastRetention = (op: OperationRecord, now: number): boolean => terminal(op) && (op.expiresAt ?? 0) <= now;

export const operationActor: ActorDef<OperationRecord, CommandOf<'operation.get'>> = {
  table: {
    name: 'operations',
    cached: true,
    // Unfinished ones are found at start to be resumed; finished ones by when they are swept.
    indexKeys: (op) => (terminal(op) ? [['done', op.expiresAt ?? 0, op.id]] : [['open', op.createdAt, op.id]]),
  },
  isRead: (cmd) => cmd.kind === 'operation.get',
  listPrefix: () => {
    throw new Error('operations are not listed');
  },
  // The sweep runs now and then; a read in between must not show what retention has ended (CONTRACT §8).
  decide: (_cmd, current, now) => ({ next: current, reply: existing(current && !pastRetention(current, now) ? current : undefined, 'operation') }),
};

const orderLeft = (o: OrderRecord): number => o.total - (o.refunded ?? 0) - (o.refundHeld ?? 0);

/** Whether a refund of the order can start now: paid, something left that no refund holds, room for one more. */
export function refundable(o: OrderRecord): boolean {
  return o.status === 'paid' && orderLeft(o) > 0 && (o.refundCount ?? 0) < MAX_REFUNDS_PER_ORDER;
}

function write<T>(table: Table<T>, id: string, before: T | undefined, after: T | undefined): Write<unknown> {
  return { table: table as Table<unknown>, id, before, after };
}

/** Validates the start in the order's turn and writes the hold, the refund and the operation. */
export function planRefundStart(cmd: CommandOf<'refund.create'>, t: RefundTables, now: number): Plan {
  const stored = t.orders.get(cmd.orderId);
  const order = stored && stored.tenant === cmd.tenant ? stored : undefined;
  if (!order) {
    throw new ApiError('validation-failed', 'orderId names no order.', { errors: [{ pointer: '/orderId', detail: 'names no order' }] });
  }
  if (order.status !== 'paid') {
    const why = order.status === 'refunded' ? 'has been refunded in full' : `is ${order.status}`;
    throw new ApiError('invalid-state', `Only a paid order can be refunded; this one ${why}.`);
  }
  if ((order.refundCount ?? 0) >= MAX_REFUNDS_PER_ORDER) {
    throw new ApiError('invalid-state', `An order takes at most ${MAX_REFUNDS_PER_ORDER} refunds.`);
  }
  if (cmd.currency !== undefined && cmd.currency !== order.currency) {
    throw new ApiError('validation-failed', 'An amount cannot be used.', {
      errors: [{ pointer: '/amount/currency', detail: `must be ${order.currency}, the currency of the order` }],
    });
  }
  // A v2 client is answered in its terms: the amount is its money object's `amount`, written in
  // major units. (A gateway of the earlier release says so only by the currency of an amount.)
  const v2 = cmd.majorUnits === true || cmd.currency !== undefined;
  const pointer = v2 ? '/amount/amount' : '/amount';
  const shown = (minor: number): string => (v2 ? renderMoney(minor, order.currency).amount : String(minor));
  const left = orderLeft(order);
  if (left <= 0) {
    throw new ApiError('invalid-state', `Nothing is left to refund: ${shown(order.refundHeld ?? 0)} ${order.currency} is held by refunds still processing.`);
  }
  const amount = cmd.amount ?? left;
  if (amount <= 0) {
    throw new ApiError('validation-failed', 'A refund must be of more than nothing.', { errors: [{ pointer, detail: `must be at least ${shown(1)}` }] });
  }
  if (amount > left) {
    const held = order.refundHeld ? `, ${shown(order.refundHeld)} of it held by refunds still processing` : '';
    throw new ApiError('validation-failed', `The amount exceeds what is left to refund: ${shown(left)} ${order.currency}${held}.`, {
      errors: [{ pointer, detail: `must be at most ${shown(left)}` }],
    });
  }
  if (t.refunds.get(cmd.id) || t.operations.get(cmd.operationId)) throw new ApiError('conflict', 'That id is taken.');
  const refund: RefundRecord = {
    id: cmd.id,
    tenant: cmd.tenant,
    version: 1,
    orderId: order.id,
    amount,
    currency: order.currency,
    reason: cmd.reason,
    status: 'pending',
    operationId: cmd.operationId,
    failureReason: null,
    createdAt: now,
    updatedAt: now,
  };
  const op: OperationRecord = {
    id: cmd.operationId,
    tenant: cmd.tenant,
    version: 1,
    type: 'refund',
    status: 'pending',
    refundId: refund.id,
    orderId: order.id,
    error: null,
    attempts: 0,
    createdAt: now,
    updatedAt: now,
    finishedAt: null,
    expiresAt: null,
  };
  const held: OrderRecord = {
    ...order,
    refundHeld: (order.refundHeld ?? 0) + amount,
    refundCount: (order.refundCount ?? 0) + 1,
    version: order.version + 1,
    updatedAt: now,
  };
  return {
    writes: [write(t.orders, order.id, order, held), write(t.refunds, refund.id, undefined, refund), write(t.operations, op.id, undefined, op)],
    reply: op,
    events: [emit('refund.created', 'refund', refund, now)],
  };
}

/** pending → running, before the processor is called; undefined when there is nothing to run. */
export function planRefundRun(opId: string, t: RefundTables, now: number): Plan | undefined {
  const op = t.operations.get(opId);
  if (!op || terminal(op) || !t.refunds.get(op.refundId)) return undefined;
  const running: OperationRecord = { ...op, status: 'running', attempts: op.attempts + 1, version: op.version + 1, updatedAt: now };
  return { writes: [write(t.operations, op.id, op, running)], reply: running };
}

/** What the processor said: done, or refused with a problem. */
export type ProcessorOutcome = { ok: true } | { ok: false; error: WireError };

/**
 * running → succeeded or failed, moving the order's money and (when all of it is refunded) its
 * status. Undefined when the operation already finished: a finish is applied once.
 */
export function planRefundFinish(opId: string, outcome: ProcessorOutcome, t: RefundTables, now: number, retentionMs: number): Plan | undefined {
  const op = t.operations.get(opId);
  const refund = op && t.refunds.get(op.refundId);
  if (!op || !refund || op.status !== 'running') return undefined;
  const order = t.orders.get(op.orderId);
  const done = { finishedAt: now, expiresAt: now + retentionMs };
  if (!order) {
    // Cannot happen while paid and refunded orders refuse DELETE; if it did, end the job, loudly.
    const error: WireError = { code: 'internal', detail: 'The order of this refund no longer exists.' };
    const failedRefund: RefundRecord = { ...refund, updatedAt: now, status: 'failed', failureReason: error.detail, version: refund.version + 1 };
    const failedOp: OperationRecord = { ...op, updatedAt: now, ...done, status: 'failed', error, version: op.version + 1 };
    return {
      writes: [write(t.refunds, refund.id, refund, failedRefund), write(t.operations, op.id, op, failedOp)],
      reply: failedOp,
      events: [emit('refund.failed', 'refund', failedRefund, now)],
    };
  }
  const held = (order.refundHeld ?? 0) - refund.amount;
  if (held < 0) throw new Error(`refund ${refund.id} releases more than its order ${order.id} holds`);
  let nextOrder: OrderRecord;
  let nextRefund: RefundRecord;
  let nextOp: OperationRecord;
  if (outcome.ok) {
    const refunded = (order.refunded ?? 0) + refund.amount;
    const status = refunded >= order.total ? 'refunded' : order.status;
    nextOrder = { ...order, updatedAt: now, refundHeld: held, refunded, status, version: order.version + 1 };
    nextRefund = { ...refund, updatedAt: now, status: 'succeeded', version: refund.version + 1 };
    nextOp = { ...op, updatedAt: now, ...done, status: 'succeeded', version: op.version + 1 };
  } else {
    nextOrder = { ...order, updatedAt: now, refundHeld: held, version: order.version + 1 };
    nextRefund = { ...refund, updatedAt: now, status: 'failed', failureReason: outcome.error.detail, version: refund.version + 1 };
    nextOp = { ...op, updatedAt: now, ...done, status: 'failed', error: outcome.error, version: op.version + 1 };
  }
  const events = [emit(outcome.ok ? 'refund.succeeded' : 'refund.failed', 'refund', nextRefund, now)];
  if (nextOrder.status === 'refunded' && order.status !== 'refunded') events.push(emit('order.refunded', 'order', nextOrder, now));
  return {
    writes: [write(t.orders, order.id, order, nextOrder), write(t.refunds, refund.id, refund, nextRefund), write(t.operations, op.id, op, nextOp)],
    reply: nextOp,
    events,
  };
}

/** Removes a finished operation past its retention; the refund stays. */
export function planOperationSweep(opId: string, t: RefundTables, now: number): Plan | undefined {
  const op = t.operations.get(opId);
  if (!op || !pastRetention(op, now)) return undefined;
  return { writes: [write(t.operations, op.id, op, undefined)], reply: null };
}
