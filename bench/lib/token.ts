// Tokens exactly as CONTRACT §3 describes them: HS256, sub / tenant / scope, signed with the
// secret the server under test was started with.
import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';

export const benchSecret = randomBytes(32).toString('base64url');

export async function mintToken(secret: string = benchSecret, tenant = 'bench'): Promise<string> {
  return new SignJWT({
    tenant,
    scope: 'orders:read orders:write products:read products:write users:read users:write teams:read teams:write refunds:read refunds:write',
  })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(`usr_${tenant}`)
    .setIssuedAt()
    .setExpirationTime('2h')
    .sign(new TextEncoder().encode(secret));
}
