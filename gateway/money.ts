// Money on the wire. v1 writes integer minor units beside a currency; v2 (CONTRACT §9) writes a
// decimal string object, `{ "amount": "19.99", "currency": "EUR" }`, because an integer alone
// is ambiguous across currencies whose minor unit is not a hundredth. Orders, line items and
// refunds all render money through `renderMoney`, keyed on the currency's minor-unit exponent.

import { ApiError } from '../common/errors.js';
import type { JsonSchema } from './route.js';
import type { ApiVersion } from './versions.js';

// ISO 4217 currencies whose minor unit is not 2 decimals. Every other code has 2 (the standard's
// default for the vast majority); X-codes without a minor unit (XAU, XDR, ...) are listed as 0.
const EXPONENTS: Record<string, number> = {
  BIF: 0, CLP: 0, DJF: 0, GNF: 0, ISK: 0, JPY: 0, KMF: 0, KRW: 0, PYG: 0, RWF: 0, UGX: 0, UYI: 0,
  VND: 0, VUV: 0, XAF: 0, XOF: 0, XPF: 0, XAG: 0, XAU: 0, XBA: 0, XBB: 0, XBC: 0, XBD: 0, XDR: 0,
  XPD: 0, XPT: 0, XSU: 0, XTS: 0, XUA: 0, XXX: 0,
  BHD: 3, IQD: 3, JOD: 3, KWD: 3, LYD: 3, OMR: 3, TND: 3,
  CLF: 4, UYW: 4,
};

/**
 * The `format` of a currency a write gives a new record (an order, a product): a code ISO 4217
 * lists (common/currencies.ts; gateway/validate.ts checks it). Any other three capitals are a 422.
 */
export const CURRENCY_FORMAT = 'iso-4217';

/** Decimals of the currency's minor unit (ISO 4217): JPY 0, EUR 2, KWD 3. */
export function minorUnitExponent(currency: string): number {
  return EXPONENTS[currency] ?? 2;
}

export interface Money {
  /** Decimal string with exactly the currency's number of decimals, e.g. "19.99", "500", "1.250". */
  amount: string;
  currency: string;
}

/** Integer minor units → the v2 money object. */
export function renderMoney(minor: number, currency: string): Money {
  const exp = minorUnitExponent(currency);
  const sign = minor < 0 ? '-' : '';
  const digits = String(Math.abs(minor));
  if (exp === 0) return { amount: `${sign}${digits}`, currency };
  const padded = digits.padStart(exp + 1, '0');
  return { amount: `${sign}${padded.slice(0, -exp)}.${padded.slice(-exp)}`, currency };
}

/** An amount as API version `v` writes it: integer minor units (v1, beside a currency) or a money object (v2). */
export function moneyFor(minor: number, currency: string, v: ApiVersion): number | Money {
  return v === 'v1' ? minor : renderMoney(minor, currency);
}

/** The JSON Schema of a v2 money object as a client writes it (non-negative, at most 3 decimals). */
export function moneyInputSchema(description: string, maxMinor: number): JsonSchema {
  return {
    type: 'object',
    additionalProperties: false,
    required: ['amount', 'currency'],
    description,
    properties: {
      // Up to 16 digits before the point: 1e15 minor units of a currency without decimals.
      amount: { type: 'string', pattern: '^(0|[1-9][0-9]{0,15})(\\.[0-9]{1,4})?$', maxLength: 21, description: `Decimal string; at most ${maxMinor} in minor units.` },
      // The order's own, which its owner checks: an order written before codes were checked keeps one ISO does not list.
      currency: { type: 'string', pattern: '^[A-Z]{3}$', description: 'ISO 4217 code.' },
    },
  };
}

export const moneySchema: JsonSchema = {
  type: 'object',
  properties: {
    amount: { type: 'string', description: 'Decimal string with the currency\'s number of decimals (ISO 4217 minor unit).', examples: ['19.99'] },
    currency: { type: 'string', pattern: '^[A-Z]{3}$' },
  },
  required: ['amount', 'currency'],
};

/**
 * A v2 money object (already schema-checked) → integer minor units of `currency`. 422 at
 * `pointer` when it names another currency, has more decimals than the currency's minor unit,
 * or exceeds `maxMinor`.
 */
export function parseMoney(value: Money, currency: string, pointer: string, maxMinor: number): number {
  const fail = (member: string, detail: string): never => {
    throw new ApiError('validation-failed', 'An amount cannot be used.', { errors: [{ pointer: `${pointer}/${member}`, detail }] });
  };
  if (value.currency !== currency) fail('currency', `must be ${currency}, the currency of the order`);
  const exp = minorUnitExponent(currency);
  const [whole, frac = ''] = value.amount.split('.');
  if (frac.length > exp) fail('amount', exp === 0 ? `must be a whole number: ${currency} has no minor unit` : `has more than ${exp} decimals, the minor unit of ${currency}`);
  const minor = Number(`${whole}${frac.padEnd(exp, '0')}`);
  if (!Number.isSafeInteger(minor) || minor > maxMinor) fail('amount', `must be at most ${renderMoney(maxMinor, currency).amount}`);
  return minor;
}
