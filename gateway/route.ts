// A route is one declaration: its path, scope, query parameters, body schema and handler. The
// router, request validation and the OpenAPI document are all built from these (STYLE 1).

import type { Config } from '../common/config.js';
import { randomPartition } from '../common/ids.js';
import { homePartition } from './idempotency.js';
import type { Principal } from './auth.js';
import type { BusClient } from './bus-client.js';
import type { GatewayRequest } from './http-types.js';
import type { Coding, MediaType } from './negotiate.js';
import type { Method } from './router.js';
import type { Guarded, IfMatch } from '../proto/messages.js';
import type { ApiVersion } from './versions.js';

export type JsonSchema = Record<string, unknown>;

export interface QueryParam {
  description: string;
  schema: JsonSchema;
}

export interface Ctx {
  req: GatewayRequest;
  params: Record<string, string>;
  query: URLSearchParams;
  body: unknown;
  principal: Principal | undefined;
  traceId: string;
  media: MediaType;
  coding: Coding;
  ifMatch: IfMatch;
  /** If-None-Match of a write (a read answers 304 from it instead), as versions. */
  ifNoneMatch: IfMatch;
  bus: BusClient;
  config: Config;
  /** The Idempotency-Key of a POST, already checked. */
  idempotencyKey: string | undefined;
  /** The API version the request was made under (its path prefix). */
  version: ApiVersion;
}

export interface Outcome {
  status: number;
  /** A JSON value, rendered in the negotiated media type. */
  body?: unknown;
  /**
   * Renders the body on demand; used with a version tag, so a 304 or a cached rendering of the
   * same (key, version, variant) skips it.
   */
  render?: () => unknown;
  /** Names the resource for the rendering cache; the tag's version and variant complete the key. */
  cacheKey?: string;
  /** The record rendered: when it is frozen (shared, never changed) its rendering is kept on it. */
  record?: object;
  /**
   * Already-rendered text (documentation pages, JSON assembled from cached renderings), as a
   * string or its UTF-8 bytes.
   */
  text?: string | Buffer;
  /**
   * version: a strong tag from the resource version and this variant; fingerprint: a hash of
   * something that determines the bytes (a page's ids, versions and links); content: a hash of
   * the bytes themselves. The first two are known before rendering, so a 304 renders nothing.
   */
  tag?: { version: number; variant: string } | { fingerprint: string } | 'content';
  location?: string;
  /** Cache-Control; defaults to `private, no-cache` (CONTRACT §5). */
  cache?: string;
  /** Request headers beside the defaults that shaped this answer. */
  vary?: string[];
  headers?: Record<string, string>;
  /**
   * The body was rendered for ctx.version already (links and money). Otherwise a v2 answer is a
   * v1 rendering whose links the pipeline moves under /v2 (gateway/versions.ts relink).
   */
  versioned?: boolean;
}

export interface RouteDef {
  method: Method;
  path: string;
  operationId: string;
  summary: string;
  tag: string;
  /** Scope the caller needs; undefined means anyone may call it, token or not. */
  scope: string | undefined;
  query?: Record<string, QueryParam>;
  body?: {
    schema: JsonSchema;
    /** Members a client may read but never write: named as read-only in a 422. */
    readOnly?: string[];
    mediaTypes?: string[];
    /** When false, an empty body is accepted and `ctx.body` is undefined. */
    required?: boolean;
    /**
     * Runs on the parsed body before the schema: for limits that answer something other than
     * 422 (a batch over MAX_BATCH is 413), checked before the schema spends time on the rest.
     */
    precheck?: (body: unknown, config: Config) => void;
  };
  responses: Record<number, string>;
  /** Media types the route can answer with; defaults to JSON and HAL+JSON. */
  produces?: readonly string[];
  /** Response schema for the OpenAPI document (the 2xx body). */
  response?: JsonSchema;
  handle(ctx: Ctx): Promise<Outcome>;
  /**
   * The same outcome as `handle`, at once, when what it needs can be read now (ctx.bus.readNow);
   * undefined sends the request on to `handle`. Called only on a bus that reads in process,
   * never for a request with an Idempotency-Key.
   */
  read?(ctx: Ctx): Outcome | undefined;
  /** The version this route is mounted for; set by mountVersions (gateway/versions.ts), v1 when unset. */
  version?: ApiVersion;
  /** What differs in the /v2 twin of this route: where money is written or read. */
  v2?: Partial<Pick<RouteDef, 'body' | 'query' | 'response'>>;
  /**
   * For a POST that sends one write: where its Idempotency-Key's answer is kept, and how that
   * answer (the write's reply) renders. A retry is answered from it before the handler reads
   * anything over the bus, so what changed since (a product deleted, the order moved on) cannot
   * change it: the gateway looks for it first, or, when the handler's first command is that
   * write, the write's owner does (BusClient.looked). A handler refusing before its first
   * command is looked for too, so a kept answer or a reuse of the key comes first.
   */
  replay?: {
    partition(ctx: Ctx): number;
    outcome(ctx: Ctx, reply: unknown): Outcome;
    /**
     * The handler asks the world outside the bus before its first command (a DNS lookup): the
     * kept answer is looked for before the handler runs, so a retry never waits on that.
     */
    lookFirst?: boolean;
  };
  /**
   * For a POST that writes but keeps no one answer to look for first (a batch, a refund, a
   * webhook test; `replay` covers the others): a refusal before any of its writes carried the
   * Idempotency-Key asks the key's home first, so a reuse of the key, or the key in flight, is
   * answered before the refusal. Not for a POST that only reads (a batch-get).
   */
  keyHome?: true;
}

export function route(def: RouteDef): RouteDef {
  return def;
}

/**
 * The partition a new resource is created in. With an Idempotency-Key it is fixed by the key, so
 * every retry meets the first attempt's result at the same owner; otherwise any.
 */
export function partitionForNew(ctx: Ctx): number {
  return ctx.idempotencyKey === undefined ? randomPartition() : homePartition(principalOf(ctx).tenant, ctx.idempotencyKey);
}

export function principalOf(ctx: Ctx): Principal {
  // The pipeline authorizes before the handler runs, so a route with a scope always has one.
  if (!ctx.principal) throw new Error('route with a scope reached without a principal');
  return ctx.principal;
}

/** A write's preconditions, as the command carries them to the record's owner. */
export function guards(ctx: Ctx): Guarded {
  return ctx.ifNoneMatch === undefined ? { ifMatch: ctx.ifMatch } : { ifMatch: ctx.ifMatch, ifNoneMatch: ctx.ifNoneMatch };
}
