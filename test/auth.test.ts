// The verified-token cache and the front of it that skips hashing the header: a cached header
// must answer its own principal only, and never once its token has expired.

import test from 'ava';
import { SignJWT } from 'jose';
import { ApiError } from '../common/errors.js';
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

/** A token with the claims given as they are, signed with `secret`. */
function signed(claims: Record<string, unknown>, secret = SECRET): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(new TextEncoder().encode(secret));
}

async function refusedWith(auth: Authenticator, header: string): Promise<ApiError> {
  const err = await auth.authenticate(header).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof ApiError)) throw new Error(`${header} was not refused with a problem: ${String(err)}`);
  return err;
}

test('a token refused for good is refused again from the first answer, without a verification', async (t) => {
  const auth = new Authenticator(SECRET);
  const past = Math.floor(Date.now() / 1000) - 60;
  const cases: [string, string, RegExp][] = [
    ['expired', `Bearer ${await signed({ sub: 'dave', exp: past })}`, /expired/],
    ['badly signed', `Bearer ${await signed({ sub: 'dave' }, 'another-secret-0123456789abcdef0123')}`, /signature is invalid/],
    ['malformed', 'Bearer abc.def.ghi', /malformed/],
    ['without sub', `Bearer ${await signed({ scope: 'orders:read' })}`, /no valid sub/],
    ['with a bad tenant', `Bearer ${await signed({ sub: 'dave', tenant: 'a\u0000b' })}`, /invalid tenant/],
  ];
  for (const [what, header, detail] of cases) {
    t.is(auth.refusal(header), undefined, what);
    const first = await refusedWith(auth, header);
    t.is(first.status, 401, what);
    t.regex(first.detail, detail, what);
    t.is(auth.refusal(header), first, `${what}: kept`);
    t.is(await refusedWith(auth, header), first, `${what}: the same answer`);
    t.is(auth.cached(header), undefined, what);
  }
});

test('a token not valid yet (nbf ahead) is refused, not kept refused, and accepted once valid', async (t) => {
  const auth = new Authenticator(SECRET);
  const nbf = Math.floor(Date.now() / 1000) + 1;
  const header = `Bearer ${await signed({ sub: 'erin', nbf })}`;
  t.is((await refusedWith(auth, header)).status, 401);
  t.is(auth.refusal(header), undefined);
  await new Promise((resolve) => setTimeout(resolve, nbf * 1000 + 50 - Date.now()));
  t.is((await auth.authenticate(header))?.sub, 'erin');
});

test('requests bringing the same new header while it is verified share one verification', async (t) => {
  const auth = new Authenticator(SECRET);
  const header = `Bearer ${await token(SECRET, 'orders:read', { sub: 'frank' })}`;
  t.true(auth.needsVerification(header));
  const first = auth.authenticate(header);
  t.false(auth.needsVerification(header), 'under way');
  t.is(auth.authenticate(header), first);
  t.is((await first)?.sub, 'frank');
  t.false(auth.needsVerification(header), 'verified');
  t.false(auth.needsVerification('Basic YTpi'), 'refused without a verification');
  const forged = `Bearer ${await signed({ sub: 'frank' }, 'another-secret-0123456789abcdef0123')}`;
  await refusedWith(auth, forged);
  t.false(auth.needsVerification(forged), 'refused for good');
});

test.serial('a kept refusal is forgotten after an hour, so a refusal made under a clock that ran ahead does not last', async (t) => {
  const auth = new Authenticator(SECRET);
  const header = `Bearer ${await signed({ sub: 'gina' }, 'another-secret-0123456789abcdef0123')}`;
  const first = await refusedWith(auth, header);
  t.is(auth.refusal(header), first);
  const realNow = Date.now;
  try {
    const later = realNow() + 59 * 60_000;
    Date.now = () => later;
    t.is(auth.refusal(header), first, 'kept within the hour');
    const past = realNow() + 61 * 60_000;
    Date.now = () => past;
    t.is(auth.refusal(header), undefined);
    t.true(auth.needsVerification(header), 'verified again');
  } finally {
    Date.now = realNow;
  }
});

test('a token signed with the secret under another algorithm than HS256 is refused 401', async (t) => {
  const auth = new Authenticator(SECRET);
  for (const alg of ['HS384', 'HS512'] as const) {
    const tok = await new SignJWT({ sub: 'u1', scope: 'orders:read' }).setProtectedHeader({ alg, typ: 'JWT' }).setExpirationTime('1h').sign(new TextEncoder().encode(SECRET));
    const err = await refusedWith(auth, `Bearer ${tok}`);
    t.is(err.status, 401, alg);
  }
  // The same claims under HS256 pass.
  t.is((await auth.authenticate(`Bearer ${await token(SECRET, 'orders:read', { sub: 'u1' })}`))?.sub, 'u1');
});
