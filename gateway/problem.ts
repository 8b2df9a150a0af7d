// The one place errors become HTTP (STYLE 4): RFC 9457 problem+json with the trace id. An
// error that is not an ApiError is a bug: it is logged with its stack and answered 500 without
// any of it (SPEC §7.1 rule 2).

import { ApiError, PROBLEMS, type FieldError, type ProblemSlug } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import type { GatewayResponse } from './http-types.js';

export function problemResponse(err: unknown, traceId: string, log: Logger): GatewayResponse {
  const e = err instanceof ApiError ? err : new ApiError('internal', 'The request could not be completed.');
  if (!(err instanceof ApiError)) log.error({ err, traceId }, 'unhandled error');
  const body = problemBody(e.slug, e.detail, e.extra.errors);
  body.traceId = traceId;
  // Extension members (RFC 9457 §3.2), e.g. the successor of a retired endpoint.
  if (e.extra.members) for (const [k, v] of Object.entries(e.extra.members)) if (!(k in body)) body[k] = v;
  const headers: Record<string, string> = {
    'content-type': 'application/problem+json',
    'cache-control': 'no-store',
    'trace-id': traceId,
    ...e.extra.headers,
  };
  // CONTRACT §4 and §7: these three say "try again later", and say when.
  if ((e.status === 429 || e.status === 503 || e.slug === 'idempotency-key-in-flight') && !headers['retry-after']) headers['retry-after'] = '1';
  return { status: e.status, headers, body: JSON.stringify(body) };
}

/** An RFC 9457 problem as a JSON object: the answer to a failed request, or the `error` of a failed operation. */
export function problemBody(slug: ProblemSlug, detail: string, errors?: FieldError[]): Record<string, unknown> {
  const body: Record<string, unknown> = { type: `/problems/${slug}`, title: PROBLEMS[slug].title, status: PROBLEMS[slug].status, detail };
  if (errors) body.errors = errors;
  return body;
}
