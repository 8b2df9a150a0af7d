// gateway/language.ts: Accept-Language matching (RFC 4647 filtering and lookup), and what a hostile
// header may cost. The HTTP behaviour is in helpers/article-suite.ts.

import test from 'ava';
import { acceptedLanguages, negotiateLanguage } from '../gateway/language.js';

const AVAILABLE = ['en', 'de', 'de-CH', 'fr-CA', 'zh-Hant-TW'];

function pick(header: string | undefined, available: readonly string[] = AVAILABLE, fallback = 'en'): string {
  return negotiateLanguage(acceptedLanguages(header), available, fallback);
}

test('filtering, lookup, q-values and exclusions', (t) => {
  t.is(pick(undefined), 'en');
  t.is(pick('  '), 'en');
  t.is(pick('de-ch'), 'de-CH');
  t.is(pick('de-AT'), 'de'); // lookup: de-AT falls back to de
  t.is(pick('fr'), 'fr-CA'); // filtering: fr matches fr-CA
  t.is(pick('zh-Hant-TW-x-private'), 'zh-Hant-TW'); // the private-use part goes with its singleton
  t.is(pick('ja, de;q=0.5, fr;q=0.7'), 'fr-CA');
  t.is(pick('*, en;q=0'), 'de');
  t.is(pick('de;q=bad, fr;q=0.1'), 'fr-CA');
});

test('a range of many subtags falls back by lookup like a short one', (t) => {
  const long = `de-ch-${Array.from({ length: 1250 }, () => 'bb').join('-')}`;
  t.is(pick(long), 'de-CH');
  t.is(pick(`zh-hant-tw-${'-abcdefgh'.repeat(400).slice(1)}`), 'zh-Hant-TW');
  t.is(pick(`xx-${'-bb'.repeat(1250).slice(1)}`, ['en', 'de']), 'en');
});

test('a range of many subtags is looked up only at prefixes short enough to be a tag', (t) => {
  // Each lookup of a prefix is one `find` over the languages on offer: a range of 1,250 subtags
  // took 1,250 of them, each after joining the subtags left (quadratic in the header's length).
  let finds = 0;
  const counted = new Proxy(['en', 'de'], {
    get(target, key, receiver) {
      if (key === 'find') finds++;
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
  const accepted = acceptedLanguages(`xx-${'-bb'.repeat(1250).slice(1)}`);
  t.is(accepted?.wanted.length, 1);
  t.is(negotiateLanguage(accepted, counted, 'en'), 'en');
  t.true(finds <= 20, `${finds} lookups`);
  t.true(finds > 0);
});
