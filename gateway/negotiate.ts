// Content negotiation (SPEC §4.3, CONTRACT §5): the media type from Accept and the content
// coding from Accept-Encoding. The common headers take a fast path; anything else goes to
// `negotiator`, which implements the q-value rules of RFC 9110 §12.5.

import Negotiator from 'negotiator';
import { ApiError } from '../common/errors.js';

export const MEDIA_TYPES: readonly string[] = ['application/json', 'application/hal+json'];
export type MediaType = string;
export type Coding = 'br' | 'gzip' | 'identity';

const CODINGS: Coding[] = ['br', 'gzip', 'identity'];

/**
 * The first of `available` the client accepts; JSON routes take a fast path for the usual headers.
 * Every answer is UTF-8, so each type is offered with `charset=utf-8`: a range naming that
 * charset (in any case) matches, one naming another does not, one naming none matches as before.
 */
export function negotiateMediaType(accept: string | undefined, available: readonly string[] = MEDIA_TYPES): MediaType {
  if (accept === undefined || accept === '*/*' || (accept === available[0] && available === MEDIA_TYPES)) return available[0]!;
  const offers = available.map((type) => `${type};charset=utf-8`);
  const picked = new Negotiator({ headers: { accept } }).mediaType(offers);
  if (!picked) {
    throw new ApiError('not-acceptable', `None of the listed media types can be served; use ${available.join(' or ')}.`);
  }
  return available[offers.indexOf(picked)]!;
}

export function negotiateCoding(acceptEncoding: string | undefined): Coding {
  if (acceptEncoding === undefined || acceptEncoding === '') return 'identity';
  const negotiator = new Negotiator({ headers: { 'accept-encoding': acceptEncoding } });
  // negotiator 1.x takes a preference order for equal q-values; @types/negotiator predates it.
  const encodings = negotiator.encodings as (available: string[], opts: { preferred: string[] }) => string[];
  const list = encodings.call(negotiator, CODINGS, { preferred: CODINGS });
  // identity is acceptable unless explicitly refused; even then we send it rather than a 406
  // (RFC 9110 §12.5.3 allows either), since every client can read it.
  return (list[0] as Coding | undefined) ?? 'identity';
}
