// The order actor: an order, its line items (children live with their parent, ARCHITECTURE
// property 6) and its state machine:
//
//   pending ──pay (total > 0)──▶ paid ──refund (full)──▶ refunded
//      └──────cancel──────────▶ cancelled
//
// Items are added only while pending. Currency changes only while pending (item prices are
// minor units of it). A paid or refunded order cannot be deleted: money has moved.

import { ApiError } from '../common/errors.js';
import { checkCurrencyChange } from '../common/currencies.js';
import type { CommandOf, OrderRecord, ItemRecord, OrderInput, OrderPatch, ListQuery } from '../proto/messages.js';
import { type ActorDef, existing, existingMatching } from './actor.js';
import { emit } from './events.js';

export const MAX_ITEMS_PER_ORDER = 100;
export const MAX_METADATA_KEYS = 50;
export const ORDER_SORTS = ['createdAt', 'total'] as const;

type OrderCommand = CommandOf<
  'order.create' | 'order.get' | 'order.replace' | 'order.patch' | 'order.delete' | 'order.pay' | 'order.cancel' | 'order.addItem'
>;

function invalidState(detail: string): ApiError {
  return new ApiError('invalid-state', detail);
}

function totalOf(items: ItemRecord[]): number {
  let sum = 0;
  for (const i of items) sum += i.quantity * i.unitPrice;
  return sum;
}

function bump(order: OrderRecord, changes: Partial<OrderRecord>, now: number): OrderRecord {
  const next = { ...order, ...changes, version: order.version + 1, updatedAt: now };
  next.total = totalOf(next.items);
  return next;
}

function guardCurrency(order: OrderRecord, currency: string | undefined): void {
  if (currency === undefined || currency === order.currency) return;
  checkCurrencyChange(currency, order.currency);
  if (order.status !== 'pending') throw invalidState(`The currency of a ${order.status} order cannot change.`);
  // Item prices are minor units of the order's currency: another currency would reread them.
  if (order.items.length > 0) throw invalidState('The currency of an order with items cannot change: their prices are in its currency.');
}

function mergeMetadata(base: Record<string, string>, patch: Record<string, string | null> | null): Record<string, string> {
  if (patch === null) return {};
  const out: Record<string, string> = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

function applyPatch(order: OrderRecord, patch: OrderPatch): Partial<OrderRecord> {
  const changes: Partial<OrderRecord> = {};
  if (patch.currency !== undefined) changes.currency = patch.currency;
  if (patch.customerId !== undefined) changes.customerId = patch.customerId;
  if (patch.note !== undefined) changes.note = patch.note;
  if (patch.metadata !== undefined) {
    changes.metadata = mergeMetadata(order.metadata, patch.metadata);
    // Each patch is bounded by its schema; the merged map must be bounded too.
    if (Object.keys(changes.metadata).length > MAX_METADATA_KEYS) {
      throw new ApiError('validation-failed', `An order holds at most ${MAX_METADATA_KEYS} metadata keys.`, {
        errors: [{ pointer: '/metadata', detail: `would hold more than ${MAX_METADATA_KEYS} keys` }],
      });
    }
  }
  return changes;
}

function replaceWith(input: OrderInput): Partial<OrderRecord> {
  const { currency, customerId, note, metadata } = input;
  return { currency, customerId, note, metadata };
}

export const orderActor: ActorDef<OrderRecord, OrderCommand> = {
  table: {
    name: 'orders',
    cached: true,
    indexKeys: (o) => {
      const keys: (string | number)[][] = [];
      for (const status of [o.status, '*']) {
        keys.push([o.tenant, status, 'createdAt', o.createdAt, o.id]);
        keys.push([o.tenant, status, 'total', o.total, o.id]);
      }
      return keys;
    },
  },

  isRead: (cmd) => cmd.kind === 'order.get',

  listPrefix: (q: ListQuery) => [q.tenant, q.filter ?? '*', q.sort],

  slim: (o) => ({ ...o, items: [] }),

  decide(cmd, current, now) {
    switch (cmd.kind) {
      case 'order.get':
        return { next: current, reply: existing(current, 'order') };

      case 'order.create': {
        if (current) throw new ApiError('conflict', 'An order with that id already exists.');
        checkCurrencyChange(cmd.input.currency, undefined);
        const items: ItemRecord[] = cmd.items.map((i) => ({ ...i, createdAt: now, updatedAt: now }));
        const order: OrderRecord = {
          id: cmd.id,
          tenant: cmd.tenant,
          version: 1,
          status: 'pending',
          ...cmd.input,
          items,
          total: totalOf(items),
          createdAt: now,
          updatedAt: now,
        };
        return { next: order, reply: order, events: [emit('order.created', 'order', order, now)] };
      }

      case 'order.replace': {
        const order = existingMatching(current, cmd, 'order');
        guardCurrency(order, cmd.input.currency);
        const next = bump(order, replaceWith(cmd.input), now);
        return { next, reply: next, events: [emit('order.updated', 'order', next, now)] };
      }

      case 'order.patch': {
        const order = existingMatching(current, cmd, 'order');
        guardCurrency(order, cmd.patch.currency);
        const next = bump(order, applyPatch(order, cmd.patch), now);
        return { next, reply: next, events: [emit('order.updated', 'order', next, now)] };
      }

      case 'order.delete': {
        const order = existingMatching(current, cmd, 'order');
        if (order.status === 'paid' || order.status === 'refunded') {
          throw invalidState(`A ${order.status} order cannot be deleted; refund it instead.`);
        }
        return { next: undefined, reply: null, events: [emit('order.deleted', 'order', order, now)] };
      }

      case 'order.pay': {
        const order = existingMatching(current, cmd, 'order');
        if (order.status !== 'pending') throw invalidState(`A ${order.status} order cannot be paid.`);
        if (order.total <= 0) throw invalidState('An order with a total of 0 cannot be paid.');
        const next = bump(order, { status: 'paid' }, now);
        return { next, reply: next, events: [emit('order.paid', 'order', next, now)] };
      }

      case 'order.cancel': {
        const order = existingMatching(current, cmd, 'order');
        if (order.status !== 'pending') throw invalidState(`A ${order.status} order cannot be cancelled.`);
        const next = bump(order, { status: 'cancelled' }, now);
        return { next, reply: next, events: [emit('order.cancelled', 'order', next, now)] };
      }

      case 'order.addItem': {
        const order = existingMatching(current, cmd, 'order');
        if (order.status !== 'pending') throw invalidState(`Items can be added only while the order is pending; it is ${order.status}.`);
        // The gateway priced the item in the currency it read; a change since then voids that price.
        if (order.currency !== cmd.currency) throw new ApiError('conflict', 'The order changed currency while the item was being priced; retry.', { retry: true });
        if (order.items.length >= MAX_ITEMS_PER_ORDER) {
          throw new ApiError('invalid-state', `An order holds at most ${MAX_ITEMS_PER_ORDER} items.`);
        }
        const item: ItemRecord = { ...cmd.item, createdAt: now, updatedAt: now };
        const next = bump(order, { items: [...order.items, item] }, now);
        return { next, reply: next, events: [emit('order.updated', 'order', next, now)] };
      }
    }
  },
};
