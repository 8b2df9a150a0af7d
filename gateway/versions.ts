// API versions on the wire (CONTRACT §9). The route table is declared once, under /v1; every
// route there is mounted again under /v2 with the version on the route, so both versions run
// the same handlers over the same actor state and differ only where a renderer asks
// `ctx.version` (money, in gateway/money.ts) and in the prefix of their links.

import type { JsonSchema, RouteDef } from './route.js';

export type ApiVersion = 'v1' | 'v2';
export const API_VERSIONS: readonly ApiVersion[] = ['v1', 'v2'];
export const LATEST: ApiVersion = 'v2';

/** '/v1/orders' → '/v2/orders' for v2; anything not under /v1 is left alone. */
export function versionPath(path: string, version: ApiVersion): string {
  return version !== 'v1' && (path.startsWith('/v1/') || path === '/v1') ? `/${version}${path.slice(3)}` : path;
}

/**
 * Every route under /v1/ (discovery routes aside: each version declares its own root and
 * OpenAPI document) plus its /v2 twin, which takes the route's `v2` overrides (body schema,
 * query parameters, response schema) where money is written or read differently.
 */
export function mountVersions(routes: readonly RouteDef[]): RouteDef[] {
  const out: RouteDef[] = [];
  for (const r of routes) {
    out.push(r);
    if (!r.path.startsWith('/v1/') || r.version !== undefined) continue;
    const { v2, ...rest } = r;
    out.push({ ...rest, ...v2, path: versionPath(r.path, 'v2'), version: 'v2' });
  }
  return out;
}

/**
 * A v1-shaped rendering's HAL links moved under `version`: only `href` members of `_links`
 * entries change, never a member the client wrote (metadata, notes), however it is spelled.
 */
export function relink(value: unknown, version: ApiVersion): unknown {
  if (version === 'v1' || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => relink(v, version));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (k === '_links' && v !== null && typeof v === 'object') {
      const links: Record<string, unknown> = {};
      for (const [rel, link] of Object.entries(v as Record<string, unknown>)) {
        // HAL allows a relation of several links (an article's `tag`): each moves.
        links[rel] = Array.isArray(link) ? link.map((l) => relinkOne(l, version)) : relinkOne(link, version);
      }
      out[k] = links;
    } else {
      out[k] = relink(v, version);
    }
  }
  return out;
}

function relinkOne(link: unknown, version: ApiVersion): unknown {
  return link !== null && typeof link === 'object' && typeof (link as { href?: unknown }).href === 'string'
    ? { ...(link as object), href: versionPath((link as { href: string }).href, version) }
    : link;
}

/** The schema twin for a version: v1 as declared, v2 from the override when there is one. */
export function forVersion<T extends JsonSchema>(version: ApiVersion, v1: T, v2: T): T {
  return version === 'v1' ? v1 : v2;
}

/** The part of a rendering-cache variant that names the API version, where bytes differ by version (money). */
export function apiVariant(v: ApiVersion): string {
  return v === 'v1' ? '' : `api=${v}`;
}
