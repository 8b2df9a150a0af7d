// The answer fields the uWS edge writes without its CR/LF check (gateway/http.ts,
// selfFormatted): Trace-Id, ETag and RateLimit, whose producers must never put anything but
// digits, hex, base64url and the draft's punctuation in them, whatever the request held; and a
// route's Deprecation, Sunset and Link, printable ASCII whatever the lifecycle entry or the path.

import test from 'ava';
import fc from 'fast-check';
import { traceIdOf } from '../gateway/pipeline.js';
import { RateLimiter } from '../gateway/rate-limit.js';
import { contentTag, fingerprintTag, versionTag } from '../gateway/representation.js';
import { ApiError } from '../common/errors.js';
import { allRoutes } from '../gateway/app.js';
import { LifecycleError, LifecycleRegistry, lifecycleHeaders } from '../gateway/lifecycle.js';

const TAG = /^"(?:[0-9]+-[A-Za-z0-9_-]{10}|[cf]-[A-Za-z0-9_-]{16})"$/;
const MEDIA = fc.oneof(fc.constantFrom('application/json', 'application/hal+json', 'text/html'), fc.string());
const CODING = fc.constantFrom('br' as const, 'gzip' as const, 'identity' as const);

test('a trace id is 32 hex digits, whatever traceparent the client sent', (t) => {
  fc.assert(
    fc.property(fc.option(fc.oneof(fc.string(), fc.stringMatching(/^[0-9a-f]{2}-[0-9a-f\r\n]{32}-[0-9a-f]{16}-[0-9a-f]{2}\r?\n?$/))), (traceparent) => {
      t.regex(traceIdOf(traceparent ?? undefined), /^[0-9a-f]{32}$/);
    }),
  );
  // A valid traceparent's own trace id is kept (W3C Trace Context), and only then.
  t.is(traceIdOf(`00-${'ab'.repeat(16)}-${'cd'.repeat(8)}-01`), 'ab'.repeat(16));
});

test('entity tags hold digits and base64url alone, whatever the variant, media type or body', (t) => {
  fc.assert(
    fc.property(fc.nat(), fc.string(), MEDIA, CODING, (version, variant, media, coding) => {
      t.regex(versionTag(version, variant, media, coding), TAG);
      t.regex(fingerprintTag(variant, media, coding), TAG);
      t.regex(contentTag(variant, media, coding), TAG);
      t.regex(contentTag(Buffer.from(variant), media, coding), TAG);
    }),
  );
});

test('RateLimit is the draft\'s "default";r=<n>;t=<n>, refused or not', (t) => {
  fc.assert(
    fc.property(fc.double({ min: 0.001, max: 1e6, noNaN: true }), fc.integer({ min: 1, max: 1e6 }), fc.array(fc.nat({ max: 5000 }), { maxLength: 20 }), (perSecond, burst, gaps) => {
      let clock = 0;
      const limiter = new RateLimiter({ perSecond, burst, now: () => clock });
      try {
        for (const gap of gaps) {
          clock += gap;
          try {
            t.regex(limiter.charge('k'), /^"default";r=[0-9]+;t=[0-9]+$/);
          } catch (err) {
            if (!(err instanceof ApiError)) throw err;
            t.regex(err.extra.headers?.ratelimit ?? '', /^"default";r=0;t=[0-9]+$/);
          }
        }
      } finally {
        limiter.close();
      }
    }),
  );
});

test('Deprecation, Sunset and Link are printable ASCII, whatever entry was accepted and whatever the path held', (t) => {
  const registry = new LifecycleRegistry(() => Date.UTC(2026, 0, 1));
  const routes = allRoutes({}, registry);
  registry.bind(routes);
  const route = routes.find((r) => r.method === 'GET' && r.path === '/v1/orders/{orderId}')!;
  const target = fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.webUrl(), fc.webPath().map((p) => `/${p}{orderId}`), fc.constantFrom('/v2/orders/{orderId}', '/docs/x\r\nset-cookie: a', '/a{orderId}\n'));
  const time = fc.date({ min: new Date(0), max: new Date(Date.UTC(9999, 0, 1)), noInvalidDate: true }).map((d) => d.toISOString());
  // The two times come in order, so an entry is refused only for its targets: about 3 in 10
  // are accepted, and 300 runs leave the floor below many standard deviations away.
  const times = fc.tuple(time, time).map(([a, b]) => (a <= b ? [a, b] : [b, a]));
  let accepted = 0;
  fc.assert(
    fc.property(fc.constantFrom('deprecated', 'sunsetting'), times, fc.option(target), fc.option(target), fc.string({ unit: 'binary' }), (state, [deprecatedAt, sunsetAt], successor, guide, id) => {
      try {
        registry.replace([{ method: 'GET', path: '/v1/orders/{orderId}', state, deprecatedAt, sunsetAt, successor: successor ?? undefined, guide: guide ?? undefined }]);
      } catch (err) {
        if (err instanceof LifecycleError) return;
        throw err;
      }
      accepted++;
      const check = registry.check(route, { orderId: id });
      t.truthy(check);
      for (const value of Object.values(lifecycleHeaders(check!))) t.regex(value, /^[\x20-\x7e]*$/);
    }),
    { numRuns: 300 },
  );
  t.true(accepted > 10, `only ${accepted} entries were accepted`);
});
