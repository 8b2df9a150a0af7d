import { randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Buffer } from 'node:buffer';
import { ConfigError, MIN_SECRET_BYTES } from './config.js';

/**
 * The JWT secret: AUTH_JWT_SECRET, or in embedded mode one generated once into DATA_DIR and
 * reused, so `npm start` and `npm run token` agree without any setup (CONTRACT §1).
 */
export function jwtSecret(configured: string | undefined, dataDir: string): string {
  if (configured) return configured;
  const file = join(dataDir, 'jwt-secret');
  try {
    return checked(file, readFileSync(file, 'utf8').trim());
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(32).toString('base64url');
  // Written whole beside it and linked in place: a process racing this one finds no file or the
  // whole secret, never an empty one (now refused as too short). A failed link (EEXIST) means
  // another process won; both use its secret.
  // The temporary name is random and created exclusively ('wx'): a name by pid alone was shared
  // by processes in two containers on one DATA_DIR, and a file left over under it kept its old
  // mode when reused (0o600 applies only to a file created).
  const tmp = `${file}.${randomBytes(8).toString('hex')}.tmp`;
  try {
    // Inside the try: a write that fails part way (a full disk) leaves no partial secret behind.
    writeFileSync(tmp, `${secret}\n`, { mode: 0o600, flag: 'wx' });
    linkSync(tmp, file);
    return secret;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return checked(file, readFileSync(file, 'utf8').trim());
  } finally {
    // `force`: a file never made (the write failed before creating it) is no error.
    rmSync(tmp, { force: true });
  }
}

/**
 * The same floor as AUTH_JWT_SECRET: a file someone wrote by hand with a short (or no) key would
 * sign tokens that can be guessed offline from one of them. Never echoed.
 */
function checked(file: string, secret: string): string {
  const bytes = Buffer.byteLength(secret);
  if (bytes < MIN_SECRET_BYTES) throw new ConfigError(`${file} must hold a secret of at least ${MIN_SECRET_BYTES} bytes (256 bits, RFC 7518 §3.2), got ${bytes}; remove it to have one generated`);
  return secret;
}
