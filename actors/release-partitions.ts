// `npm run release-partitions -- <ranges>`: forgets which store holds these partitions, so that
// another node's store may serve them (common/nats-partition-owners.ts). For a node whose
// DATA_DIR is lost for good: the partitions' data went with it, and they are served empty.

import { connect } from 'nats';
import { parseCommandLine, usageError } from '../common/cli.js';
import { releasePartitions } from '../common/nats-partition-owners.js';
import { parsePartitions } from '../common/partitions.js';

const USAGE = 'usage: NATS_URL=nats://host:4222 npm run release-partitions -- <ranges, e.g. 0-127 or 0-63,128-191>\n';

async function main(): Promise<void> {
  const { positionals } = parseCommandLine({ allowPositionals: true, options: {} }, USAGE);
  const url = process.env.NATS_URL;
  if (!url) usageError(USAGE, 'NATS_URL must name the cluster\'s NATS server');
  if (positionals.length !== 1) usageError(USAGE);
  let partitions: number[];
  try {
    partitions = parsePartitions(positionals[0]);
  } catch (err) {
    usageError(USAGE, err instanceof Error ? err.message : String(err));
  }
  const nc = await connect({ servers: url, name: 'release-partitions' });
  try {
    const released = await releasePartitions(nc, partitions);
    process.stdout.write(`released ${released} of ${partitions.length} partitions; the next node to claim them serves them\n`);
  } finally {
    await nc.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
