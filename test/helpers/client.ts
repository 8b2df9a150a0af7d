// A small HTTP client for the end-to-end tests, over undici's `request`: raw on purpose. It adds
// no headers of its own (no Accept-Encoding, no Accept) and never decompresses, so a test sees
// exactly the bytes and headers the service sent.

import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { Agent, request } from 'undici';
import { mintToken as mint } from '../../gateway/auth.js';

export const ALL_SCOPES = 'orders:read orders:write products:read products:write users:read users:write teams:read teams:write refunds:read refunds:write';

export interface Claims {
  sub: string;
  tenant?: string;
  scope: string;
}

/** A signed HS256 bearer token, as a client of the service would hold. */
export function mintToken(secret: string, claims: Claims, expiresIn?: string | number): Promise<string> {
  return mint(secret, claims, expiresIn);
}

export interface Reply {
  status: number;
  /** Lower-cased names; repeated headers joined with ', '. */
  headers: Record<string, string>;
  /** The body exactly as received (still compressed if Content-Encoding says so). */
  raw: Buffer;
  /** The body after undoing Content-Encoding. */
  bytes: Buffer;
  text: string;
  /** The parsed JSON body; throws when the body is not JSON. */
  // Tests read many response shapes; the members they touch are asserted, not assumed.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

export interface SendOptions {
  token?: string;
  headers?: Record<string, string>;
  /** Serialized as the body; Content-Type defaults to application/json. */
  json?: unknown;
  /** A raw body, sent as is. */
  body?: string | Buffer;
  contentType?: string;
}

type Method = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

function decode(raw: Buffer, coding: string | undefined): Buffer {
  switch (coding) {
    case undefined:
    case 'identity':
      return raw;
    case 'br':
      return brotliDecompressSync(raw);
    case 'gzip':
      return gunzipSync(raw);
    default:
      throw new Error(`unexpected content-coding ${coding}`);
  }
}

export class HttpClient {
  // One connection pool per service, closed with it, so no keep-alive socket outlives a run.
  private readonly agent = new Agent({ connections: 32 });

  constructor(readonly baseUrl: string) {}

  async send(method: Method, path: string, opts: SendOptions = {}): Promise<Reply> {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
    let body: string | Buffer | undefined = opts.body;
    if (opts.json !== undefined) body = JSON.stringify(opts.json);
    if (body !== undefined && headers['content-type'] === undefined) headers['content-type'] = opts.contentType ?? 'application/json';
    const res = await request(`${this.baseUrl}${path}`, { method, headers, body, dispatcher: this.agent });
    const raw = Buffer.from(await res.body.arrayBuffer());
    const flat: Record<string, string> = {};
    for (const [name, value] of Object.entries(res.headers)) {
      if (value !== undefined) flat[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
    }
    const bytes = decode(raw, flat['content-encoding']);
    const text = bytes.toString('utf8');
    let parsed: unknown;
    let parseError: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch (err) {
      parseError = err;
    }
    return {
      status: res.statusCode,
      headers: flat,
      raw,
      bytes,
      text,
      get json() {
        if (parseError) throw new Error(`${method} ${path} answered ${res.statusCode} with a body that is not JSON: ${text.slice(0, 200)}`);
        return parsed;
      },
    };
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

/**
 * The same caller (tenant and token) through one connection pool of its own per URL: every
 * gateway of a service, or one gateway several times over (a pool keeps 32 requests on the
 * wire). `close` ends the pools.
 */
export function callersOn(c: Caller, urls: string[]): { callers: Caller[]; close: () => Promise<void> } {
  const pools = urls.map((u) => new HttpClient(u));
  return { callers: pools.map((h) => new Caller(h, c.tenant, c.token)), close: async () => void (await Promise.all(pools.map((h) => h.close()))) };
}

/** One caller: a tenant and a token, with a verb per HTTP method. */
export class Caller {
  constructor(
    readonly http: HttpClient,
    readonly tenant: string,
    readonly token: string | undefined,
  ) {}

  get(path: string, headers?: Record<string, string>): Promise<Reply> {
    return this.http.send('GET', path, { token: this.token, headers });
  }

  post(path: string, json?: unknown, headers?: Record<string, string>): Promise<Reply> {
    return this.http.send('POST', path, { token: this.token, json, headers });
  }

  put(path: string, json: unknown, headers?: Record<string, string>): Promise<Reply> {
    return this.http.send('PUT', path, { token: this.token, json, headers });
  }

  /** JSON Merge Patch (RFC 7396) unless another content type is named. */
  patch(path: string, json: unknown, headers?: Record<string, string>, contentType = 'application/merge-patch+json'): Promise<Reply> {
    return this.http.send('PATCH', path, { token: this.token, json, headers, contentType });
  }

  delete(path: string, headers?: Record<string, string>): Promise<Reply> {
    return this.http.send('DELETE', path, { token: this.token, headers });
  }
}

export class Api {
  readonly http: HttpClient;

  constructor(
    readonly baseUrl: string,
    readonly secret: string,
  ) {
    this.http = new HttpClient(baseUrl);
  }

  /** A caller in `tenant` holding `scope` (every order and product scope by default). */
  async as(tenant: string, scope = ALL_SCOPES): Promise<Caller> {
    return new Caller(this.http, tenant, await mintToken(this.secret, { sub: `usr-${tenant}`, tenant, scope }));
  }

  /** A caller with no token at all. */
  anonymous(): Caller {
    return new Caller(this.http, '', undefined);
  }

  close(): Promise<void> {
    return this.http.close();
  }
}
