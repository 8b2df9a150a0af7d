// Every schema a request meets, bounded: each number within the safe integer range, each string,
// array and open-ended object with a size limit. A route added without bounds fails here before
// a client finds out what 1e400 or a megabyte-long note does to it.

import test from 'ava';
import { allRoutes } from '../gateway/app.js';
import type { JsonSchema } from '../gateway/route.js';

// Formats whose grammar has a fixed width. date-time does not: it allows any number of
// fractional-second digits.
const BOUNDED_FORMATS = new Set(['date', 'uuid', 'ipv4']);

// Keywords whose sub-schemas constrain the value itself and so are walked. `not` is left out:
// bounds inside a negation bound nothing.
const UNDERSTOOD = new Set([
  'type', 'enum', 'const', 'description', 'examples', 'default', 'title',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf',
  'minLength', 'maxLength', 'pattern', 'format',
  'minItems', 'maxItems', 'uniqueItems', 'items',
  'properties', 'required', 'additionalProperties', 'propertyNames', 'minProperties', 'maxProperties',
  'not',
]);

/**
 * A pattern bounds a string's length when it is anchored at both ends and repeats nothing
 * without an upper bound (`*`, `+`, `{n,}`) outside character classes.
 */
function patternBounds(pattern: unknown): boolean {
  if (typeof pattern !== 'string' || !pattern.startsWith('^') || !pattern.endsWith('$') || pattern.endsWith('\\$')) return false;
  const bare = pattern.replace(/\\./g, 'x').replace(/\[[^\]]*\]/g, 'x');
  return !/[*+]|\{\d+,\}/.test(bare);
}

function isSafeInteger(n: unknown): boolean {
  return typeof n === 'number' && Number.isSafeInteger(n);
}

/** What is unbounded in `schema`, one line each, named by a JSON pointer into the schema. */
function unbounded(schema: JsonSchema, at: string, implicitType?: string): string[] {
  const out: string[] = [];
  for (const key of Object.keys(schema)) if (!UNDERSTOOD.has(key)) out.push(`${at}: keyword ${key} is not understood by this check`);
  const declared = schema.type === undefined ? [] : ([] as unknown[]).concat(schema.type);
  const types = declared.length === 0 && implicitType ? [implicitType] : (declared as string[]);
  const enumerated = schema.enum !== undefined || schema.const !== undefined;
  if (types.length === 0 && !enumerated) out.push(`${at}: no type, so any value`);
  if (!enumerated && (types.includes('integer') || types.includes('number'))) {
    const lo = schema.minimum ?? schema.exclusiveMinimum;
    const hi = schema.maximum ?? schema.exclusiveMaximum;
    if (!isSafeInteger(lo)) out.push(`${at}: no minimum within the safe integer range`);
    if (!isSafeInteger(hi)) out.push(`${at}: no maximum within the safe integer range`);
  }
  if (!enumerated && types.includes('string')) {
    const bounded = typeof schema.maxLength === 'number' || patternBounds(schema.pattern) || BOUNDED_FORMATS.has(String(schema.format));
    if (!bounded) out.push(`${at}: a string without maxLength or a pattern or format that bounds it`);
  }
  if (types.includes('array')) {
    if (typeof schema.maxItems !== 'number') out.push(`${at}: an array without maxItems`);
    if (schema.items === undefined) out.push(`${at}: an array without an items schema`);
  }
  if (types.includes('object') && schema.additionalProperties !== false && typeof schema.maxProperties !== 'number') {
    out.push(`${at}: an object open to any member names without maxProperties`);
  }
  const sub = (s: unknown, path: string, implicit?: string): void => {
    if (s && typeof s === 'object') out.push(...unbounded(s as JsonSchema, path, implicit));
  };
  for (const [name, s] of Object.entries((schema.properties ?? {}) as Record<string, unknown>)) sub(s, `${at}/properties/${name}`);
  sub(schema.items, `${at}/items`);
  sub(schema.additionalProperties, `${at}/additionalProperties`);
  // A member name is a string whether or not the schema says so.
  sub(schema.propertyNames, `${at}/propertyNames`, 'string');
  return out;
}

/** Every schema a request is checked against or documented with: bodies and query parameters. */
function requestSchemas(): [string, JsonSchema][] {
  const out: [string, JsonSchema][] = [];
  for (const r of allRoutes()) {
    if (r.body) out.push([`${r.method} ${r.path} body`, r.body.schema]);
    for (const [name, q] of Object.entries(r.query ?? {})) out.push([`${r.method} ${r.path} ?${name}`, q.schema]);
  }
  return out;
}

test('every number, string, array and map a request can carry is bounded', (t) => {
  const schemas = requestSchemas();
  t.true(schemas.filter(([where]) => where.endsWith(' body')).length >= 8, 'the route table has its body schemas');
  const problems = schemas.flatMap(([where, schema]) => unbounded(schema, where));
  t.deepEqual(problems, []);
});

test('the bounds check finds what it is for', (t) => {
  t.deepEqual(unbounded({ type: 'integer' }, '#'), ['#: no minimum within the safe integer range', '#: no maximum within the safe integer range']);
  t.deepEqual(unbounded({ type: 'number', minimum: 0, maximum: 1e300 }, '#'), ['#: no maximum within the safe integer range']);
  t.is(unbounded({ type: ['string', 'null'] }, '#').length, 1);
  t.is(unbounded({ type: 'string', pattern: '^[a-z]+$' }, '#').length, 1, 'an unbounded repeat');
  t.is(unbounded({ type: 'string', pattern: '^[a-z]{1,}$' }, '#').length, 1, 'an open-ended count');
  t.is(unbounded({ type: 'string', pattern: '[a-z]{3}' }, '#').length, 1, 'not anchored');
  t.is(unbounded({ type: 'string', format: 'date-time' }, '#').length, 1);
  t.deepEqual(unbounded({ type: 'string', pattern: '^[A-Z+*]{3}\\+?$' }, '#'), [], 'quantifier characters inside a class or escaped');
  t.deepEqual(unbounded({ type: 'string', enum: ['a', 'b'] }, '#'), []);
  t.is(unbounded({ type: 'array', items: { type: 'integer', minimum: 0, maximum: 1 } }, '#').length, 1, 'no maxItems');
  t.is(unbounded({ type: 'object', additionalProperties: { type: 'string', maxLength: 1 } }, '#').length, 1, 'no maxProperties');
  t.is(unbounded({ type: 'object', additionalProperties: false, properties: { n: { type: 'integer', minimum: 0 } } }, '#').length, 1, 'nested member');
  t.is(unbounded({ type: 'object', maxProperties: 1, propertyNames: { minLength: 1 } }, '#').length, 1, 'member names');
  t.is(unbounded({ type: 'object', maxProperties: 1, additionalProperties: false, anyOf: [] }, '#').length, 1, 'an unknown keyword');
});
