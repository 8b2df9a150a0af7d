// Discovery and documentation: the root documents, the OpenAPI document, one page per problem
// type (CONTRACT §4: `type` URIs resolve), and the API guide. All public and cacheable.

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApiError, PROBLEMS, isProblemSlug } from '../../common/errors.js';
import { openApiDocument } from '../openapi.js';
import { type RouteDef, route } from '../route.js';
import { API_VERSIONS, LATEST, type ApiVersion } from '../versions.js';

const PUBLIC = 'public, max-age=300';

function projectFile(rel: string): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`cannot find the project root from ${import.meta.url}`);
    dir = up;
  }
  return join(dir, rel);
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function problemPage(slug: keyof typeof PROBLEMS): string {
  const p = PROBLEMS[slug];
  const doc = escapeHtml(p.doc).replace(/`([^`]+)`/g, '<code>$1</code>');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${p.title}</title></head>
<body><h1>${p.title}</h1><p>Type <code>/problems/${slug}</code>, HTTP status ${p.status}.</p><p>${doc}</p>
<p>Every problem body carries <code>type</code>, <code>title</code>, <code>status</code>, <code>detail</code> and <code>traceId</code>
(equal to the <code>Trace-Id</code> response header). Branch on <code>type</code>; never parse <code>detail</code>.</p>
<p><a href="/problems">All problem types</a></p></body></html>`;
}

function problemIndex(): string {
  const rows = Object.entries(PROBLEMS)
    .map(([slug, p]) => `<li><a href="/problems/${slug}"><code>${slug}</code></a> (${p.status}): ${p.title}</li>`)
    .join('\n');
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Problem types</title></head><body><h1>Problem types</h1><ul>${rows}</ul></body></html>`;
}

export function metaRoutes(allRoutes: () => readonly RouteDef[]): RouteDef[] {
  const openapi = new Map<ApiVersion, string>();
  return [
    route({
      method: 'GET',
      path: '/',
      operationId: 'versions',
      summary: 'The API versions this service offers.',
      tag: 'discovery',
      scope: undefined,
      responses: { 200: 'Links to each version root.' },
      async handle() {
        const versions = Object.fromEntries(API_VERSIONS.map((v) => [v, { href: `/${v}` }]));
        const body = {
          versions: API_VERSIONS,
          latest: LATEST,
          _links: { self: { href: '/' }, ...versions, deprecations: { href: '/v1/deprecations' }, docs: { href: '/docs' }, migration: { href: '/docs/migration-v1-v2' } },
        };
        return { status: 200, body, tag: 'content', cache: PUBLIC };
      },
    }),
    ...API_VERSIONS.flatMap((v) => [
      route({
        method: 'GET',
        path: `/${v}`,
        operationId: `root${v.toUpperCase()}`,
        summary: `The ${v} root document: links to every top-level collection, the OpenAPI document and the guide.`,
        tag: 'discovery',
        scope: undefined,
        version: v,
        responses: { 200: 'The root document.' },
        async handle() {
          const links = {
            self: { href: `/${v}` },
            orders: { href: `/${v}/orders` },
            products: { href: `/${v}/products` },
            users: { href: `/${v}/users` },
            teams: { href: `/${v}/teams` },
            articles: { href: `/${v}/articles` },
            refunds: { href: `/${v}/refunds` },
            webhookEndpoints: { href: `/${v}/webhook-endpoints` },
            events: { href: `/${v}/events` },
            eventTypes: { href: `/${v}/event-types` },
            deprecations: { href: `/${v}/deprecations` },
            openapi: { href: `/${v}/openapi.json` },
            docs: { href: '/docs' },
          };
          return { status: 200, body: { _links: links }, tag: 'content', cache: PUBLIC, versioned: true };
        },
      }),
      route({
        method: 'GET',
        path: `/${v}/openapi.json`,
        operationId: `openapi${v.toUpperCase()}`,
        summary: `The OpenAPI 3.1 document of ${v}.`,
        tag: 'discovery',
        scope: undefined,
        version: v,
        produces: ['application/json', 'application/vnd.oai.openapi+json'],
        responses: { 200: 'OpenAPI 3.1.' },
        async handle() {
          let doc = openapi.get(v);
          if (doc === undefined) openapi.set(v, (doc = JSON.stringify(openApiDocument(allRoutes(), `/${v}`))));
          return { status: 200, text: doc, tag: 'content', cache: PUBLIC, versioned: true };
        },
      }),
    ]),
    route({
      method: 'GET',
      path: '/problems',
      operationId: 'problemTypes',
      summary: 'Every problem type.',
      tag: 'discovery',
      scope: undefined,
      produces: ['text/html'],
      responses: { 200: 'An HTML index.' },
      async handle() {
        return { status: 200, text: problemIndex(), tag: 'content', cache: PUBLIC };
      },
    }),
    route({
      method: 'GET',
      path: '/problems/{slug}',
      operationId: 'problemType',
      summary: 'The page documenting one problem type.',
      tag: 'discovery',
      scope: undefined,
      produces: ['text/html'],
      responses: { 200: 'An HTML page.', 404: 'No such problem type.' },
      async handle(ctx) {
        const slug = ctx.params.slug ?? '';
        if (!isProblemSlug(slug)) throw new ApiError('not-found', 'There is no problem type with that name.');
        return { status: 200, text: problemPage(slug), tag: 'content', cache: PUBLIC };
      },
    }),
    markdownPage('/docs', 'guide', 'The API guide (Markdown).', 'docs/api-guide.md'),
    markdownPage('/docs/migration-v1-v2', 'migrationGuide', 'Moving from v1 to v2 (Markdown): the page deprecation links point at.', 'docs/migration-v1-v2.md'),
  ];
}

/** A Markdown document of docs/, read once and served as is. */
function markdownPage(path: string, operationId: string, summary: string, file: string): RouteDef {
  let text: string | undefined;
  return route({
    method: 'GET',
    path,
    operationId,
    summary,
    tag: 'discovery',
    scope: undefined,
    produces: ['text/markdown', 'text/plain'],
    responses: { 200: 'The document.' },
    async handle() {
      text ??= readFileSync(projectFile(file), 'utf8');
      return { status: 200, text, tag: 'content', cache: PUBLIC };
    },
  });
}
