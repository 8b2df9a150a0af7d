// ISO 4217 currency codes: the ones money may be written in. A fixed list, not the runtime's
// (Node's ICU lists codes ISO has withdrawn, HRK and SLL among them, and none of its fund,
// metal or special codes), so every gateway and node, whatever its Node, takes the same codes.

import { ApiError } from './errors.js';

/**
 * ISO 4217 List One as published 2024-06-25 (the `currency-codes` package's copy of ISO's file),
 * with XCG, added since (the Caribbean guilder, from 2025; ANG stays for the records written in
 * it). Update it from ISO's list_one.xml when ISO amends the standard.
 */
export const ISO_4217: ReadonlySet<string> = new Set([
  'AED', 'AFN', 'ALL', 'AMD', 'ANG', 'AOA', 'ARS', 'AUD', 'AWG', 'AZN', 'BAM', 'BBD', 'BDT', 'BGN', 'BHD', 'BIF',
  'BMD', 'BND', 'BOB', 'BOV', 'BRL', 'BSD', 'BTN', 'BWP', 'BYN', 'BZD', 'CAD', 'CDF', 'CHE', 'CHF', 'CHW', 'CLF',
  'CLP', 'CNY', 'COP', 'COU', 'CRC', 'CUC', 'CUP', 'CVE', 'CZK', 'DJF', 'DKK', 'DOP', 'DZD', 'EGP', 'ERN', 'ETB',
  'EUR', 'FJD', 'FKP', 'GBP', 'GEL', 'GHS', 'GIP', 'GMD', 'GNF', 'GTQ', 'GYD', 'HKD', 'HNL', 'HTG', 'HUF', 'IDR',
  'ILS', 'INR', 'IQD', 'IRR', 'ISK', 'JMD', 'JOD', 'JPY', 'KES', 'KGS', 'KHR', 'KMF', 'KPW', 'KRW', 'KWD', 'KYD',
  'KZT', 'LAK', 'LBP', 'LKR', 'LRD', 'LSL', 'LYD', 'MAD', 'MDL', 'MGA', 'MKD', 'MMK', 'MNT', 'MOP', 'MRU', 'MUR',
  'MVR', 'MWK', 'MXN', 'MXV', 'MYR', 'MZN', 'NAD', 'NGN', 'NIO', 'NOK', 'NPR', 'NZD', 'OMR', 'PAB', 'PEN', 'PGK',
  'PHP', 'PKR', 'PLN', 'PYG', 'QAR', 'RON', 'RSD', 'RUB', 'RWF', 'SAR', 'SBD', 'SCR', 'SDG', 'SEK', 'SGD', 'SHP',
  'SLE', 'SOS', 'SRD', 'SSP', 'STN', 'SVC', 'SYP', 'SZL', 'THB', 'TJS', 'TMT', 'TND', 'TOP', 'TRY', 'TTD', 'TWD',
  'TZS', 'UAH', 'UGX', 'USD', 'USN', 'UYI', 'UYU', 'UYW', 'UZS', 'VED', 'VES', 'VND', 'VUV', 'WST', 'XAF', 'XAG',
  'XAU', 'XBA', 'XBB', 'XBC', 'XBD', 'XCD', 'XCG', 'XDR', 'XOF', 'XPD', 'XPF', 'XPT', 'XSU', 'XTS', 'XUA', 'XXX',
  'YER', 'ZAR', 'ZMW', 'ZWG',
]);

/** What a currency outside ISO_4217 is told, wherever it is refused. */
export const NOT_ISO_4217 = 'is not an ISO 4217 currency code';

/**
 * Refuses (422) a currency a write would give a record when ISO 4217 does not list it. A
 * currency the record holds already passes as it is: records written before codes were checked
 * stay writable with their own.
 */
export function checkCurrencyChange(next: string | undefined, held: string | undefined): void {
  if (next === undefined || next === held || ISO_4217.has(next)) return;
  throw new ApiError('validation-failed', 'The body has 1 invalid member.', { errors: [{ pointer: '/currency', detail: NOT_ISO_4217 }] });
}
