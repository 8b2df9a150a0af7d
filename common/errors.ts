// The one catalogue of problem types (CONTRACT §4). Code throws ApiError with a slug; exactly one
// function (gateway/problem.ts) turns errors into HTTP. Slugs are never renamed: clients branch
// on `type`.

export const PROBLEMS = {
  'malformed-request': {
    status: 400,
    title: 'Malformed request',
    doc: 'The request could not be read: bad JSON, JSON nested too deep, a member named `__proto__` or a `constructor` holding `prototype`, invalid UTF-8, or a bad header. When the message framing is at fault (`Content-Length` and `Transfer-Encoding` together, a repeated or non-decimal `Content-Length`), the connection is closed after the answer.',
  },
  'invalid-parameter': { status: 400, title: 'Invalid parameter', doc: 'A query parameter is unknown, out of range, or not allowed here. `errors[].parameter` names each one.' },
  'validation-failed': { status: 422, title: 'Validation failed', doc: 'The body is well-formed JSON but breaks the resource schema. `errors[]` has one entry per invalid member, with an RFC 6901 `pointer`.' },
  unauthenticated: { status: 401, title: 'Unauthenticated', doc: 'The bearer token is missing, malformed, badly signed or expired. Send `Authorization: Bearer <token>`.' },
  forbidden: { status: 403, title: 'Forbidden', doc: 'The token is valid but lacks the scope this operation needs; `detail` names the scope.' },
  'not-found': { status: 404, title: 'Not found', doc: 'No such resource in your tenant. Resources of other tenants are answered the same way.' },
  'method-not-allowed': { status: 405, title: 'Method not allowed', doc: 'The resource exists but does not support this method. The `Allow` header lists those it does.' },
  'not-acceptable': { status: 406, title: 'Not acceptable', doc: 'None of the media types in `Accept` can be served. Use `application/json` or `application/hal+json`.' },
  conflict: { status: 409, title: 'Conflict', doc: 'The request conflicts with existing state, such as a duplicate.' },
  'invalid-state': { status: 409, title: 'Invalid state', doc: 'The resource is not in a state that allows this action (for example paying a cancelled order).' },
  gone: { status: 410, title: 'Gone', doc: 'The endpoint is retired, or in a scheduled brownout ahead of its retirement. The problem names the successor in `successor` (for this request) and says which in `lifecycle` (`retired` or `brownout`); the `Link` header carries `rel="successor-version"` and `rel="deprecation"` (the migration guide). `GET /v1/deprecations` lists the schedule.' },
  'precondition-failed': { status: 412, title: 'Precondition failed', doc: 'The `If-Match` entity tag does not match the current representation. GET it again and retry.' },
  'length-required': {
    status: 411,
    title: 'Length required',
    doc: 'A request body must be sent with `Content-Length`. `Transfer-Encoding` (a chunked body) is not accepted; the connection is closed after the answer.',
  },
  'payload-too-large': { status: 413, title: 'Payload too large', doc: 'The body or the batch exceeds the configured limit.' },
  'unsupported-media-type': { status: 415, title: 'Unsupported media type', doc: 'Send bodies as `application/json` (or `application/merge-patch+json` for PATCH).' },
  'uri-too-long': {
    status: 414,
    title: 'URI too long',
    doc: 'The request target (path and query) is longer than the server takes; `detail` gives the limit. The connection is closed after the answer. Ask for less in the query (fewer `fields` or `expand` paths).',
  },
  'request-header-fields-too-large': {
    status: 431,
    title: 'Request header fields too large',
    doc: 'The request line and headers together are larger than the server takes; `detail` gives the limit. The connection is closed after the answer. Send fewer or shorter headers.',
  },
  'idempotency-key-reused': { status: 422, title: 'Idempotency key reused', doc: 'The `Idempotency-Key` was first used for a different method, path or body.' },
  'idempotency-key-in-flight': { status: 409, title: 'Idempotency key in flight', doc: 'A request with this `Idempotency-Key` is still running. Retry after `Retry-After` seconds.' },
  'refund-declined': {
    status: 402,
    title: 'Refund declined',
    doc: 'The payment processor refused the refund. It appears as the `error` of the refund\'s operation; the amount is free to refund again.',
  },
  'rate-limited': { status: 429, title: 'Rate limited', doc: 'Too many requests for this principal. Retry after `Retry-After` seconds.' },
  internal: { status: 500, title: 'Internal error', doc: 'An unexpected failure. Quote the `traceId` when reporting it.' },
  unavailable: { status: 503, title: 'Service unavailable', doc: 'The service is overloaded or a dependency is down. Retry after `Retry-After` seconds.' },
} as const satisfies Record<string, { status: number; title: string; doc: string }>;

export type ProblemSlug = keyof typeof PROBLEMS;

export interface FieldError {
  pointer?: string;
  parameter?: string;
  /** A request header, for problems with a header's value. */
  header?: string;
  /** A batch operation, for a failed atomic batch: its index, status and problem type. */
  index?: number;
  status?: number;
  type?: string;
  detail: string;
}

/**
 * A problem to answer the client with: an expected outcome, never logged with a stack (only
 * errors that are not ApiErrors are: gateway/problem.ts). So it captures none. Capturing one walks
 * every frame and describes each optimized one anew; a flood of refusals (429, 404), the answers
 * meant to be cheapest, spent a fifth of its CPU there.
 */
export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly slug: ProblemSlug,
    readonly detail: string,
    readonly extra: {
      errors?: FieldError[];
      headers?: Record<string, string>;
      members?: Record<string, unknown>;
      /** A race lost: the same request may succeed sent again, so it is never kept under an Idempotency-Key. */
      retry?: true;
    } = {},
  ) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(detail);
    } finally {
      // Even when super() throws (a stack overflow): every error after keeps its stack.
      Error.stackTraceLimit = limit;
    }
    this.status = PROBLEMS[slug].status;
  }
}

export function isProblemSlug(s: string): s is ProblemSlug {
  return Object.prototype.hasOwnProperty.call(PROBLEMS, s);
}

/** The same errors with each body pointer placed under `prefix` (e.g. `/operations/3/body`). */
export function underPointer<E extends { errors?: FieldError[] }>(error: E, prefix: string): E {
  if (!error.errors) return error;
  return { ...error, errors: error.errors.map((e) => (e.pointer === undefined ? e : { ...e, pointer: `${prefix}${e.pointer}` })) };
}

/** How an error crosses the bus: data only (STYLE 5). */
export interface WireError {
  code: ProblemSlug;
  detail: string;
  errors?: FieldError[];
  /** Seconds for `Retry-After`, where the answer names more than the gateway's default (an actor short of storage). */
  retryAfter?: string;
}

export function toWire(err: ApiError): WireError {
  const w: WireError = { code: err.slug, detail: err.detail };
  if (err.extra.errors) w.errors = err.extra.errors;
  const retryAfter = err.extra.headers?.['retry-after'];
  if (retryAfter !== undefined) w.retryAfter = retryAfter;
  return w;
}

/** The one place a wire error becomes a typed error again. Unknown codes become 500s. */
export function fromWire(w: WireError): ApiError {
  if (!isProblemSlug(w.code)) return new ApiError('internal', 'The request could not be completed.');
  const extra: ApiError['extra'] = {};
  if (w.errors) extra.errors = w.errors;
  if (typeof w.retryAfter === 'string' && /^\d{1,6}$/.test(w.retryAfter)) extra.headers = { 'retry-after': w.retryAfter };
  return new ApiError(w.code, w.detail, extra);
}
