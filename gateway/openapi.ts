// The OpenAPI 3.1 document, generated from the same route declarations that validate requests,
// so the document cannot drift from what the service accepts (STYLE 1).

import { PROBLEMS } from '../common/errors.js';
import type { RouteDef } from './route.js';

const problemSchema = {
  type: 'object',
  description: 'RFC 9457 problem details.',
  properties: {
    type: { type: 'string', description: '/problems/<slug>', enum: Object.keys(PROBLEMS).map((s) => `/problems/${s}`) },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    traceId: { type: 'string' },
    errors: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          pointer: { type: 'string' },
          parameter: { type: 'string' },
          header: { type: 'string' },
          index: { type: 'integer', description: 'A failed operation of an atomic batch.' },
          status: { type: 'integer' },
          type: { type: 'string' },
          detail: { type: 'string' },
        },
      },
    },
  },
  required: ['type', 'title', 'status', 'traceId'],
};

const IDEMPOTENCY_KEY = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description:
    'Makes the POST safe to retry: a repeat with the same key, method, path and body answers the first result with `Idempotent-Replayed: true`; ' +
    'another request under the key is 422 `idempotency-key-reused`; while the first still runs, 409 `idempotency-key-in-flight`.',
  schema: { type: 'string', minLength: 1, maxLength: 255 },
};

// Every answer carries the rate-limit fields, and any operation can be refused with 429
// (gateway/rate-limit.ts; draft-ietf-httpapi-ratelimit-headers-11 §3-4).
const rateLimitHeaders = {
  RateLimit: { $ref: '#/components/headers/RateLimit' },
  'RateLimit-Policy': { $ref: '#/components/headers/RateLimit-Policy' },
};
const componentHeaders = {
  RateLimit: {
    description: 'What is left of the caller\'s quota: `"default";r=<requests left>;t=<seconds until the quota is full again, or until the next request is allowed when r is 0>` (draft-ietf-httpapi-ratelimit-headers-11 §4).',
    schema: { type: 'string', examples: ['"default";r=1999;t=1'] },
  },
  'RateLimit-Policy': {
    description: 'The caller\'s quota: `"default";q=<burst>;w=<seconds to refill it>` (draft-ietf-httpapi-ratelimit-headers-11 §3).',
    schema: { type: 'string', examples: ['"default";q=2000;w=2'] },
  },
  'Retry-After': { description: 'Whole seconds until a request will be let through again.', schema: { type: 'integer', minimum: 1 } },
};
const tooManyRequests = {
  description: 'Rate limited: the caller\'s quota is used up (problem+json, `/problems/rate-limited`).',
  headers: { 'Retry-After': { $ref: '#/components/headers/Retry-After' }, ...rateLimitHeaders },
  content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
};

function problem(description: string): Record<string, unknown> {
  return { description, content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } };
}

export function openApiDocument(routes: readonly RouteDef[], prefix: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    if (!r.path.startsWith(`${prefix}/`) && r.path !== prefix) continue;
    const pathParams = [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
    const queryParams = Object.entries(r.query ?? {}).map(([name, q]) => ({ name, in: 'query', required: false, description: q.description, schema: q.schema }));
    const headerParams = r.method === 'POST' ? [IDEMPOTENCY_KEY] : [];
    const responses: Record<string, Record<string, unknown>> = {};
    for (const [status, description] of Object.entries(r.responses)) {
      const s = Number(status);
      if (s >= 400) responses[status] = problem(description);
      else if (s === 204 || s === 304 || !r.response) responses[status] = { description };
      else responses[status] = { description, content: { 'application/json': { schema: r.response }, 'application/hal+json': { schema: r.response } } };
    }
    // What every operation may answer, whatever it declares: a query parameter it does not take
    // or a repeated one is 400 (gateway/pipeline.ts parseQuery), an Accept it cannot meet 406.
    responses['400'] ??= problem('The request is malformed: an unknown or repeated query parameter, or a value out of its range (problem+json).');
    responses['406'] ??= problem(`None of the media types in Accept can be served: ${(r.produces ?? ['application/json', 'application/hal+json']).join(', ')} (problem+json).`);
    if (r.method === 'GET') {
      // Every read carries a strong ETag and answers If-None-Match (gateway/representation.ts).
      responses['304'] ??= { description: 'Not modified: a tag in If-None-Match is current. No body.' };
      // RFC 9110 §13.1.1: a read is conditional on If-Match too.
      responses['412'] ??= problem('No tag in If-Match is current (problem+json).');
    }
    if (r.scope) {
      responses['401'] = problem('Missing or invalid bearer token.');
      responses['403'] = problem(`The token lacks the ${r.scope} scope.`);
    }
    for (const response of Object.values(responses)) response.headers = rateLimitHeaders;
    responses['429'] = tooManyRequests;
    const op: Record<string, unknown> = {
      operationId: r.operationId,
      summary: r.summary,
      tags: [r.tag],
      security: r.scope ? [{ bearer: [r.scope] }] : [],
      parameters: [...pathParams, ...queryParams, ...headerParams],
      responses,
    };
    if (r.body) {
      const mediaTypes = r.body.mediaTypes ?? ['application/json'];
      op.requestBody = { required: r.body.required !== false, content: Object.fromEntries(mediaTypes.map((m) => [m, { schema: r.body!.schema }])) };
    }
    (paths[r.path] ??= {})[r.method.toLowerCase()] = op;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Orders API',
      version: prefix.slice(1),
      description: 'Resource-oriented JSON API. Errors are RFC 9457 problem details; see /problems/<slug>.',
    },
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
      schemas: { Problem: problemSchema },
      headers: componentHeaders,
    },
  };
}
