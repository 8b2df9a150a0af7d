// SHARED_READS lists the reads whose answer the cluster bus shares between requests that leave
// together (common/nats-bus.ts). That is only right for reads the owner answers from committed
// state, with no effect: this holds the list to what the actor host treats as such.
import { join } from 'node:path';
import test from 'ava';
import { ActorHost } from '../actors/host.js';
import { allPartitions } from '../common/partitions.js';
import { SHARED_READS, type Command } from '../proto/messages.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';

test('every shared read is one the owner answers at once from committed state; a write is not', async (t) => {
  const dir = await tempDir('shared-reads');
  const host = new ActorHost({ dataDir: join(dir, 'actors'), partitions: allPartitions(), mailboxLimit: 10, log: silentLog() });
  t.teardown(async () => {
    await host.close();
    await removeDir(dir);
  });
  t.is(SHARED_READS.size, 10);
  for (const kind of SHARED_READS) {
    const cmd = { kind, tenant: 't1', partition: 3, id: 'x' } as Command;
    const answered = host.read(cmd);
    t.not(answered, undefined, `${kind} is answered by read()`);
    t.false(answered?.ok, `${kind} of an unknown id: not found`);
  }
  // The control: a write of one record is not a read, so it is never shared.
  t.is(host.read({ kind: 'order.pay', tenant: 't1', partition: 3, id: 'x', ifMatch: undefined }), undefined);
});
