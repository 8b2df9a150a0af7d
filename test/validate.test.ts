// Body validation's length limits: minLength and maxLength count code points, as JSON Schema
// says (a surrogate pair is one character), whatever shortcut decides them, with ajv's messages.

import test from 'ava';
import fc from 'fast-check';
import { ISO_4217 } from '../common/currencies.js';
import { ApiError } from '../common/errors.js';
import { newCurrencySchema } from '../gateway/resources/common.js';
import { allRoutes } from '../gateway/app.js';
import { codePoints, compileSchema, FULL_REPORT_MAX_BYTES, validateBody, warmValidators } from '../gateway/validate.js';
import type { JsonSchema } from '../gateway/route.js';

/** The failures validateBody reports for `body`, [] when it passes. */
function failures(schema: JsonSchema, body: unknown): { pointer?: string; detail: string }[] {
  try {
    validateBody(schema, body, [], 0);
    return [];
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return (err.extra.errors ?? []) as { pointer?: string; detail: string }[];
  }
}

const bounded = (minLength: number, maxLength: number): JsonSchema => ({
  type: 'object',
  additionalProperties: false,
  properties: { s: { type: 'string', minLength, maxLength } },
});

test('code points are counted, not UTF-16 units: a pair is one, a lone surrogate one', (t) => {
  t.is(codePoints(''), 0);
  t.is(codePoints('abc'), 3);
  t.is(codePoints('😀'), 1);
  t.is(codePoints('a😀b'), 3);
  t.is(codePoints('\uD800'), 1);
  t.is(codePoints('\uDC00\uD800'), 2);
  t.is(codePoints('\uD800a'), 2);
});

test('a string just inside and just past each limit, in pairs and in single units', (t) => {
  const schema = bounded(2, 4);
  t.deepEqual(failures(schema, { s: '😀😀😀😀' }), [], 'four pairs are four characters (eight units)');
  t.deepEqual(failures(schema, { s: '😀😀' }), []);
  t.deepEqual(failures(schema, { s: '😀😀😀😀😀' }), [{ pointer: '/s', detail: 'must NOT have more than 4 characters' }]);
  t.deepEqual(failures(schema, { s: '😀' }), [{ pointer: '/s', detail: 'must NOT have fewer than 2 characters' }], 'one pair is one character (two units)');
  t.deepEqual(failures(schema, { s: 'abcde' }), [{ pointer: '/s', detail: 'must NOT have more than 4 characters' }]);
  t.deepEqual(failures(schema, { s: 'a' }), [{ pointer: '/s', detail: 'must NOT have fewer than 2 characters' }]);
});

test('every failure is listed, each with its limit, when several strings break them', (t) => {
  const schema: JsonSchema = { type: 'object', properties: { ids: { type: 'array', maxItems: 10, items: { type: 'string', minLength: 1, maxLength: 3 } } } };
  t.deepEqual(failures(schema, { ids: ['ok', '', 'long', '😀😀😀'] }), [
    { pointer: '/ids/1', detail: 'must NOT have fewer than 1 characters' },
    { pointer: '/ids/2', detail: 'must NOT have more than 3 characters' },
  ]);
});

test('a string breaking its length and its pattern is named for its length, as ajv names it, in both passes', (t) => {
  const schema: JsonSchema = {
    type: 'object',
    properties: { name: { type: 'string', minLength: 1, maxLength: 8, pattern: '^[a-z]+$' }, pad: { type: 'string', maxLength: 100_000 } },
  };
  t.deepEqual(failures(schema, { name: '' }), [{ pointer: '/name', detail: 'must NOT have fewer than 1 characters' }]);
  t.deepEqual(failures(schema, { name: 'TOO-LONG-AND-UPPER' }), [{ pointer: '/name', detail: 'must NOT have more than 8 characters' }]);
  t.deepEqual(failures(schema, { name: 'Upper' }), [{ pointer: '/name', detail: 'must match pattern "^[a-z]+$"' }]);
  // Over FULL_REPORT_MAX_BYTES only the first failure is looked for, by the validator that stops at it.
  const big = 'x'.repeat(70_000);
  t.true(JSON.stringify({ name: 'TOO-LONG-AND-UPPER', pad: big }).length > FULL_REPORT_MAX_BYTES);
  let detail = '';
  try {
    validateBody(schema, { name: 'TOO-LONG-AND-UPPER', pad: big }, [], 70_100);
  } catch (err) {
    if (err instanceof ApiError) detail = JSON.stringify(err.extra.errors);
  }
  t.is(detail, JSON.stringify([{ pointer: '/name', detail: 'must NOT have more than 8 characters' }]));
});

