// The soak's hostile stream: requests no well-behaved client sends, at a bounded rate beside the
// normal load. Each must be answered with a 4xx, never a 5xx; where the documented answer is a
// closed connection (the README's "Hostile input" table: oversized bodies and heads, methods and
// request lines uWS does not parse), a close is counted apart, not as an error. Everything else (a 2xx, 3xx or 5xx,
// a close nobody documented, no answer at all) is a violation.
//
// Cases that need exact bytes on the wire (framing, oversized heads and bodies, methods an HTTP
// library refuses to send) use a raw socket; the rest go through the stream's own undici pool
// with a token of its own tenant, so a closed connection never touches the normal loops.
import { SignJWT, UnsecuredJWT } from 'jose';
import type { Pool } from 'undici';
import { chunked, rawExchange, rawRequest } from '../../test/helpers/raw-http.js';
import { send, type Reply, type Shared } from './soak-workload.js';

export interface HostileContext {
  port: number;
  pool: Pool;
  /** All scopes, in the stream's own tenant. */
  token: string;
  secret: string;
  maxBodyBytes: number;
  /** An order of the stream's own tenant, for patches that must be refused. */
  ownOrder: string;
  shared: Shared;
  timeoutMs: number;
}

export interface Outcome {
  status?: number;
  closed: boolean;
  /** Set by a case whose answer breaks a rule the status alone does not show. */
  violation?: string;
}

export interface HostileCase {
  name: string;
  /** The answer the documentation names; another 4xx is noted, not an error. */
  expect: number[];
  /** A closed connection is a documented answer to this input. */
  closeOk?: boolean;
  run(h: HostileContext): Promise<Outcome>;
}

export type HostileVerdict = 'expected' | 'other 4xx' | 'closed (documented)' | 'violation';

export function judgeHostile(c: HostileCase, o: Outcome): { verdict: HostileVerdict; reason?: string } {
  if (o.violation) return { verdict: 'violation', reason: o.violation };
  if (o.status !== undefined) {
    if (c.expect.includes(o.status)) return { verdict: 'expected' };
    if (o.status >= 400 && o.status < 500) return { verdict: 'other 4xx' };
    return { verdict: 'violation', reason: `answered ${o.status}` };
  }
  if (o.closed) return c.closeOk ? { verdict: 'closed (documented)' } : { verdict: 'violation', reason: 'closed without an answer' };
  return { verdict: 'violation', reason: 'no answer before the deadline' };
}

/** A status label for the tally: the status, or how the connection ended without one. */
export function outcomeLabel(o: Outcome): string {
  return o.status !== undefined ? String(o.status) : o.closed ? 'closed' : 'no answer';
}

// uWS waits for the rest of a request it cannot parse until its idle timeout (about 10 s).
const RAW_TIMEOUT_MS = 15_000;

async function api(
  h: HostileContext,
  method: string,
  path: string,
  opts: { headers?: Record<string, string>; body?: string | Buffer; token?: string | null } = {},
): Promise<Outcome & { reply?: Reply }> {
  const token = opts.token === null ? undefined : (opts.token ?? h.token);
  try {
    const reply = await send(h.pool, token, { method, path, headers: opts.headers, body: opts.body }, h.timeoutMs);
    return { status: reply.status, closed: false, reply };
  } catch {
    return { closed: true };
  }
}

async function raw(h: HostileContext, parts: (string | Buffer)[]): Promise<Outcome> {
  try {
    const ex = await rawExchange(h.port, { send: parts, timeoutMs: RAW_TIMEOUT_MS });
    const m = /^HTTP\/1\.1 (\d{3})/.exec(ex.bytes.subarray(0, 16).toString('latin1'));
    return { status: m ? Number(m[1]) : undefined, closed: ex.closed };
  } catch (err) {
    return { closed: false, violation: `connect failed: ${String(err)}` };
  }
}

const json = { 'content-type': 'application/json' };
const post = (h: HostileContext, body: string | Buffer, headers: Record<string, string> = json): Promise<Outcome> =>
  api(h, 'POST', '/v1/orders', { headers, body });

