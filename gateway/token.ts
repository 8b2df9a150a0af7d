// `npm run token -- --scope "orders:read orders:write" [--tenant t1] [--sub u1] [--expires-in 30d]`
// prints a bearer token signed with the service's secret (CONTRACT §1).

import { cliOptions, configured, usageError } from '../common/cli.js';
import { loadConfig } from '../common/config.js';
import { jwtSecret } from '../common/secret.js';
import { mintToken } from './auth.js';

const USAGE = 'usage: npm run token -- --scope "orders:read orders:write" [--tenant t1] [--sub u1] [--expires-in 30d]\n';

const values = cliOptions(USAGE, {
  scope: { type: 'string' },
  tenant: { type: 'string' },
  sub: { type: 'string', default: 'dev-user' },
  'expires-in': { type: 'string', default: '30d' },
});
if (!values.scope) usageError(USAGE);
const config = configured(() => loadConfig());
const claims: { sub: string; scope: string; tenant?: string } = { sub: values.sub!, scope: values.scope };
if (values.tenant) claims.tenant = values.tenant;
process.stdout.write(`${await mintToken(configured(() => jwtSecret(config.jwtSecret, config.dataDir)), claims, values['expires-in'])}\n`);
