// `npm run admin -- <command>`: a small CLI over the operator plane (proto/operator.proto).
// It mints its own short-lived `admin` token from the service's secret, as `npm run token`
// does, unless --token or ADMIN_TOKEN gives one.

import * as grpc from '@grpc/grpc-js';
import { loadConfig } from '../common/config.js';
import { jwtSecret } from '../common/secret.js';
import { mintToken } from './auth.js';
import { configured, parseCommandLine, usageError as fail } from '../common/cli.js';
import { ADMIN_SCOPE, loadProtos, operatorAddress } from './operator.js';

const USAGE = `usage: npm run admin -- <command> [options]
  status                                   role, partitions owned, uptime
  deprecations                             lifecycle entries in force
  usage     [--route "GET /v1/orders/{orderId}"] [--since 2026-05-01] [--top 10]
  deprecate --path /v1/orders/{orderId} [--method GET] [--at <RFC 3339>] [--successor /v2/orders/{orderId}] [--guide /docs/migration-v1-v2]
  sunset    --path ... --at <RFC 3339>
  brownout  --path ... --start <RFC 3339> --end <RFC 3339> [--successor ...]   (a window not yet over needs a successor, here or already set)
  retire    --path ... [--successor ...]                                        (a successor is required, here or already set)
  activate  --path ...
options: --address host:port (default ADMIN_GRPC_HOST:ADMIN_GRPC_PORT), --token <JWT with the admin scope>
`;

const { values, positionals } = parseCommandLine(
  {
    allowPositionals: true,
    options: {
      address: { type: 'string' },
      token: { type: 'string' },
      method: { type: 'string', default: 'GET' },
      path: { type: 'string' },
      at: { type: 'string' },
      successor: { type: 'string' },
      guide: { type: 'string' },
      start: { type: 'string' },
      end: { type: 'string' },
      route: { type: 'string' },
      since: { type: 'string' },
      top: { type: 'string' },
    },
  },
  USAGE,
);
const usageError: (problem?: string) => never = (problem) => fail(USAGE, problem);
const command = positionals[0];
if (!command || positionals.length > 1) usageError();

const ACTIONS: Record<string, string> = { deprecate: 'DEPRECATE', sunset: 'SUNSET', brownout: 'BROWNOUT', retire: 'RETIRE', activate: 'ACTIVATE' };
let rpc: string;
let request: Record<string, unknown> = {};
if (command === 'status') rpc = 'getStatus';
else if (command === 'deprecations') rpc = 'listLifecycle';
else if (command === 'usage') {
  rpc = 'getUsage';
  const top = values.top === undefined ? 10 : Number(values.top);
  if (!Number.isInteger(top) || top < 1 || top > 1000) usageError('--top must be a whole number from 1 to 1000');
  request = { route: values.route ?? '', since: values.since ?? '', top };
} else if (ACTIONS[command]) {
  rpc = 'changeLifecycle';
  if (!values.path) usageError(`${command} needs --path, a route template such as /v1/orders/{orderId}`);
  request = {
    action: ACTIONS[command],
    method: values.method,
    path: values.path,
    at: values.at ?? '',
    successor: values.successor ?? '',
    guide: values.guide ?? '',
    start: values.start ?? '',
    end: values.end ?? '',
  };
} else {
  usageError(`unknown command '${command}'`);
}

const config = configured(() => loadConfig());
const address = values.address ?? operatorAddress(config);
if (!address) usageError('set ADMIN_GRPC_PORT (as the service has it) or pass --address host:port');
const token = values.token ?? process.env.ADMIN_TOKEN ?? (await mintToken(configured(() => jwtSecret(config.jwtSecret, config.dataDir)), { sub: 'admin-cli', scope: ADMIN_SCOPE }, '5m'));

const { operator } = loadProtos();
const client = new operator(address, grpc.credentials.createInsecure());
const metadata = new grpc.Metadata();
metadata.set('authorization', `Bearer ${token}`);
// The generated client's methods are looked up by name; each takes (request, metadata, options, callback).
const call = (client as unknown as Record<string, (req: unknown, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: unknown) => void) => void>)[rpc]!;
call.call(client, request, metadata, { deadline: Date.now() + 10_000 }, (err, res) => {
  client.close();
  if (err) {
    process.stderr.write(`${grpc.status[err.code] ?? err.code}: ${err.details}\n`);
    process.exit(1);
  }
  process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
});