let counter = 0;
const victim = (h: HostileContext): string => h.shared.recentIds[counter++ % Math.max(1, h.shared.recentIds.length)] ?? 'ord_000000000000000000000000';

async function signed(secret: string, claims: Record<string, unknown>, exp: number | string = '1h'): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject('usr_hostile')
    .setExpirationTime(exp)
    .sign(new TextEncoder().encode(secret));
}

/** Tokens that must all be refused: 401, or 403 for a valid one without the scope. */
export async function hostileTokens(secret: string): Promise<Record<'garbage' | 'badSignature' | 'expired' | 'algNone' | 'noScope', string>> {
  const scope = 'orders:read orders:write';
  return {
    garbage: 'not.a.jwt',
    badSignature: await signed(`${secret}-not`, { tenant: 'hostile', scope }),
    expired: await signed(secret, { tenant: 'hostile', scope }, Math.floor(Date.now() / 1000) - 60),
    algNone: new UnsecuredJWT({ tenant: 'hostile', scope }).setSubject('usr_hostile').setExpirationTime('1h').encode(),
    noScope: await signed(secret, { tenant: 'hostile', scope: 'products:read' }),
  };
}

function nested(depth: number, open: string, inner: string, close: string): string {
  return `${open.repeat(depth)}${inner}${close.repeat(depth)}`;
}

