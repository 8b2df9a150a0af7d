// One resource record as an API version renders it in full (no fields, no expand): what a
// webhook event's `data` holds for an endpoint of that `apiVersion` (CONTRACT §6, §9). The HTTP
// routes render through the same functions, so an event and a GET of the same version agree.
// A resource whose shape differs by version adds its renderer here; money goes through
// gateway/money.ts renderMoney.

import type { OrderRecord, ProductRecord } from '../proto/messages.js';
import { renderOrderFor } from './resources/orders.js';
import { renderProduct } from './resources/products.js';
import { relink, type ApiVersion } from './versions.js';

interface Renderable {
  order: OrderRecord;
  product: ProductRecord;
}

const RENDERERS: { [K in keyof Renderable]: (record: Renderable[K], version: ApiVersion) => Record<string, unknown> } = {
  order: renderOrderFor,
  product: (p, v) => relink(renderProduct(p), v) as Record<string, unknown>,
};

export type RenderableKind = keyof Renderable;

export function renderRecord<K extends RenderableKind>(kind: K, record: Renderable[K], version: ApiVersion): Record<string, unknown> {
  return RENDERERS[kind](record, version);
}
