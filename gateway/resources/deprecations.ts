// GET /v1/deprecations: the machine-readable schedule (issue 6 §3). Every non-active route with
// its state now, its dates, successor, guide and the brownouts still to come, so clients can
// automate their migration. Public: the schedule is the same for everyone.

import type { LifecycleRegistry } from '../lifecycle.js';
import { stateAt } from '../lifecycle.js';
import { type JsonSchema, type RouteDef, route } from '../route.js';

const entrySchema: JsonSchema = {
  type: 'object',
  properties: {
    method: { type: 'string' },
    path: { type: 'string', description: 'Route template, e.g. /v1/orders/{orderId}.' },
    state: { type: 'string', enum: ['deprecated', 'sunsetting', 'brownout', 'retired'], description: 'The state now: brownout while a window is open.' },
    deprecatedAt: { type: 'string', format: 'date-time' },
    sunsetAt: { type: ['string', 'null'], format: 'date-time' },
    successor: { type: ['string', 'null'] },
    guide: { type: ['string', 'null'] },
    brownouts: {
      type: 'array',
      description: 'Windows not yet over, earliest first; each answers 410 while open.',
      items: { type: 'object', properties: { start: { type: 'string', format: 'date-time' }, end: { type: 'string', format: 'date-time' } } },
    },
  },
};

export function deprecationsRoute(registry: LifecycleRegistry | undefined): RouteDef {
  return route({
    method: 'GET',
    path: '/v1/deprecations',
    operationId: 'listDeprecations',
    summary: 'Every deprecated, sunsetting, browned-out or retired route, with dates, successor, guide and upcoming brownouts.',
    tag: 'lifecycle',
    scope: undefined,
    responses: { 200: 'The schedule.' },
    response: { type: 'object', properties: { data: { type: 'array', items: entrySchema } } },
    async handle() {
      const now = registry?.now() ?? Date.now();
      const data = (registry?.compiled() ?? []).map((c) => ({
        method: c.entry.method,
        path: c.entry.path,
        state: stateAt(c, now),
        deprecatedAt: c.entry.deprecatedAt,
        sunsetAt: c.entry.sunsetAt ?? null,
        successor: c.entry.successor ?? null,
        guide: c.entry.guide ?? null,
        brownouts: (c.entry.brownouts ?? []).filter((b) => Date.parse(b.end) > now).sort((a, b) => Date.parse(a.start) - Date.parse(b.start)),
      }));
      data.sort((a, b) => a.path.localeCompare(b.path) || a.method.localeCompare(b.method));
      return { status: 200, body: { data, _links: { self: { href: '/v1/deprecations' } } }, tag: 'content', cache: 'public, max-age=60' };
    },
  });
}
