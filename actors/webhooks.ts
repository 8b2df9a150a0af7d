// The webhook endpoint actor (CONTRACT §6 and §10). Endpoints live in their tenant's partition
// (common/ids.ts partitionFor), like users: the dispatcher on any node finds a tenant's
// endpoints at one owner with one read. Secrets are minted by the gateway (decisions stay pure)
// and are kept here; only the create and rotate answers ever show one.

import { BoundedMap } from '../common/bounded-map.js';
import { ApiError } from '../common/errors.js';
import type { CommandOf, ListQuery } from '../proto/messages.js';
import type { DeliveryRecord, EndpointRecord, SigningSecret } from '../proto/webhooks.js';
import type { Store, Table, TableSpec } from '../storage/store.js';
import { type ActorDef, existing, existingMatching } from './actor.js';
import { emit } from './events.js';

/** Most endpoints one tenant may register (ARCHITECTURE 7: fan-out is bounded). */
export const MAX_ENDPOINTS_PER_TENANT = 1000;

type EndpointCommand = CommandOf<'webhook.create' | 'webhook.get' | 'webhook.patch' | 'webhook.delete' | 'webhook.rotate' | 'webhook.test' | 'webhook.disable'>;

export const ENDPOINTS: TableSpec<EndpointRecord> = { name: 'webhook-endpoints', indexKeys: (e) => [[e.tenant, '*', 'createdAt', e.createdAt, e.id]] };

/** Index prefix of one tenant's endpoints, oldest first. */
function endpointsPrefix(tenant: string): (string | number)[] {
  return [tenant, '*', 'createdAt'];
}

/** Endpoint records kept in memory across the tenants a node owns (a tenant holds at most 1,000). */
const OWNED_ENDPOINTS_KEPT = 50_000;

/**
 * The endpoints of tenants this node owns, read from its LMDB and kept with the endpoints table's
 * stamp then: good until that table next changes (a create, patch, delete, rotation or disable).
 * The host asks whether a tenant has any (does an event need an outbox row?), the dispatcher
 * fans out to them; both share one read. The records are never changed. Weighed by endpoint.
 */
export class OwnedEndpoints {
  private readonly kept = new BoundedMap<string, { stamp: number; endpoints: EndpointRecord[] }>(OWNED_ENDPOINTS_KEPT);

  constructor(
    private readonly store: Store,
    private readonly table: Table<EndpointRecord>,
  ) {}

  /** The tenant's endpoints, oldest first. Only for a tenant whose partition this node owns. */
  of(tenant: string): EndpointRecord[] {
    const stamp = this.table.quietStamp;
    const known = stamp === undefined ? undefined : this.kept.get(tenant);
    if (known && known.stamp === stamp) return known.endpoints;
    const rows = this.store.scan(this.table as Table<unknown>, { prefix: endpointsPrefix(tenant), after: undefined, reverse: false, limit: MAX_ENDPOINTS_PER_TENANT });
    const endpoints = rows.flatMap(({ id }) => {
      const e = this.table.get(id);
      return e && e.tenant === tenant ? [e] : [];
    });
    if (stamp !== undefined) this.kept.set(tenant, { stamp, endpoints }, endpoints.length + 1);
    return endpoints;
  }
}

/** The secrets that still sign at `now`, current first. */
export function liveSecrets(e: EndpointRecord, now: number): string[] {
  return e.secrets.filter((s) => s.expiresAt === undefined || s.expiresAt > now).map((s) => s.secret);
}

/** Whether an endpoint wants an event of `type`. */
export function wants(e: EndpointRecord, type: string): boolean {
  return e.status === 'enabled' && (e.eventTypes.includes('*') || e.eventTypes.includes(type));
}

function bump(e: EndpointRecord, changes: Partial<EndpointRecord>, now: number): EndpointRecord {
  return { ...e, ...changes, version: e.version + 1, updatedAt: now };
}

