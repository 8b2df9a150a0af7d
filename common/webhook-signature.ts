// Webhook signatures (SPEC §5, CONTRACT §10), for the sender and for receivers alike.
//
//   Service-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]
//     hex = HMAC-SHA256(key = the whole secret string "whsec_…", "<t>.<raw body>"), one v1 per
//     secret still valid after a rotation. This is Stripe's scheme: stripe.webhooks.constructEvent
//     accepts it.
//   webhook-id, webhook-timestamp, webhook-signature: v1,<base64>[ v1,<base64>…]
//     base64 = HMAC-SHA256(key = base64-decoded part after "whsec_", "<id>.<t>.<raw body>"): the
//     Standard Webhooks scheme, which the `standardwebhooks` packages verify.
//
// `verifyWebhook` is the receiver's check: recompute over the raw body, compare in constant
// time, refuse a timestamp outside the tolerance window (a replay), accept any of several v1.

import { Buffer } from 'node:buffer';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const SECRET_PREFIX = 'whsec_';

/** A new signing secret: `whsec_` and the base64 of 32 random bytes (CONTRACT §10). */
export function newSigningSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString('base64');
}

/** The key of the Standard Webhooks signature: the bytes the secret's base64 part names. */
export function standardKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64');
}

export interface SignTask {
  id: string;
  /** Unix seconds. */
  t: number;
  body: string | Uint8Array;
  secrets: string[];
}

/** The digests for one delivery: hex for Service-Signature, base64 for webhook-signature, per secret. */
export interface Signatures {
  v1: string[];
  standard: string[];
}

export function sign(task: SignTask): Signatures {
  const v1: string[] = [];
  const standard: string[] = [];
  const prefix = `${task.t}.`;
  const stdPrefix = `${task.id}.${task.t}.`;
  for (const secret of task.secrets) {
    v1.push(createHmac('sha256', secret).update(prefix).update(task.body).digest('hex'));
    standard.push(createHmac('sha256', standardKey(secret)).update(stdPrefix).update(task.body).digest('base64'));
  }
  return { v1, standard };
}

/** The signature headers of one delivery, given its digests. */
export function signatureHeaders(id: string, t: number, sig: Signatures): Record<string, string> {
  return {
    'service-signature': `t=${t},${sig.v1.map((h) => `v1=${h}`).join(',')}`,
    'service-event-id': id,
    'webhook-id': id,
    'webhook-timestamp': String(t),
    'webhook-signature': sig.standard.map((b) => `v1,${b}`).join(' '),
  };
}

export class WebhookVerificationError extends Error {}

export interface VerifyOptions {
  /** How far the signature's timestamp may be from now, either way (default 300 s, SPEC §8). */
  toleranceSeconds?: number;
  /** Unix seconds to check against; defaults to the clock. */
  now?: number;
}

type Headers = Record<string, string | string[] | undefined> | { get(name: string): string | null };

function header(headers: Headers, name: string): string | undefined {
  if (typeof (headers as { get?: unknown }).get === 'function') return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  const h = headers as Record<string, string | string[] | undefined>;
  const v = h[name] ?? Object.entries(h).find(([k]) => k.toLowerCase() === name)?.[1];
  return Array.isArray(v) ? v[0] : v;
}

function equalHex(a: string, b: string): boolean {
  const x = Buffer.from(a, 'utf8');
  const y = Buffer.from(b, 'utf8');
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * Checks a delivery's `Service-Signature` against `secret` over the raw, unparsed body, and
 * returns the parsed event. Throws WebhookVerificationError when the header is missing or
 * malformed, the timestamp is outside the window, or no `v1` matches. Answer such a request with
 * 400 and do not process it (SPEC §5). During a secret rotation, pass either secret: the sender
 * signs with both.
 *
 *   const event = verifyWebhook(rawBody, req.headers, process.env.WEBHOOK_SECRET!);
 */
export function verifyWebhook(rawBody: string | Uint8Array, headers: Headers, secret: string, { toleranceSeconds = 300, now }: VerifyOptions = {}): { id: string; type: string; created: string; apiVersion: string; data: unknown } {
  const value = header(headers, 'service-signature');
  if (!value) throw new WebhookVerificationError('No Service-Signature header.');
  let t: number | undefined;
  const candidates: string[] = [];
  for (const part of value.split(',')) {
    const at = part.indexOf('=');
    const k = part.slice(0, at).trim();
    const v = part.slice(at + 1).trim();
    if (k === 't' && /^\d{1,12}$/.test(v)) t = Number(v);
    else if (k === 'v1' && v) candidates.push(v);
  }
  if (t === undefined || !candidates.length) throw new WebhookVerificationError('The Service-Signature header is malformed.');
  const clock = now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(clock - t) > toleranceSeconds) throw new WebhookVerificationError('The signature timestamp is outside the tolerance window.');
  const expected = createHmac('sha256', secret).update(`${t}.`).update(rawBody).digest('hex');
  // Every candidate is compared, so the time taken does not tell which one matched.
  let ok = false;
  for (const c of candidates) ok = equalHex(c, expected) || ok;
  if (!ok) throw new WebhookVerificationError('No signature matches.');
  const text = typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody).toString('utf8');
  return JSON.parse(text) as ReturnType<typeof verifyWebhook>;
}
