// gateway/router.ts on its own: static segments beat parameters, trailing slashes are other
// resources, parameters are percent-decoded, and 405 lists what is allowed (with HEAD).

import test from 'ava';
import fc from 'fast-check';
import { type Match, type Method, Router } from '../gateway/router.js';

const TABLE: [Method, string][] = [
  ['GET', '/'],
  ['GET', '/v1'],
  ['GET', '/v1/orders'],
  ['POST', '/v1/orders'],
  ['GET', '/v1/orders/{orderId}'],
  ['PUT', '/v1/orders/{orderId}'],
  ['PATCH', '/v1/orders/{orderId}'],
  ['DELETE', '/v1/orders/{orderId}'],
  ['POST', '/v1/orders/batch'],
  ['POST', '/v1/orders/{orderId}/cancel'],
  ['GET', '/v1/orders/{orderId}/items'],
  ['GET', '/v1/orders/{orderId}/items/{itemId}'],
];

/** Each route is its own "METHOD template" string, so a match says which one was found. */
function router(table: [Method, string][] = TABLE): Router<string> {
  const r = new Router<string>();
  for (const [m, p] of table) r.add(m, p, `${m} ${p}`);
  return r;
}

function found(m: Match<string>): { route: string; params: Record<string, string>; template: string } {
  if (m.kind !== 'found') throw new Error(`expected a match, got ${JSON.stringify(m)}`);
  return m;
}

test('static routes and parameters match, with their templates', (t) => {
  const r = router();
  t.is(found(r.match('GET', '/v1/orders')).route, 'GET /v1/orders');
  t.is(found(r.match('POST', '/v1/orders')).route, 'POST /v1/orders');
  const one = found(r.match('GET', '/v1/orders/ord_1'));
  t.is(one.route, 'GET /v1/orders/{orderId}');
  t.is(one.template, '/v1/orders/{orderId}');
  t.deepEqual(one.params, { orderId: 'ord_1' });
  const item = found(r.match('GET', '/v1/orders/ord_1/items/itm_2'));
  t.deepEqual(item.params, { orderId: 'ord_1', itemId: 'itm_2' });
  t.is(item.template, '/v1/orders/{orderId}/items/{itemId}');
});

test('the root and version root match', (t) => {
  const r = router();
  t.is(found(r.match('GET', '/')).route, 'GET /');
  t.is(found(r.match('HEAD', '/')).route, 'GET /');
  t.is(found(r.match('GET', '/v1')).route, 'GET /v1');
});

test('a static segment beats a parameter, whichever was added first', (t) => {
  const reversed = [...TABLE].reverse();
  for (const r of [router(), router(reversed)]) {
    const batch = found(r.match('POST', '/v1/orders/batch'));
    t.is(batch.route, 'POST /v1/orders/batch');
    t.deepEqual(batch.params, {});
    // Other ids still reach the parameter route.
    t.is(found(r.match('POST', '/v1/orders/ord_1/cancel')).route, 'POST /v1/orders/{orderId}/cancel');
    t.is(found(r.match('GET', '/v1/orders/batch2')).params.orderId, 'batch2');
    // /v1/orders/batch is its own resource: other methods are 405 there, not an order id.
    const get = r.match('GET', '/v1/orders/batch');
    t.is(get.kind, 'method-not-allowed');
    if (get.kind === 'method-not-allowed') t.deepEqual(get.allow, ['POST']);
  }
});

test('a trailing slash or an empty segment is 404', (t) => {
  const r = router();
  for (const path of ['/v1/', '/v1/orders/', '/v1/orders/ord_1/', '/v1/orders/ord_1/items/', '//v1/orders', '/v1//orders', '/v1/orders//items', '']) {
    t.deepEqual(r.match('GET', path), { kind: 'not-found' }, path);
  }
  // Only origin-form: the first segment is never silently dropped.
  t.deepEqual(r.match('GET', 'x/v1'), { kind: 'not-found' });
  t.deepEqual(r.match('GET', 'v1'), { kind: 'not-found' });
});

test('unknown paths, deeper paths and inner nodes without handlers are 404', (t) => {
  const r = router();
  for (const path of ['/v2', '/v1/products', '/v1/orders/ord_1/items/itm_1/more', '/v1/orders/ord_1/refunds', '/V1/orders']) {
    t.deepEqual(r.match('GET', path), { kind: 'not-found' }, path);
  }
  const inner = new Router<string>();
  inner.add('GET', '/a/b/c', 'deep');
  t.deepEqual(inner.match('GET', '/a/b'), { kind: 'not-found' });
  t.deepEqual(inner.match('GET', '/a'), { kind: 'not-found' });
});

test('parameters are percent-decoded; statics are matched as sent', (t) => {
  const r = router();
  t.is(found(r.match('GET', '/v1/orders/ord%5F1')).params.orderId, 'ord_1');
  t.is(found(r.match('GET', '/v1/orders/%E2%82%AC')).params.orderId, '€');
  t.is(found(r.match('GET', '/v1/orders/a%2Fb')).params.orderId, 'a/b');
  t.is(found(r.match('GET', '/v1/orders/a%20b/items/%7Bx%7D')).params.itemId, '{x}');
  // '+' means a space only in a query string, never in a path.
  t.is(found(r.match('GET', '/v1/orders/a+b')).params.orderId, 'a+b');
  t.deepEqual(r.match('GET', '/v1/%6Frders'), { kind: 'not-found' });
});

