// A piscina task: signs a whole batch of deliveries (actors/signer.ts). One task per batch, not
// per signature: a task costs ~70 µs of hand-off, a 300-byte signature ~5 µs (ARCHITECTURE).

import { sign, type Signatures, type SignTask } from '../common/webhook-signature.js';

export default function signBatch(tasks: SignTask[]): Signatures[] {
  return tasks.map(sign);
}
