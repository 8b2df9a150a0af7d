// The product actor: a catalogue entry whose price is the default unit price of new line items.

import { ApiError } from '../common/errors.js';
import { checkCurrencyChange } from '../common/currencies.js';
import type { CommandOf, ListQuery, ProductRecord } from '../proto/messages.js';
import { type ActorDef, existing, existingMatching } from './actor.js';

export const PRODUCT_SORTS = ['createdAt', 'price', 'name'] as const;

type ProductCommand = CommandOf<'product.create' | 'product.get' | 'product.patch' | 'product.delete'>;

export const productActor: ActorDef<ProductRecord, ProductCommand> = {
  table: {
    name: 'products',
    cached: true,
    indexKeys: (p) => [
      [p.tenant, '*', 'createdAt', p.createdAt, p.id],
      [p.tenant, '*', 'price', p.price, p.id],
      [p.tenant, '*', 'name', p.name, p.id],
    ],
  },

  isRead: (cmd) => cmd.kind === 'product.get',

  listPrefix: (q: ListQuery) => [q.tenant, '*', q.sort],

  decide(cmd, current, now) {
    switch (cmd.kind) {
      case 'product.get':
        return { next: current, reply: existing(current, 'product') };

      case 'product.create': {
        if (current) throw new ApiError('conflict', 'A product with that id already exists.');
        checkCurrencyChange(cmd.input.currency, undefined);
        const product: ProductRecord = { id: cmd.id, tenant: cmd.tenant, version: 1, ...cmd.input, createdAt: now, updatedAt: now };
        return { next: product, reply: product };
      }

      case 'product.patch': {
        const product = existingMatching(current, cmd, 'product');
        checkCurrencyChange(cmd.patch.currency, product.currency);
        const next: ProductRecord = { ...product, ...cmd.patch, version: product.version + 1, updatedAt: now };
        return { next, reply: next };
      }

      case 'product.delete': {
        existingMatching(current, cmd, 'product');
        return { next: undefined, reply: null };
      }
    }
  },
};