test('whatever the string and limits, a string passes exactly when its code points are within them', (t) => {
  // Units drawn so that pairs, lone high and lone low surrogates and plain characters all occur.
  const unit = fc.oneof(fc.constantFrom('a', 'é', '\uD83D', '\uDE00', '\uD800', '\uDC00'), fc.constant('😀'));
  const agrees = fc.property(fc.array(unit, { maxLength: 24 }), fc.nat(12), fc.nat(12), (parts, a, b) => {
    const s = parts.join('');
    const [min, max] = a <= b ? [a, b] : [b, a];
    const n = [...s].length;
    const want = n > max ? [{ pointer: '/s', detail: `must NOT have more than ${max} characters` }] : n < min ? [{ pointer: '/s', detail: `must NOT have fewer than ${min} characters` }] : [];
    return JSON.stringify(failures(bounded(min, max), { s })) === JSON.stringify(want);
  });
  // fc.assert throws with the smallest counterexample it finds.
  t.notThrows(() => fc.assert(agrees, { numRuns: 2000 }));
});

test('every route body schema of every version compiles, for the first failure and for every failure', (t) => {
  const schemas = new Set(allRoutes().flatMap((r) => (r.body ? [r.body.schema] : [])));
  t.true(schemas.size > 10, `${schemas.size} schemas`);
  for (const schema of schemas) t.notThrows(() => compileSchema(schema));
});

test('the warm-up compiles each schema in a turn of its own, reports one that does not compile, and goes on', async (t) => {
  const errors: unknown[] = [];
  const bad = { type: 'object', properties: { a: { type: 'no-such-type' } } } as unknown as JsonSchema;
  const good = bounded(1, 3);
  const warming = warmValidators([bad, good], (err) => errors.push(err));
  t.is(errors.length, 0, 'nothing is compiled before the first turn');
  await warming.done;
  t.is(errors.length, 1);
  t.deepEqual(failures(good, { s: 'abcd' }), [{ pointer: '/s', detail: 'must NOT have more than 3 characters' }]);
});

test('a warm-up stopped before its first turn compiles nothing and still settles', async (t) => {
  const errors: unknown[] = [];
  const warming = warmValidators([{ type: 'object', properties: { a: { type: 'no-such-type' } } } as unknown as JsonSchema], (err) => errors.push(err));
  warming.stop();
  await warming.done;
  await new Promise((resolve) => setImmediate(resolve));
  t.is(errors.length, 0);
});

test('a body failing a schema no warm-up compiled lists every failure at once', (t) => {
  const schema: JsonSchema = { type: 'object', additionalProperties: false, properties: { a: { type: 'integer' }, b: { type: 'string' } } };
  t.deepEqual(
    failures(schema, { a: 'x', b: 1, c: true }).map((f) => f.pointer).sort(),
    ['/a', '/b', '/c'],
  );
});

test("the currencies taken are ISO 4217's, funds, metals and special codes included, and none it has withdrawn", (t) => {
  for (const code of ['EUR', 'USD', 'JPY', 'KWD', 'VED', 'ZWG', 'XCG', 'SLE', 'CHE', 'CHW', 'BOV', 'CLF', 'COU', 'MXV', 'USN', 'UYI', 'UYW', 'XAU', 'XDR', 'XTS', 'XXX']) {
    t.true(ISO_4217.has(code), code);
  }
  // Withdrawn (though Node's ICU still lists the first three), or never codes at all.
  for (const code of ['HRK', 'SLL', 'ZWL', 'DEM', 'ZZZ', 'eur']) t.false(ISO_4217.has(code), code);
  const schema: JsonSchema = { type: 'object', properties: { currency: newCurrencySchema } };
  t.deepEqual(failures(schema, { currency: 'VED' }), []);
  t.deepEqual(failures(schema, { currency: 'HRK' }), [{ pointer: '/currency', detail: 'is not an ISO 4217 currency code' }]);
});
