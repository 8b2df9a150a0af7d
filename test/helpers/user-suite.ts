// Users (CONTRACT §6): the uniform interface, email unique per tenant (also under concurrent
// creates through every gateway), and batch-get. Registered beside the order suite, so it runs in
// embedded mode and against two gateways over NATS in cluster mode.

import type { TestFn } from 'ava';
import { callersOn } from './client.js';
import { assertProblem, tenant, type SuiteContext } from './order-suite.js';

export function registerUserSuite(test: TestFn<SuiteContext>): void {
  test('users: create 201 with Location and ETag; GET, PUT, PATCH and DELETE follow; private, no-cache', async (t) => {
    const c = await tenant(t, 'usr');
    const created = await c.post('/v1/users', { email: 'Ada@Example.com', name: 'Ada' });
    t.is(created.status, 201, created.text);
    const id = created.json.id as string;
    t.regex(id, /^usr_/);
    t.is(created.headers.location, `/v1/users/${id}`);
    t.like(created.json, { email: 'Ada@Example.com', name: 'Ada' });
    const got = await c.get(`/v1/users/${id}`);
    t.is(got.status, 200);
    t.is(got.headers.etag, created.headers.etag);
    t.is(got.headers['cache-control'], 'private, no-cache');
    t.is((await c.get(`/v1/users/${id}`, { 'if-none-match': got.headers.etag! })).status, 304);
    const put = await c.put(`/v1/users/${id}`, { email: 'ada@example.org' }, { 'if-match': got.headers.etag! });
    t.is(put.status, 200, put.text);
    t.is(put.json.name, null, 'PUT clears what it omits');
    assertProblem(t, await c.patch(`/v1/users/${id}`, { name: 'x' }, { 'if-match': got.headers.etag! }), 412, 'precondition-failed');
    const patched = await c.patch(`/v1/users/${id}`, { name: 'Ada L.' });
    t.is(patched.status, 200);
    t.is(patched.json.email, 'ada@example.org');
    assertProblem(t, await c.post('/v1/users', { email: 'not-an-email' }), 422, 'validation-failed', { pointer: '/email' });
    assertProblem(t, await c.post('/v1/users', { email: 'a@b.c', id: 'usr_x' }), 422, 'validation-failed', { pointer: '/id' });
    t.is((await c.delete(`/v1/users/${id}`)).status, 204);
    t.is((await c.get(`/v1/users/${id}`)).status, 404);
    t.is((await c.delete(`/v1/users/${id}`)).status, 404);
  });

  test('users: email is unique per tenant ignoring case; a change frees the old one; a delete frees it too', async (t) => {
    const c = await tenant(t, 'usr');
    const other = await tenant(t, 'usr');
    const a = await c.post('/v1/users', { email: 'same@example.com' });
    t.is(a.status, 201);
    assertProblem(t, await c.post('/v1/users', { email: 'SAME@example.com' }), 409, 'conflict');
    t.is((await other.post('/v1/users', { email: 'same@example.com' })).status, 201, 'another tenant may use it');
    const b = await c.post('/v1/users', { email: 'b@example.com' });
    assertProblem(t, await c.patch(`/v1/users/${b.json.id}`, { email: 'Same@Example.com' }), 409, 'conflict');
    t.is((await c.patch(`/v1/users/${a.json.id}`, { email: 'moved@example.com' })).status, 200);
    t.is((await c.patch(`/v1/users/${b.json.id}`, { email: 'same@example.com' })).status, 200, 'the old email is free after the change');
    t.is((await c.delete(`/v1/users/${b.json.id}`)).status, 204);
    t.is((await c.post('/v1/users', { email: 'same@example.com' })).status, 201, 'and free again after the delete');
  });

  test('users: concurrent creates with one email through every gateway make exactly one user', async (t) => {
    const c = await tenant(t, 'usr-race');
    const { callers, close } = callersOn(c, t.context.service.urls);
    try {
      const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => callers[i % callers.length]!.post('/v1/users', { email: `race@example.com`, name: `n${i}` })));
      t.is(answers.filter((r) => r.status === 201).length, 1, answers.map((r) => r.status).join(','));
      for (const r of answers.filter((x) => x.status !== 201)) assertProblem(t, r, 409, 'conflict');
      const list = await c.get('/v1/users');
      t.is(list.json.data.length, 1);
    } finally {
      await close();
    }
  });

  test('users: batch-get answers the found users in request order, and notFound; over 100 ids is 413', async (t) => {
    const c = await tenant(t, 'usr');
    const other = await tenant(t, 'usr');
    const ids: string[] = [];
    for (const e of ['x@a.io', 'y@a.io', 'z@a.io']) ids.push((await c.post('/v1/users', { email: e })).json.id);
    const foreign = (await other.post('/v1/users', { email: 'f@a.io' })).json.id as string;
    const res = await c.post('/v1/users/batch-get', { ids: [ids[2], 'usr_nope', ids[0], foreign, ids[2]] });
    t.is(res.status, 200, res.text);
    t.deepEqual(res.json.data.map((u: { id: string }) => u.id), [ids[2], ids[0]]);
    t.deepEqual(res.json.notFound, ['usr_nope', foreign]);
    t.is(res.json.data[0].email, 'z@a.io');
    // What is read is the user as it is now: after a change, and after a delete.
    t.is((await c.patch(`/v1/users/${ids[0]}`, { name: 'Renamed' })).status, 200);
    t.is((await c.delete(`/v1/users/${ids[1]}`)).status, 204);
    const again = await c.post('/v1/users/batch-get', { ids: [ids[0], ids[1], 'ord_00000000000000000000000', '../x'] });
    t.is(again.status, 200, again.text);
    t.deepEqual(again.json.data.map((u: { id: string; name: string }) => [u.id, u.name]), [[ids[0], 'Renamed']]);
    t.deepEqual(again.json.notFound, [ids[1], 'ord_00000000000000000000000', '../x']);
    assertProblem(t, await c.post('/v1/users/batch-get', { ids: Array.from({ length: 101 }, (_, i) => `usr_${i}`) }), 413, 'payload-too-large');
    assertProblem(t, await c.post('/v1/users/batch-get', { ids: [] }), 422, 'validation-failed');
  });

  test('users: the list sorts by email and pages with next; another tenant sees none; scopes apply', async (t) => {
    const c = await tenant(t, 'usr');
    for (const e of ['c@x.io', 'a@x.io', 'B@x.io']) t.is((await c.post('/v1/users', { email: e })).status, 201);
    const first = await c.get('/v1/users?sort=email&limit=2');
    t.is(first.status, 200);
    t.deepEqual(first.json.data.map((u: { email: string }) => u.email), ['a@x.io', 'B@x.io']);
    const second = await c.get(first.json._links.next.href);
    t.deepEqual(second.json.data.map((u: { email: string }) => u.email), ['c@x.io']);
    t.false(second.json.hasMore);
    const stranger = await tenant(t, 'usr');
    t.is((await stranger.get('/v1/users')).json.data.length, 0);
    const readOnly = await tenant(t, 'usr', 'users:read');
    assertProblem(t, await readOnly.post('/v1/users', { email: 'q@x.io' }), 403, 'forbidden');
  });

  test('teams: create, read, list; members join with a role (201, Location, joinedAt), a repeat is 409, an unknown user 422', async (t) => {
    const c = await tenant(t, 'team');
    const team = await c.post('/v1/teams', { name: 'Core' });
    t.is(team.status, 201, team.text);
    const teamId = team.json.id as string;
    t.is(team.headers.location, `/v1/teams/${teamId}`);
    t.is((await c.get(`/v1/teams/${teamId}`)).json.name, 'Core');
    t.deepEqual((await c.get('/v1/teams')).json.data.map((x: { id: string }) => x.id), [teamId]);
    const u1 = (await c.post('/v1/users', { email: 'm1@t.io' })).json.id as string;
    const u2 = (await c.post('/v1/users', { email: 'm2@t.io' })).json.id as string;
    const added = await c.post(`/v1/teams/${teamId}/members`, { userId: u1, role: 'owner' });
    t.is(added.status, 201, added.text);
    t.is(added.headers.location, `/v1/teams/${teamId}/members/${u1}`);
    t.like(added.json, { userId: u1, teamId, role: 'owner' });
    t.regex(added.json.joinedAt, /^\d{4}-\d{2}-\d{2}T/);
    assertProblem(t, await c.post(`/v1/teams/${teamId}/members`, { userId: u1, role: 'member' }), 409, 'conflict');
    assertProblem(t, await c.post(`/v1/teams/${teamId}/members`, { userId: 'usr_nope', role: 'member' }), 422, 'validation-failed', { pointer: '/userId' });
    assertProblem(t, await c.post(`/v1/teams/${teamId}/members`, { userId: u2, role: 'boss' }), 422, 'validation-failed', { pointer: '/role' });
    assertProblem(t, await c.post(`/v1/teams/${teamId}/members`, { userId: u2, role: 'member', joinedAt: '2020-01-01T00:00:00.000Z' }), 422, 'validation-failed', { pointer: '/joinedAt' });
    t.is((await c.post(`/v1/teams/${teamId}/members`, { userId: u2, role: 'member' })).status, 201);
    const list = await c.get(`/v1/teams/${teamId}/members?limit=1`);
    t.deepEqual(list.json.data.map((m: { userId: string }) => m.userId), [u1]);
    t.deepEqual((await c.get(list.json._links.next.href)).json.data.map((m: { userId: string }) => m.userId), [u2]);
    const one = await c.get(`/v1/teams/${teamId}/members/${u2}`);
    t.is(one.status, 200);
    const patched = await c.patch(`/v1/teams/${teamId}/members/${u2}`, { role: 'admin' }, { 'if-match': one.headers.etag! });
    t.is(patched.json.role, 'admin');
    t.is(patched.json.joinedAt, one.json.joinedAt, 'joinedAt stays');
    t.is((await c.delete(`/v1/teams/${teamId}/members/${u2}`)).status, 204);
    t.is((await c.get(`/v1/teams/${teamId}/members/${u2}`)).status, 404);
    assertProblem(t, await c.get('/v1/teams/team_nope/members'), 404, 'not-found');
    const stranger = await tenant(t, 'team');
    t.is((await stranger.get(`/v1/teams/${teamId}`)).status, 404);
    assertProblem(t, await stranger.post(`/v1/teams/${teamId}/members`, { userId: u1, role: 'member' }), 404, 'not-found');
  });

  test('teams: a member removed and added again is a new membership: its own role, joinedAt and ETag', async (t) => {
    const c = await tenant(t, 'rejoin');
    const teamId = (await c.post('/v1/teams', { name: 'Ops' })).json.id as string;
    const userId = (await c.post('/v1/users', { email: 'r@t.io' })).json.id as string;
    const href = `/v1/teams/${teamId}/members/${userId}`;
    const first = await c.post(`/v1/teams/${teamId}/members`, { userId, role: 'member' });
    t.is(first.status, 201, first.text);
    const read = await c.get(href);
    t.is(read.json.role, 'member');
    t.is((await c.delete(href)).status, 204);
    await new Promise((resolve) => setTimeout(resolve, 2));
    const again = await c.post(`/v1/teams/${teamId}/members`, { userId, role: 'owner' });
    t.is(again.status, 201, again.text);
    t.is(again.json.role, 'owner');
    t.not(again.headers.etag, first.headers.etag);
    const now = await c.get(href);
    t.like(now.json, { role: 'owner', joinedAt: again.json.joinedAt });
    t.not(now.json.joinedAt, read.json.joinedAt);
    t.is((await c.get(href, { 'if-none-match': first.headers.etag! })).status, 200, 'the old tag does not revalidate');
    assertProblem(t, await c.patch(href, { role: 'admin' }, { 'if-match': first.headers.etag! }), 412, 'precondition-failed');
    const listed = (await c.get(`/v1/teams/${teamId}/members`)).json.data as { role: string }[];
    t.deepEqual(listed.map((m) => m.role), ['owner']);
  });

  test('teams: deleting a user removes its memberships; deleting a team removes the team and its memberships', async (t) => {
    const c = await tenant(t, 'team');
    const a = (await c.post('/v1/teams', { name: 'A' })).json.id as string;
    const b = (await c.post('/v1/teams', { name: 'B' })).json.id as string;
    const u = (await c.post('/v1/users', { email: 'leaver@t.io' })).json.id as string;
    const v = (await c.post('/v1/users', { email: 'stayer@t.io' })).json.id as string;
    for (const team of [a, b]) for (const user of [u, v]) t.is((await c.post(`/v1/teams/${team}/members`, { userId: user, role: 'member' })).status, 201);
    t.is((await c.delete(`/v1/users/${u}`)).status, 204);
    for (const team of [a, b]) {
      t.deepEqual((await c.get(`/v1/teams/${team}/members`)).json.data.map((m: { userId: string }) => m.userId), [v], 'only the remaining user');
      t.is((await c.get(`/v1/teams/${team}/members/${u}`)).status, 404);
    }
    t.is((await c.delete(`/v1/teams/${a}`)).status, 204);
    t.is((await c.get(`/v1/teams/${a}`)).status, 404);
    t.is((await c.get(`/v1/teams/${a}/members/${v}`)).status, 404, "the team's memberships went with it");
    t.is((await c.get(`/v1/teams/${b}/members/${v}`)).status, 200, "another team's are untouched");
  });
}
