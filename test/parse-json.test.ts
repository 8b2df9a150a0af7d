// The gateway's JSON parse (gateway/pipeline.ts parseJson) answers every text as
// secure-json-parse does with both refusals on: the same value, or a throw with the same
// message. Its shortcut (no backslash, neither name as it is) must never let through a member
// that the library's escape-aware search would refuse.

import test from 'ava';
import fc from 'fast-check';
import secureJson from 'secure-json-parse';
import { parseJson } from '../gateway/pipeline.js';

type Outcome = { value: unknown } | { error: string };

function outcome(parse: () => unknown): Outcome {
  try {
    return { value: parse() };
  } catch (err) {
    return { error: `${(err as Error).name}: ${(err as Error).message}` };
  }
}

const library = (text: string): Outcome => outcome(() => secureJson.parse(text, { protoAction: 'error', constructorAction: 'error' }));

// Each letter of a name as it is or as a \u escape, in either case of hex digit.
function spelled(name: string): fc.Arbitrary<string> {
  return fc.tuple(...[...name].map((ch) => fc.constantFrom(ch, `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`, `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0').toUpperCase()}`))).map((parts) => parts.join(''));
}

const member = fc.oneof(spelled('__proto__'), spelled('constructor'), spelled('prototype'), fc.string(), fc.constantFrom('a', 'note', 'metadata'));
const leaf = fc.oneof(fc.constant('1'), fc.constant('null'), fc.constant('"x"'), fc.constant('"\\n"'), fc.constant('[]'), fc.constant('{}'));
const text: fc.Arbitrary<string> = fc.letrec<{ value: string }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    leaf,
    fc.array(tie('value'), { maxLength: 3 }).map((xs) => `[${xs.join(',')}]`),
    fc.array(fc.tuple(member, tie('value')), { maxLength: 3 }).map((ms) => `{${ms.map(([k, v]) => `${JSON.stringify(k).replace(/\\\\u/g, '\\u')}:${v}`).join(',')}}`),
  ),
})).value;

test('parses as secure-json-parse does, names spelled with escapes included', (t) => {
  fc.assert(
    fc.property(fc.oneof(text, fc.string(), text.map((s) => `\uFEFF${s}`)), (s) => {
      t.deepEqual(outcome(() => parseJson(s)), library(s), s);
    }),
    { numRuns: 2000 },
  );
});

test('a member named __proto__ or a constructor holding prototype is refused however it is spelled; the names elsewhere are not', (t) => {
  for (const s of ['{"__proto__":{}}', '{"\\u005f_proto__":{}}', '{"a":{"constructor":{"prototype":{}}}}', '{"\\u0063onstructor":{"prototype":1}}']) {
    t.regex((outcome(() => parseJson(s)) as { error?: string }).error ?? '', /forbidden prototype property/, s);
  }
  t.deepEqual(parseJson('{"note":"__proto__ and constructor","constructor":1}'), { note: '__proto__ and constructor', constructor: 1 });
});
