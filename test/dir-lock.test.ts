// One process to a data directory (storage/dir-lock.ts): a second host on the same LMDB would run
// turns of the same keys beside the first one's and answer from records the first had changed.
// The lock is the kernel's (flock), so a process killed with SIGKILL leaves none behind.

import anyTest, { type TestFn } from 'ava';
import { ActorHost } from '../actors/host.js';
import { allPartitions } from '../common/partitions.js';
import { DirInUse } from '../storage/dir-lock.js';
import { exited, startChild, useChildren, type ChildContext } from './helpers/child-service.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';

const test = anyTest as TestFn<ChildContext>;
const SECRET = 'dir-lock-secret-0123456789abcdef0123';

useChildren(test, 'dir-lock');

test('a second host on a data directory in use is refused; once the first has closed, one opens', async (t) => {
  const dir = await tempDir('dir-lock-host');
  t.teardown(() => removeDir(dir));
  const open = (): ActorHost => new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: silentLog() });
  const first = open();
  await first.ready;
  t.throws(open, { instanceOf: DirInUse, message: /in use by another process/ });
  await first.close();
  const again = open();
  await again.ready;
  await again.close();
  t.pass();
});

test.serial('a second service started on the same DATA_DIR exits with the reason; after a SIGKILL of the first, a new one starts', async (t) => {
  const { dir, children } = t.context;
  const first = await startChild(children, dir, SECRET);
  const error = await t.throwsAsync(startChild(children, dir, SECRET));
  t.regex(error?.message ?? '', /in use by another process of this service/);
  t.is((await fetch(`${first.url}/v1/orders`)).status, 401, 'the first serves on');
  first.child.kill('SIGKILL');
  await exited(first.child);
  const next = await startChild(children, dir, SECRET);
  t.is((await fetch(`${next.url}/v1/orders`)).status, 401, 'the new one serves');
  next.child.kill('SIGKILL');
  await exited(next.child);
});
