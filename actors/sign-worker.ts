// A piscina task: signs a whole batch of deliveries (actors/signer.ts). One task per batch, not
// per signature: a task costs ~70 µs of hand-off, a 300-byte signature ~5 µs (ARCHITECTURE).
// A fan-out signs one body for many endpoints, so each distinct body crosses to the thread once.

import { sign, type Signatures } from '../common/webhook-signature.js';

export interface SignBatch {
  bodies: string[];
  items: { id: string; t: number; body: number; secrets: string[] }[];
}

export default function signBatch(batch: SignBatch): Signatures[] {
  return batch.items.map((i) => sign({ id: i.id, t: i.t, body: batch.bodies[i.body]!, secrets: i.secrets }));
}
