// The order representation the baselines answer with: the shape of CONTRACT §6, so the bytes on
// the wire are comparable to what the service sends.
export interface OrderDoc {
  id: string;
  status: 'pending' | 'paid' | 'cancelled' | 'refunded';
  currency: string;
  total: number;
  customerId?: string;
  note?: string;
  metadata: Record<string, string>;
  createdAt: string;
  updatedAt: string;
  _links: Record<string, { href: string; method?: string }>;
}

export function orderLinks(id: string, status: OrderDoc['status']): OrderDoc['_links'] {
  const self = `/v1/orders/${id}`;
  const links: OrderDoc['_links'] = { self: { href: self }, items: { href: `${self}/items` } };
  if (status === 'pending') links.cancel = { href: `${self}/cancel`, method: 'POST' };
  return links;
}

export function sampleOrder(id = 'ord_01HZX3J8Q6V2K9D4M7N5P0R1ST'): OrderDoc {
  const at = '2025-01-15T10:20:30.123Z';
  return {
    id,
    status: 'pending',
    currency: 'EUR',
    total: 0,
    customerId: 'cus_42',
    metadata: {},
    createdAt: at,
    updatedAt: at,
    _links: orderLinks(id, 'pending'),
  };
}

export const ORDER_BODY = JSON.stringify({ currency: 'EUR', items: [] });
