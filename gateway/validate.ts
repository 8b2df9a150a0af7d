// Request bodies are checked against the route's JSON Schema with ajv, every failure at once
// (SPEC §7.1 rule 4), each reported as an RFC 6901 pointer into the body.

import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { ApiError, type FieldError } from '../common/errors.js';
import type { JsonSchema } from './route.js';

// allowUnionTypes: nullable members are written `type: ['string', 'null']`.
const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true, coerceTypes: false, useDefaults: false });
const compiled = new WeakMap<JsonSchema, ValidateFunction>();
export const MAX_REPORTED_ERRORS = 100;

function escapeToken(s: string): string {
  return s.replace(/~/g, '~0').replace(/\//g, '~1');
}

function toFieldError(e: ErrorObject, readOnly: ReadonlySet<string>): FieldError {
  const params = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'required':
      return { pointer: `${e.instancePath}/${escapeToken(String(params.missingProperty))}`, detail: 'is required' };
    case 'additionalProperties': {
      const name = String(params.additionalProperty);
      const top = e.instancePath === '';
      return {
        pointer: `${e.instancePath}/${escapeToken(name)}`,
        detail: top && readOnly.has(name) ? 'is read-only' : 'is not a known member',
      };
    }
    case 'propertyNames':
      return { pointer: `${e.instancePath}/${escapeToken(String(params.propertyName))}`, detail: 'is not an allowed member name' };
    default:
      return { pointer: e.instancePath, detail: e.message ?? 'is invalid' };
  }
}

export function validateBody(schema: JsonSchema, body: unknown, readOnly: readonly string[] = []): void {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  if (validate(body)) return;
  const ro = new Set(readOnly);
  // allErrors lists every failure; a hostile body can have tens of thousands, so the answer
  // names the first ones and says how many there were.
  const seen = new Set<string>();
  const errors: FieldError[] = [];
  for (const e of validate.errors ?? []) {
    // A bad member name also fails the sub-schema of propertyNames; report the name once.
    if (e.propertyName !== undefined) continue;
    const fe = toFieldError(e, ro);
    const key = `${fe.pointer}|${fe.detail}`;
    if (!seen.has(key)) errors.push(fe);
    seen.add(key);
  }
  const n = errors.length;
  const more = n > MAX_REPORTED_ERRORS ? `; the first ${MAX_REPORTED_ERRORS} are listed` : '';
  throw new ApiError('validation-failed', `The body has ${n} invalid member${n === 1 ? '' : 's'}${more}.`, { errors: errors.slice(0, MAX_REPORTED_ERRORS) });
}

/** Pre-compiles every schema so a bad schema fails at start, not on a request. */
export function compileSchema(schema: JsonSchema): void {
  if (!compiled.has(schema)) compiled.set(schema, ajv.compile(schema));
}