export const endpointActor: ActorDef<EndpointRecord, EndpointCommand> = {
  table: ENDPOINTS,
  isRead: (cmd) => cmd.kind === 'webhook.get',
  listPrefix: (q: ListQuery) => endpointsPrefix(q.tenant),
  decide(cmd, current, now) {
    switch (cmd.kind) {
      case 'webhook.get':
        return { next: current, reply: existing(current, 'webhook endpoint') };
      case 'webhook.create': {
        if (current) throw new ApiError('conflict', 'A webhook endpoint with that id already exists.');
        const e: EndpointRecord = {
          id: cmd.id,
          tenant: cmd.tenant,
          version: 1,
          ...cmd.input,
          status: 'enabled',
          disabledReason: null,
          enabledAt: now,
          secrets: [{ secret: cmd.secret }],
          createdAt: now,
          updatedAt: now,
        };
        return { next: e, reply: e };
      }
      case 'webhook.patch': {
        const e = existingMatching(current, cmd, 'webhook endpoint');
        const { status, ...rest } = cmd.patch;
        const changes: Partial<EndpointRecord> = { ...rest };
        if (status !== undefined && status !== e.status) {
          changes.status = status;
          changes.disabledReason = status === 'disabled' ? 'manual' : null;
          if (status === 'enabled') changes.enabledAt = now;
        }
        const next = bump(e, changes, now);
        return { next, reply: next };
      }
      case 'webhook.delete':
        existingMatching(current, cmd, 'webhook endpoint');
        return { next: undefined, reply: null };
      case 'webhook.rotate': {
        const e = existingMatching(current, cmd, 'webhook endpoint');
        // The old secret, the one this rotation replaces, keeps signing beside the new one
        // (CONTRACT §10); any older one stops now. Kept too, each rotation would add a signature
        // to every delivery and a secret to the record: 500 rotations in a day made a
        // 34 kB Service-Signature.
        const [old] = e.secrets;
        const kept: SigningSecret[] = old ? [{ secret: old.secret, expiresAt: Math.min(old.expiresAt ?? Infinity, now + cmd.keepOldMs) }] : [];
        const next = bump(e, { secrets: [{ secret: cmd.secret }, ...kept] }, now);
        return { next, reply: next };
      }
      case 'webhook.test': {
        const e = existing(current, 'webhook endpoint');
        if (e.status === 'disabled') throw new ApiError('invalid-state', 'The endpoint is disabled: PATCH status to enabled first; a ping to it would not be sent.');
        const ping = emit('ping', 'ping', { id: e.id, tenant: e.tenant }, now, e.id);
        return { next: current, reply: ping, events: [ping] };
      }
      case 'webhook.disable': {
        const e = existing(current, 'webhook endpoint');
        // The verdict was reached on the record a delivery started with. Changed since (re-enabled
        // while the delivery was in flight, or its URL changed), the endpoint is not the one
        // judged: its next failure judges it again, on its clock from its re-enable. A command from
        // a node not yet upgraded carries no version: it is taken as about the endpoint as it is,
        // or a rolling upgrade would leave endpoints those nodes judge never disabled.
        if (e.status === 'disabled' || (cmd.version !== undefined && e.version !== cmd.version)) return { next: current, reply: e };
        const next = bump(e, { status: 'disabled', disabledReason: cmd.reason }, now);
        return { next, reply: next };
      }
    }
  },
};

// Deliveries are kept in the partition of their event, by the node that dispatches it. Pending
// ones are also indexed by endpoint and due time: each endpoint's worker reads them in retry order.
const PENDING = '\u0000pending';
const SETTLED = '\u0000settled';

export const DELIVERIES: TableSpec<DeliveryRecord> = {
  name: 'webhook-deliveries',
  indexKeys: (d) => {
    const keys: (string | number)[][] = [[d.tenant, d.endpointId, 'createdAt', d.createdAt, d.id]];
    if (d.status === 'pending' && d.nextAttemptAt !== undefined) keys.push([PENDING, d.endpointId, d.nextAttemptAt, d.id]);
    // Settled ones are kept as long as events, then swept oldest first (actors/event-sweep.ts).
    else if (d.status !== 'pending') keys.push([SETTLED, d.updatedAt, d.id]);
    return keys;
  },
};

/** Index prefix of the pending deliveries (of one endpoint, when named), due time first. */
export function pendingPrefix(endpointId?: string): (string | number)[] {
  return endpointId === undefined ? [PENDING] : [PENDING, endpointId];
}

/** Index prefix of the settled deliveries, oldest settled first. */
export const SETTLED_DELIVERIES: (string | number)[] = [SETTLED];

/** Lists deliveries of one endpoint (the query's filter), newest first by default. */
export const deliveryActor: ActorDef<DeliveryRecord, never> = {
  table: DELIVERIES,
  isRead: () => true,
  listPrefix: (q: ListQuery) => [q.tenant, q.filter ?? '', 'createdAt'],
  decide: () => {
    throw new Error('deliveries are written by the dispatcher');
  },
};
