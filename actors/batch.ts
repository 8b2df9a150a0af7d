// POST /orders/batch inside one partition (CONTRACT §7, SPEC §4.2): every operation is decided by
// the order actor in request order, each against the state the earlier ones left, so a batch
// that creates an order and then patches it works. The host runs the plan as one turn holding
// every key the batch names, and commits whatever it writes in one transaction.
//
// Partial: each operation stands alone; the failed ones change nothing.
// Atomic: one failure and nothing is written at all.

import { ApiError, toWire, underPointer } from '../common/errors.js';
import type { BatchOp, BatchOutcome, CommandOf, OrderRecord } from '../proto/messages.js';
import type { EventRecord } from '../proto/webhooks.js';
import type { Table, Write } from '../storage/store.js';
import { orderActor } from './orders.js';

export type BatchCommand = CommandOf<'order.batch'>;

export interface Plan {
  writes: Write<unknown>[];
  reply: unknown;
  /** Events to append to the outbox in the same transaction as `writes` (ARCHITECTURE 3). */
  events?: EventRecord[];
}

interface Slot {
  stored: OrderRecord | undefined;
  /** What the caller sees before the batch: another tenant's order is absent (CONTRACT §3). */
  visible: OrderRecord | undefined;
  current: OrderRecord | undefined;
}

/** The keys a batch turn must hold: every order it names, each once. */
export function batchKeys(cmd: BatchCommand): string[] {
  return [...new Set(cmd.ops.map((op) => op.id))];
}

function asCommand(cmd: BatchCommand, op: BatchOp): CommandOf<'order.create' | 'order.patch' | 'order.delete'> {
  const base = { tenant: cmd.tenant, partition: cmd.partition, id: op.id };
  switch (op.op) {
    case 'create':
      return { ...base, kind: 'order.create', input: op.input, items: op.items };
    case 'patch':
      return { ...base, kind: 'order.patch', ifMatch: op.ifMatch, patch: op.patch };
    case 'delete':
      return { ...base, kind: 'order.delete', ifMatch: op.ifMatch };
  }
}

export function planBatch(cmd: BatchCommand, orders: Table<OrderRecord>, now: number): Plan {
  const slots = new Map<string, Slot>();
  const outcomes: BatchOutcome[] = [];
  const events: EventRecord[] = [];
  for (const op of cmd.ops) {
    let slot = slots.get(op.id);
    if (!slot) {
      const stored = orders.get(op.id);
      // Another tenant's order does not exist for this caller (CONTRACT §3).
      const visible = stored && stored.tenant === cmd.tenant ? stored : undefined;
      slot = { stored, visible, current: visible };
      slots.set(op.id, slot);
    }
    try {
      if (op.op === 'create' && slot.stored && !slot.current) throw new ApiError('conflict', 'That id is taken.');
      const decision = orderActor.decide(asCommand(cmd, op), slot.current, now);
      slot.current = decision.next;
      if (decision.events) events.push(...decision.events);
      outcomes.push({ index: op.index, ok: true, id: op.id, version: decision.next?.version ?? null });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      // The order's pointers (`/metadata`) are placed inside the operation's body in the batch document.
      outcomes.push({ index: op.index, ok: false, error: underPointer(toWire(err), `/operations/${op.index}/body`) });
    }
  }
  const failed = outcomes.some((o) => !o.ok);
  const writes: Write<unknown>[] = [];
  if (!(cmd.atomic && failed)) {
    for (const [id, slot] of slots) {
      // Changed from what the caller saw, not from what is stored: a refused operation on another
      // tenant's order leaves `current` absent, and writing that back would delete their order.
      if (slot.current !== slot.visible) writes.push({ table: orders as Table<unknown>, id, before: slot.stored, after: slot.current });
    }
  }
  // A failed operation threw before its events were kept; an atomic batch that fails emits none.
  return { writes, reply: cmd.refused ? [...outcomes, ...cmd.refused] : outcomes, events: cmd.atomic && failed ? [] : events };
}