export function hostileCases(tokens: Awaited<ReturnType<typeof hostileTokens>>): HostileCase[] {
  const rawPost = (h: HostileContext, headers: Record<string, string>, body?: Buffer | string): Buffer =>
    rawRequest('POST', '/v1/orders', { Authorization: `Bearer ${h.token}`, 'Content-Type': 'application/json', ...headers }, body);
  return [
    // ---- bodies ----
    { name: 'json-malformed', expect: [400], run: (h) => post(h, '{"currency":"EUR",') },
    { name: 'json-trailing-garbage', expect: [400], run: (h) => post(h, '{"currency":"EUR"}}') },
    { name: 'utf8-invalid', expect: [400], run: (h) => post(h, Buffer.from([...Buffer.from('{"currency":"EUR","note":"'), 0xc3, 0x28, ...Buffer.from('"}')])) },
    { name: 'utf8-surrogate', expect: [400], run: (h) => post(h, Buffer.from([...Buffer.from('{"currency":"EUR","note":"'), 0xed, 0xa0, 0x80, ...Buffer.from('"}')])) },
    { name: 'proto-member', expect: [400, 422], run: (h) => post(h, '{"currency":"EUR","__proto__":{"status":"paid"}}') },
    { name: 'proto-metadata', expect: [400, 422], run: (h) => post(h, '{"currency":"EUR","metadata":{"__proto__":"x"}}') },
    { name: 'constructor-prototype', expect: [400, 422], run: (h) => post(h, '{"currency":"EUR","constructor":{"prototype":{"polluted":"yes"}}}') },
    {
      name: 'proto-patch',
      expect: [400, 422],
      run: (h) => api(h, 'PATCH', `/v1/orders/${h.ownOrder}`, { headers: { 'content-type': 'application/merge-patch+json' }, body: '{"metadata":{"__proto__":{"x":"y"}}}' }),
    },
    { name: 'deep-object', expect: [400, 422], run: (h) => post(h, `{"currency":"EUR","metadata":${nested(50_000, '{"a":', '1', '}')}}`) },
    { name: 'deep-array', expect: [400, 422], run: (h) => post(h, `{"currency":"EUR","note":${nested(200_000, '[', '', ']')}}`) },
    {
      name: 'deep-batch-atomic',
      expect: [400, 422],
      run: (h) => api(h, 'POST', '/v1/orders/batch', { headers: json, body: `{"atomic":true,"operations":[{"method":"POST","body":{"currency":"EUR","metadata":${nested(50_000, '{"a":', '1', '}')}}}]}` }),
    },
    { name: 'huge-number', expect: [422], run: (h) => post(h, '{"currency":"EUR","items":[{"productId":"prd_x","quantity":1e400}]}') },
    { name: 'huge-number-digits', expect: [422], run: (h) => post(h, `{"currency":"EUR","items":[{"productId":"prd_x","quantity":${'9'.repeat(100_000)}}]}`) },
    { name: 'huge-price', expect: [422], run: (h) => api(h, 'POST', '/v1/products', { headers: json, body: '{"name":"x","price":9223372036854775808,"currency":"EUR"}' }) },
    { name: 'negative-quantity', expect: [422], run: (h) => post(h, '{"currency":"EUR","items":[{"productId":"prd_x","quantity":-1.5}]}') },
    { name: 'long-note', expect: [422], run: (h) => post(h, JSON.stringify({ currency: 'EUR', note: 'x'.repeat(2001) })) },
    { name: 'long-string-900k', expect: [422], run: (h) => post(h, JSON.stringify({ currency: 'EUR', customerId: 'x'.repeat(900_000) })) },
    { name: 'many-members', expect: [422], run: (h) => post(h, JSON.stringify({ currency: 'EUR', metadata: Object.fromEntries(Array.from({ length: 40_000 }, (_, i) => [`k${i}`, 'v'])) })) },
    {
      name: 'body-too-large-declared',
      expect: [413],
      closeOk: true,
      run: (h) => raw(h, [rawPost(h, { 'Content-Length': String(h.maxBodyBytes + 1) }), Buffer.alloc(h.maxBodyBytes + 1, 0x20)]),
    },
    {
      name: 'body-chunked',
      expect: [411],
      closeOk: true,
      run: (h) => raw(h, [rawPost(h, { 'Transfer-Encoding': 'chunked' }), chunked(' '.repeat(h.maxBodyBytes + 1024), 64 * 1024)]),
    },
    { name: 'content-length-2^31', expect: [413], closeOk: true, run: (h) => raw(h, [rawPost(h, { 'Content-Length': '2147483648' }), '{"currency":"EUR"}']) },
    { name: 'content-type-text', expect: [415], run: (h) => post(h, '{"currency":"EUR"}', { 'content-type': 'text/plain' }) },
    { name: 'content-type-latin1', expect: [415], run: (h) => post(h, '{"currency":"EUR"}', { 'content-type': 'application/json; charset=iso-8859-1' }) },
    {
      name: 'content-type-xml-patch',
      expect: [415],
      run: (h) => api(h, 'PATCH', `/v1/orders/${h.ownOrder}`, { headers: { 'content-type': 'application/xml' }, body: '<note>x</note>' }),
    },
    { name: 'body-on-delete', expect: [415], run: (h) => api(h, 'DELETE', '/v1/orders/ord_000000000000000000000000', { headers: json, body: '{}' }) },
    { name: 'batch-over-max', expect: [413], run: (h) => api(h, 'POST', '/v1/orders/batch', { headers: json, body: JSON.stringify({ operations: Array.from({ length: 101 }, () => ({ method: 'POST', body: { currency: 'EUR' } })) }) }) },
    { name: 'batch-atomic-bad-op', expect: [422], run: (h) => api(h, 'POST', '/v1/orders/batch', { headers: json, body: '{"atomic":true,"operations":[{"method":"PUT","id":"x"}]}' }) },

    // ---- headers and keys ----
    { name: 'idempotency-key-too-long', expect: [400], run: (h) => post(h, '{"currency":"EUR"}', { ...json, 'idempotency-key': 'k'.repeat(256) }) },
    { name: 'idempotency-key-empty-sf', expect: [400], run: (h) => post(h, '{"currency":"EUR"}', { ...json, 'idempotency-key': '""' }) },
    {
      name: 'idempotency-key-reused',
      expect: [422],
      run: async (h) => {
        const key = `hostile-${Date.now()}-${counter++}`;
        const first = await post(h, '{"currency":"EUR","note":"a"}', { ...json, 'idempotency-key': key });
        if (first.status !== 201) return { ...first, violation: `the first use answered ${outcomeLabel(first)}` };
        return post(h, '{"currency":"EUR","note":"b"}', { ...json, 'idempotency-key': key });
      },
    },
    { name: 'if-match-garbage', expect: [412], run: (h) => api(h, 'PATCH', `/v1/orders/${h.ownOrder}`, { headers: { ...json, 'if-match': 'garbage' }, body: '{"note":"x"}' }) },
    { name: 'accept-unservable', expect: [406], run: (h) => api(h, 'GET', '/v1/orders', { headers: { accept: 'text/html' } }) },
    {
      name: 'header-oversized',
      expect: [431],
      closeOk: true,
      run: (h) => raw(h, [rawRequest('GET', '/v1/orders', { Authorization: `Bearer ${h.token}`, 'X-Big': 'x'.repeat(2 * 1024 * 1024) })]),
    },
    {
      name: 'headers-too-many',
      expect: [431],
      closeOk: true,
      run: (h) => raw(h, [rawRequest('GET', '/v1/orders', Object.fromEntries([['Authorization', `Bearer ${h.token}`], ...Array.from({ length: 200 }, (_, i) => [`X-H${i}`, 'v'])]))]),
    },
    { name: 'token-oversized', expect: [401], closeOk: true, run: (h) => raw(h, [rawRequest('GET', '/v1/orders', { Authorization: `Bearer ${'a'.repeat(300_000)}` })]) },

    // ---- methods and framing ----
    { name: 'method-trace', expect: [405], run: (h) => api(h, 'TRACE', '/v1/orders') },
    // uWS closes these itself, before the gateway sees a request (README "Hostile input").
    { name: 'method-unknown', expect: [405, 501], closeOk: true, run: (h) => raw(h, [rawRequest('FOO', '/v1/orders', { Authorization: `Bearer ${h.token}` })]) },
    { name: 'method-propfind', expect: [405, 501], closeOk: true, run: (h) => raw(h, [rawRequest('PROPFIND', '/v1/orders', { Authorization: `Bearer ${h.token}` })]) },
    { name: 'framing-no-host', expect: [400], closeOk: true, run: (h) => raw(h, ['GET /v1 HTTP/1.1\r\n\r\n']) },
    { name: 'framing-bad-header-line', expect: [400], closeOk: true, run: (h) => raw(h, ['GET /v1 HTTP/1.1\r\nHost: a\r\nNo-Colon-Here\r\n\r\n']) },
    { name: 'framing-garbage', expect: [400], closeOk: true, run: (h) => raw(h, [Buffer.from([0, 1, 2, 3, 0x20, 0xff, 0xfe, 13, 10, 13, 10])]) },

    // ---- tokens ----
    { name: 'token-missing', expect: [401], run: (h) => api(h, 'GET', '/v1/orders', { token: null }) },
    { name: 'token-garbage', expect: [401], run: (h) => api(h, 'GET', '/v1/orders', { token: tokens.garbage }) },
    { name: 'token-bad-signature', expect: [401], run: (h) => api(h, 'GET', '/v1/orders', { token: tokens.badSignature }) },
    { name: 'token-expired', expect: [401], run: (h) => api(h, 'GET', '/v1/orders', { token: tokens.expired }) },
    { name: 'token-alg-none', expect: [401], run: (h) => api(h, 'GET', '/v1/orders', { token: tokens.algNone }) },
    { name: 'token-no-scope', expect: [403], run: (h) => api(h, 'GET', '/v1/orders', { token: tokens.noScope }) },
    { name: 'token-basic-scheme', expect: [401], run: (h) => api(h, 'GET', '/v1/orders', { token: null, headers: { authorization: 'Basic dXNlcjpwYXNz' } }) },

    // ---- other tenants' ids and keys ----
    { name: 'cross-tenant-get', expect: [404], run: (h) => api(h, 'GET', `/v1/orders/${victim(h)}`) },
    { name: 'cross-tenant-get-items', expect: [404], run: (h) => api(h, 'GET', `/v1/orders/${victim(h)}/items`) },
    { name: 'cross-tenant-patch', expect: [404], run: (h) => api(h, 'PATCH', `/v1/orders/${victim(h)}`, { headers: { ...json, 'if-match': '*' }, body: '{"note":"hostile"}' }) },
    { name: 'cross-tenant-delete', expect: [404], run: (h) => api(h, 'DELETE', `/v1/orders/${victim(h)}`) },
    { name: 'cross-tenant-pay', expect: [404], run: (h) => api(h, 'POST', `/v1/orders/${victim(h)}/pay`) },
    { name: 'cross-tenant-cancel', expect: [404], run: (h) => api(h, 'POST', `/v1/orders/${victim(h)}/cancel`) },
    { name: 'cross-tenant-add-item', expect: [404], run: (h) => api(h, 'POST', `/v1/orders/${victim(h)}/items`, { headers: json, body: '{"productId":"prd_x","quantity":1}' }) },
    { name: 'cross-tenant-batch-atomic', expect: [404], run: (h) => api(h, 'POST', '/v1/orders/batch', { headers: json, body: JSON.stringify({ atomic: true, operations: [{ method: 'DELETE', id: victim(h) }] }) }) },
    {
      name: 'cross-tenant-batch',
      // The documented answer to a partial batch is 207 with each operation's own status.
      expect: [207],
      run: async (h) => {
        const ids = [victim(h), victim(h)];
        const o = await api(h, 'POST', '/v1/orders/batch', {
          headers: json,
          body: JSON.stringify({ operations: [{ method: 'PATCH', id: ids[0], body: { note: 'hostile' } }, { method: 'DELETE', id: ids[1] }] }),
        });
        if (o.status !== 207 || !o.reply) return o;
        const results = (JSON.parse(o.reply.text) as { results?: { status?: number }[] }).results ?? [];
        const reached = results.filter((r) => r.status !== 404);
        return reached.length ? { ...o, violation: `another tenant's orders answered ${reached.map((r) => String(r.status)).join(', ')}` } : o;
      },
    },
    {
      name: 'cross-tenant-idempotency-key',
      // Keys are scoped by tenant (CONTRACT §7): another tenant's key is a fresh key here.
      expect: [201],
      run: async (h) => {
        const key = h.shared.recentKeys[counter++ % Math.max(1, h.shared.recentKeys.length)] ?? 'none';
        const o = await api(h, 'POST', '/v1/orders', { headers: { ...json, 'idempotency-key': key }, body: '{"currency":"EUR"}' });
        if (o.reply?.headers['idempotent-replayed'] !== undefined) return { ...o, violation: `replayed another tenant's answer for key ${key}` };
        return o;
      },
    },

    // ---- paths and queries ----
    { name: 'path-long-id', expect: [404], run: (h) => api(h, 'GET', `/v1/orders/ord_${'x'.repeat(2000)}`) },
    { name: 'path-over-target-limit', expect: [414], closeOk: true, run: (h) => api(h, 'GET', `/v1/orders/ord_${'x'.repeat(8000)}`) },
    { name: 'path-traversal', expect: [404], run: (h) => api(h, 'GET', '/v1/orders/../../etc/passwd') },
    { name: 'path-nul', expect: [404], run: (h) => api(h, 'GET', '/v1/orders/ord_%00') },
    { name: 'query-limit-huge', expect: [400], run: (h) => api(h, 'GET', '/v1/orders?limit=99999999999999999999999') },
    { name: 'query-cursor-garbage', expect: [400], run: (h) => api(h, 'GET', '/v1/orders?cursor=%ZZ%00garbage') },
    { name: 'query-unknown', expect: [400], run: (h) => api(h, 'GET', '/v1/orders?admin=true') },
    { name: 'query-repeated', expect: [400], run: (h) => api(h, 'GET', '/v1/orders?limit=1&limit=2') },
    { name: 'query-fields-proto', expect: [400], run: (h) => api(h, 'GET', '/v1/orders?fields=__proto__,constructor') },
    { name: 'query-expand-unknown', expect: [400], run: (h) => api(h, 'GET', `/v1/orders?expand=${'items.'.repeat(300)}product`) },
    { name: 'query-sort-unknown', expect: [400], run: (h) => api(h, 'GET', '/v1/orders?sort=tenant') },
  ];
}
