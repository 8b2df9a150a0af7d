// The verified-token cache and the front of it that skips hashing the header: a cached header
// must answer its own principal only, and never once its token has expired.

import test from 'ava';
import { Authenticator, recentSlot } from '../gateway/auth.js';
import { token } from './helpers/edge-kit.js';

const SECRET = 'auth-test-secret-0123456789abcdef0123';

/** Headers of three callers (alice, then two others) that fall in the same slot of the front cache. */
async function collidingHeaders(): Promise<[string, string, string]> {
  const first = `Bearer ${await token(SECRET, 'orders:read', { sub: 'alice' })}`;
  const others: string[] = [];
  for (let i = 0; i < 2000 && others.length < 2; i++) {
    const other = `Bearer ${await token(SECRET, 'orders:read', { sub: `bob${i}` })}`;
    if (recentSlot(other) === recentSlot(first)) others.push(other);
  }
  if (others.length < 2) throw new Error('too few colliding headers in 2000 tokens');
  return [first, others[0]!, others[1]!];
}

test('headers sharing a slot of the front cache each answer their own caller', async (t) => {
  const auth = new Authenticator(SECRET);
  const [a, b, never] = await collidingHeaders();
  t.is((await auth.authenticate(a))?.sub, 'alice');
  const bSub = (await auth.authenticate(b))?.sub;
  t.regex(bSub ?? '', /^bob\d+$/);
  // Alternating lookups replace each other in the slot; each must still find its own entry.
  for (let i = 0; i < 4; i++) {
    t.is(auth.cached(a)?.sub, 'alice');
    t.is(auth.cached(b)?.sub, bSub);
  }
  // A header never verified is not answered from the slot it shares with verified ones.
  t.is(auth.cached(never), undefined);
  t.is(auth.cached(b)?.sub, bSub);
});

test.serial('a cached header stops answering once its token expires', async (t) => {
  const auth = new Authenticator(SECRET);
  const header = `Bearer ${await token(SECRET, 'orders:read', { sub: 'carol', expiresIn: '60s' })}`;
  t.is((await auth.authenticate(header))?.sub, 'carol');
  t.is(auth.cached(header)?.sub, 'carol'); // now held in the front too
  const realNow = Date.now;
  try {
    const later = realNow() + 61_000;
    Date.now = () => later;
    t.is(auth.cached(header), undefined);
    t.is(auth.cached(header), undefined);
  } finally {
    Date.now = realNow;
  }
  t.is(auth.cached(header)?.sub, 'carol');
});