test('bad percent-encoding in a parameter is 404, not a crash', (t) => {
  const r = router();
  for (const path of ['/v1/orders/%', '/v1/orders/%zz', '/v1/orders/%E2%82', '/v1/orders/%C0%AF', '/v1/orders/ord_1/items/%FF']) {
    t.deepEqual(r.match('GET', path), { kind: 'not-found' }, path);
  }
});

test('a known path with another method is 405 listing the allowed methods, HEAD with GET', (t) => {
  const r = router();
  const sorted = (m: Match<string>): string[] => {
    if (m.kind !== 'method-not-allowed') throw new Error(`expected 405, got ${m.kind}`);
    return [...m.allow].sort();
  };
  t.deepEqual(sorted(r.match('DELETE', '/v1/orders')), ['GET', 'HEAD', 'POST']);
  t.deepEqual(sorted(r.match('POST', '/v1/orders/ord_1')), ['DELETE', 'GET', 'HEAD', 'PATCH', 'PUT']);
  t.deepEqual(sorted(r.match('TRACE', '/v1/orders/ord_1')), ['DELETE', 'GET', 'HEAD', 'PATCH', 'PUT']);
  t.deepEqual(sorted(r.match('OPTIONS', '/v1/orders')), ['GET', 'HEAD', 'POST']);
  // No GET, so no HEAD either.
  t.deepEqual(sorted(r.match('GET', '/v1/orders/ord_1/cancel')), ['POST']);
  t.deepEqual(sorted(r.match('HEAD', '/v1/orders/ord_1/cancel')), ['POST']);
  // HEAD is served by the GET route.
  t.is(found(r.match('HEAD', '/v1/orders/ord_1')).route, 'GET /v1/orders/{orderId}');
  // Methods are case-sensitive (RFC 9110 §9.1).
  t.is(r.match('get', '/v1/orders').kind, 'method-not-allowed');
});

test('conflicting parameter names and duplicate routes are refused when added', (t) => {
  const r = new Router<string>();
  r.add('GET', '/v1/orders/{orderId}', 'a');
  t.throws(() => r.add('GET', '/v1/orders/{id}/items', 'b'), { message: /conflicting parameter names/ });
  t.throws(() => r.add('GET', '/v1/orders/{orderId}', 'c'), { message: /duplicate route GET/ });
  t.notThrows(() => r.add('PUT', '/v1/orders/{orderId}', 'd'));
});

/**
 * The matching rules written the plain way, as the model: split on '/', skip the leading empty
 * segment, an empty one anywhere else is 404, statics first, parameters percent-decoded.
 */
function modelMatch(method: string, path: string): string {
  if (!path.startsWith('/')) return 'not-found';
  const segs = path === '/' ? [] : path.split('/').slice(1);
  let template: string[] = [];
  const params: Record<string, string> = {};
  for (const seg of segs) {
    if (seg === '') return 'not-found';
    const next = template.concat(seg);
    const statics = TABLE.filter(([, p]) => p.split('/').filter(Boolean).slice(0, next.length).join('/') === next.join('/'));
    if (statics.length) {
      template = next;
      continue;
    }
    const withParam = TABLE.map(([, p]) => p.split('/').filter(Boolean)).find((p) => p.length > template.length && p.slice(0, template.length).join('/') === template.join('/') && /^\{\w+\}$/.test(p[template.length]!));
    if (!withParam) return 'not-found';
    try {
      params[withParam[template.length]!.slice(1, -1)] = decodeURIComponent(seg);
    } catch {
      return 'not-found';
    }
    template = template.concat(withParam[template.length]!);
  }
  const tpl = `/${template.join('/')}`;
  const methods = TABLE.filter(([, p]) => p === tpl).map(([m]) => m as string);
  if (!methods.length) return 'not-found';
  const m = method === 'HEAD' ? 'GET' : method;
  return methods.includes(m) ? `found ${m} ${tpl} ${JSON.stringify(params)}` : 'method-not-allowed';
}

test('any path matches as the plain split-on-slash rules say', (t) => {
  const seg = fc.oneof(
    fc.constantFrom('', 'v1', 'orders', 'batch', 'cancel', 'items', 'ord_1', 'itm_2', '%41b', '%zz', '%2F', 'a%20b', '..'),
    fc.string({ unit: fc.constantFrom('a', '%', '2', 'F', '/', '_'), maxLength: 6 }),
  );
  const path = fc.oneof(fc.array(seg, { maxLength: 6 }).map((s) => `/${s.join('/')}`), fc.constantFrom('/', '', 'v1/orders', '//', '/v1/'));
  const r = router();
  fc.assert(
    fc.property(fc.constantFrom('GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'), path, (method, p) => {
      const m = r.match(method, p);
      const got = m.kind === 'found' ? `found ${m.route} ${JSON.stringify(m.params)}` : m.kind;
      if (got !== modelMatch(method, p)) throw new Error(`${method} ${p}: ${got} against ${modelMatch(method, p)}`);
    }),
    { numRuns: 5000 },
  );
  t.pass('5000 paths matched as the model says');
});
