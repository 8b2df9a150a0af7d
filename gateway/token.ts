// `npm run token -- --scope "orders:read orders:write" [--tenant t1] [--sub u1] [--expires-in 30d]`
// prints a bearer token signed with the service's secret (CONTRACT §1).

import { parseArgs } from 'node:util';
import { loadConfig } from '../common/config.js';
import { jwtSecret } from '../common/secret.js';
import { mintToken } from './auth.js';

const USAGE = 'usage: npm run token -- --scope "orders:read orders:write" [--tenant t1] [--sub u1] [--expires-in 30d]\n';

function usageError(problem?: string): never {
  process.stderr.write(problem ? `${problem}\n${USAGE}` : USAGE);
  process.exit(2);
}

let parsed;
try {
  parsed = parseArgs({
    options: {
      scope: { type: 'string' },
      tenant: { type: 'string' },
      sub: { type: 'string', default: 'dev-user' },
      'expires-in': { type: 'string', default: '30d' },
    },
  });
} catch (err) {
  // A misspelled option or a missing value is a usage error (exit 2), not a crash with a stack.
  usageError(err instanceof Error ? err.message : String(err));
}
const { values } = parsed;
if (!values.scope) usageError();
const config = loadConfig();
const claims: { sub: string; scope: string; tenant?: string } = { sub: values.sub!, scope: values.scope };
if (values.tenant) claims.tenant = values.tenant;
process.stdout.write(`${await mintToken(jwtSecret(config.jwtSecret, config.dataDir), claims, values['expires-in'])}\n`);
