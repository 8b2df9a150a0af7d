// The gateway's half of Idempotency-Key (CONTRACT §7, draft-ietf-httpapi-idempotency-key-header):
// read and check the key, fingerprint the request, and tag the writes the request sends. The
// owner of the write keeps the result beside its effect (actors/host.ts), so any gateway can
// answer a retry; a gateway only caches answers it has replayed, a cache safe to lose
// (ARCHITECTURE property 4).

import { Buffer } from 'node:buffer';
import { hash } from 'node:crypto';
import { ApiError } from '../common/errors.js';
import { deepFreeze } from '../common/freeze.js';
import { partitionForPair } from '../common/ids.js';
import type { IdemTag, Result } from '../proto/messages.js';
import type { GatewayRequest } from './http-types.js';
import { BoundedMap } from '../common/bounded-map.js';

export const MAX_KEY_LENGTH = 255;

/** What joins repeated Idempotency-Key lines at the edge: a line feed, which no one line holds. */
export const REPEATED_LINE = '\n';

/**
 * The key from the header, or undefined when there is none. The draft defines the value as a
 * structured-field String (RFC 8941 §3.3.3), quoted; most clients send it bare, as Stripe
 * documents, so both are read. Printable ASCII only, 1 to 255 characters.
 */
export function parseIdempotencyKey(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  if (header.includes(REPEATED_LINE)) {
    throw new ApiError('malformed-request', 'Idempotency-Key must be sent once.', { errors: [{ header: 'Idempotency-Key', detail: 'must be sent once' }] });
  }
  let key = header.trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1).replace(/\\(["\\])/g, '$1');
  if (key.length === 0 || key.length > MAX_KEY_LENGTH || !/^[\x20-\x7e]+$/.test(key)) {
    throw new ApiError('malformed-request', `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} printable ASCII characters.`, {
      errors: [{ header: 'Idempotency-Key', detail: `must be 1 to ${MAX_KEY_LENGTH} printable ASCII characters` }],
    });
  }
  return key;
}

// The bytes a fingerprint hashes, laid out in one buffer kept for the purpose: hashed at once,
// they never outlive the call. A request too large for it gets a buffer of its own.
const FINGERPRINT_SCRATCH_BYTES = 16 * 1024;
const fingerprintScratch = Buffer.allocUnsafeSlow(FINGERPRINT_SCRATCH_BYTES);

/** Method, path, query, Content-Type and body bytes: a retry must repeat all of them to be a replay. */
export function idemTag(req: GatewayRequest, key: string): IdemTag {
  const head = requestHead(req);
  // UTF-8 takes at most 3 bytes per UTF-16 unit.
  const bound = 3 * head.length + (req.body?.length ?? 0);
  const bytes = bound <= FINGERPRINT_SCRATCH_BYTES ? fingerprintScratch : Buffer.allocUnsafe(bound);
  let length = bytes.write(head, 0, 'utf8');
  if (req.body) length += req.body.copy(bytes, length);
  // One-shot hash: about half the cost of a createHash object for the small bodies most POSTs carry.
  return { key, fingerprint: hash('sha256', bytes.subarray(0, length), 'base64url') };
}

/**
 * Where a keyed request creates its resource: a partition fixed by (tenant, key), so every retry
 * of it, through any gateway, reaches the same owner and meets the first one's result there.
 */
export function homePartition(tenant: string, key: string): number {
  return partitionForPair(tenant, key);
}

/** What a request must repeat, byte for byte, to be a retry (the fingerprint hashes the same). */
function requestHead(req: GatewayRequest): string {
  return `${req.method} ${req.path}?${req.query}\n${req.headers['content-type'] ?? ''}\n`;
}

interface Kept {
  tenant: string;
  method: string;
  path: string;
  query: string;
  contentType: string | undefined;
  body: Buffer | undefined;
  result: Result<unknown>;
  until: number;
}

/**
 * Answers kept under Idempotency-Keys, as the owner returned them to a retry, so the next retry
 * of the same request through this gateway needs neither a bus call nor a hash: the request's
 * bytes are compared instead. A kept answer never changes, so an entry cannot go stale; it lives
 * at most `entryMs`, and never past the owner's expiry of the key. Safe to lose (ARCHITECTURE
 * property 4); bounded in bytes, oldest first out (property 7).
 */
export class ReplayCache {
  // Keyed by the Idempotency-Key alone, the tenant checked in the entry: the header's string is
  // hashed once, where a key joined to the tenant would be built and hashed anew per request.
  // Two tenants that use the same key only take turns in the cache; neither is ever answered
  // with the other's entry.
  private readonly entries: BoundedMap<string, Kept>;

  constructor(
    private readonly budgetBytes = 16 * 1024 * 1024,
    private readonly entryMs = 60_000,
  ) {
    this.entries = new BoundedMap(budgetBytes);
  }

  /** The kept answer to exactly this request under (tenant, key), if this gateway has it. */
  get(tenant: string, key: string, req: GatewayRequest, now = Date.now()): Result<unknown> | undefined {
    const e = this.entries.get(key);
    if (!e || e.tenant !== tenant) return undefined;
    if (e.until <= now) {
      this.entries.delete(key);
      return undefined;
    }
    // Another request under the key goes to the owner, which answers 422. Compared member by
    // member: what requestHead joins for the fingerprint, without building it.
    if (e.method !== req.method || e.path !== req.path || e.query !== req.query || e.contentType !== req.headers['content-type']) return undefined;
    if (!(e.body && req.body ? e.body.equals(req.body) : e.body === req.body)) return undefined;
    return e.result;
  }

  set(tenant: string, key: string, req: GatewayRequest, result: Result<unknown>, now = Date.now()): void {
    const contentType = req.headers['content-type'];
    // Characters count two bytes; 200 bytes stand for the map entry and the objects around it.
    const chars = JSON.stringify(result).length + tenant.length + key.length + req.method.length + req.path.length + req.query.length + (contentType?.length ?? 0);
    const size = chars * 2 + (req.body?.length ?? 0) + 200;
    if (size > this.budgetBytes / 64) return; // one huge answer may not push out many small ones
    // Never past the owner's expiry of the key: after it, the owner would run the request anew.
    // Counted from now by what the owner said was left, not by its clock's `keptUntil`: this
    // gateway's clock may be behind the owner's. (An owner of an earlier build sends only that.)
    const left = result.keptForMs ?? (result.keptUntil === undefined ? Infinity : result.keptUntil - now);
    const until = now + Math.min(this.entryMs, left);
    // Frozen: every replay shares the answer, and renderings of it are kept on it.
    // Oldest first out once over the budget.
    const body = req.body ? keptCopy(req.body) : undefined;
    this.entries.set(key, { tenant, method: req.method, path: req.path, query: req.query, contentType, body, result: deepFreeze(result), until }, size);
  }
}

/**
 * A copy in memory of its own. Buffer.from of a small buffer is a slice of an 8 KiB pool block,
 * and a kept slice keeps the whole block alive: budgeted at the body's length, thousands of kept
 * bodies would hold megabytes more than the budget says.
 */
function keptCopy(body: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(body.length);
  body.copy(copy);
  return copy;
}
