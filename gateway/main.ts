// `npm start`: the gateway process. Without NATS_URL it is the whole service in one process
// (embedded mode); with NATS_URL it is a stateless gateway in front of actor nodes.

import { authorityOf, ConfigError, loadConfig } from '../common/config.js';
import { createLogger } from '../common/log.js';
import { collectWhenIdle } from '../common/idle-gc.js';
import { stopOnSignals } from '../common/shutdown.js';
import { startService } from './app.js';
import { LifecycleError } from './lifecycle.js';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger(config.logLevel, 'gateway');
  const service = await startService(config, log);
  // The one line scripts and tests wait for; keep its shape.
  process.stdout.write(`orders-api listening on ${service.url} (${service.mode} mode)\n`);
  // ADMIN_GRPC_PORT=0 picks a free port: this line is the only way to learn which.
  if (service.adminPort !== undefined) process.stdout.write(`operator plane on ${authorityOf(config.adminGrpcHost, service.adminPort)}\n`);
  if (service.mode === 'embedded') {
    process.stdout.write(
      `get a token: TOKEN=$(npm run -s token -- --scope "orders:read orders:write products:read products:write refunds:read refunds:write")\n` +
        `then: curl -H "Authorization: Bearer $TOKEN" ${service.url}/v1/orders\n`,
    );
  }
  const idle = collectWhenIdle();
  stopOnSignals(async () => {
    idle.stop();
    await service.close();
  }, log);
}

main().catch((err: unknown) => {
  // A short DATA_DIR/jwt-secret is found only as the service starts: said as a bad variable is.
  process.stderr.write(`${err instanceof ConfigError ? 'configuration error' : 'failed to start'}: ${err instanceof Error ? err.message : String(err)}\n`);
  // A refused DEPRECATIONS_FILE or DATA_DIR/jwt-secret is a configuration error, like a bad variable.
  process.exit(err instanceof LifecycleError || err instanceof ConfigError ? 2 : 1);
});
