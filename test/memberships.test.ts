// Memberships have fixed ids (team, user): one removed and added again is a new membership at
// the same id. Its version, and so its ETag and any kept rendering, must never be one an earlier
// membership of the pair had, even when every write falls in one millisecond.

import test from 'ava';
import { ActorHost } from '../actors/host.js';
import { membershipId } from '../actors/teams.js';
import { newId, partitionFor } from '../common/ids.js';
import { allPartitions } from '../common/partitions.js';
import type { MembershipRecord, TeamRecord, UserRecord } from '../proto/messages.js';
import { removeDir, silentLog, tempDir } from './helpers/edge-kit.js';
import { ok } from './helpers/webhook-kit.js';

test('a membership removed and added again within one millisecond gets versions it never had', async (t) => {
  const dir = await tempDir('memberships');
  t.teardown(() => removeDir(dir));
  // A clock that never moves: every write in the same millisecond.
  const host = new ActorHost({ dataDir: dir, partitions: allPartitions(), mailboxLimit: 100, log: silentLog(), now: () => Date.UTC(2026, 10, 24) });
  t.teardown(() => host.close());
  const tenant = 'stamps';
  const partition = partitionFor(tenant);
  const team = await ok<TeamRecord>(host.handle({ kind: 'team.create', tenant, partition, id: newId('team', partition), name: 'Ops' }));
  const user = await ok<UserRecord>(host.handle({ kind: 'user.create', tenant, partition, id: newId('user', partition), input: { email: 'a@t.io', name: null } }));
  const id = membershipId(team.id, user.id);
  const seen: number[] = [];
  for (const role of ['member', 'owner', 'admin'] as const) {
    const added = await ok<MembershipRecord>(host.handle({ kind: 'member.add', tenant, partition, id, teamId: team.id, userId: user.id, role }));
    const patched = await ok<MembershipRecord>(host.handle({ kind: 'member.patch', tenant, partition, id, ifMatch: undefined, role }));
    const read = await ok<MembershipRecord>(host.handle({ kind: 'member.get', tenant, partition, id }));
    t.is(read.role, role, 'the read is the membership just written, not a kept earlier one');
    t.is(read.version, patched.version);
    seen.push(added.version, patched.version);
    await ok(host.handle({ kind: 'member.remove', tenant, partition, id, ifMatch: undefined }));
  }
  t.deepEqual([...seen].sort((a, b) => a - b), seen, 'versions only grow');
  t.is(new Set(seen).size, seen.length, 'no version repeats');
  t.true(seen.every((v) => String(v).length <= 15), 'each fits an ETag');
});
