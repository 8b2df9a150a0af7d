// Where webhooks may go (issue 5, CONTRACT §10): https only, public addresses only, checked at
// registration (422 with the reason) and again at every delivery after DNS resolution (a name
// that later resolves to 127.0.0.1 reaches nothing); and TLS that verifies the receiver's
// certificate against a test CA the dispatcher is told to trust.

import test from 'ava';
import { setTimeout as delay } from 'node:timers/promises';
import { boundedResolver, parseTarget, refusedAddress, TargetRefused, type Address, type Resolver } from '../actors/webhook-target.js';
import { verifyWebhook } from '../common/webhook-signature.js';
import { makeTestCa, startReceiver, startWebhookService, until, WEBHOOK_SCOPES } from './helpers/webhook-kit.js';

const PUBLIC = '93.184.216.34';

test('private, reserved and special addresses are refused; public ones pass', (t) => {
  for (const a of [
    '127.0.0.1',
    '127.255.0.9',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '100.127.255.254',
    '0.0.0.0',
    '0.1.2.3',
    '240.0.0.1',
    '255.255.255.255',
    '224.0.0.1',
    '239.255.255.250',
    '192.0.2.10',
    '198.51.100.7',
    '203.0.113.200',
    '198.18.0.1',
    '::1',
    '::',
    'fe80::1',
    'fc00::1',
    'fd12:3456::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:8.8.8.8',
    '2001:db8::1',
    '3fff::1',
    '::ffff:0:7f00:1',
    '64:ff9b::7f00:1',
    '64:ff9b:1::a9fe:a9fe',
  ]) {
    t.truthy(refusedAddress(a), a);
  }
  for (const a of [PUBLIC, '8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700:4700::1111']) t.is(refusedAddress(a), undefined, a);
});

test('URL forms: https only, no credentials, every spelling of a private IPv4 literal refused', (t) => {
  for (const raw of ['https://2130706433/', 'https://0177.0.0.1/', 'https://0x7f.1/', 'https://0x7f000001/', 'https://127.1/', 'https://[::ffff:7f00:1]/', 'https://[::1]:8443/', 'https://169.254.169.254/latest/meta-data/', 'https://0/']) {
    t.throws(() => parseTarget(raw, false), { instanceOf: TargetRefused }, raw);
  }
  t.throws(() => parseTarget(`http://${PUBLIC}/`, false), { message: /https/ });
  t.throws(() => parseTarget(`https://u:p@${PUBLIC}/`, false), { message: /credentials/ });
  t.throws(() => parseTarget('not a url', false), { instanceOf: TargetRefused });
  t.is(parseTarget(`https://${PUBLIC}/hook`, false).hostname, PUBLIC);
  t.is(parseTarget('http://127.0.0.1:3000/', true).port, '3000');
});

test('a resolution is refused past its deadline, and at most two system lookups run at once; a slot frees when its lookup ends, however late', async (t) => {
  const answer = new Map<string, (found: Address[]) => void>();
  const started: string[] = [];
  // A name server that answers only when told to.
  const inner: Resolver = (host) => {
    started.push(host);
    return new Promise((done) => answer.set(host, done));
  };
  const resolve = boundedResolver(inner, 200, 2);
  const found: Address[] = [{ address: PUBLIC, family: 4 }];
  const [a, b, c] = [resolve('a.test'), resolve('b.test'), resolve('c.test')];
  t.deepEqual(started, ['a.test', 'b.test'], 'a third lookup waits for a slot');
  answer.get('a.test')!(found);
  t.deepEqual(await a, found);
  t.deepEqual(started, ['a.test', 'b.test', 'c.test'], 'the slot a answered frees is taken');
  // b and c never answer: each call is refused at its deadline, and both keep their slots.
  await t.throwsAsync(b, { message: /b\.test took over 200 ms/ });
  await t.throwsAsync(c, { message: /c\.test took over 200 ms/ });
  const d = resolve('d.test');
  await t.throwsAsync(d, { message: /took over 200 ms/ });
  t.false(started.includes('d.test'), 'a lookup started while both slots were held');
  // b's lookup ends after all: its slot is free again, and the next call starts at once.
  answer.get('b.test')!([]);
  await delay(0);
  const e = resolve('e.test');
  t.true(started.includes('e.test'));
  answer.get('e.test')!(found);
  t.deepEqual(await e, found);
});

test('a host whose name servers stop answering, or fail, keeps its last checked address: deliveries neither wait nor fail; a host that no longer exists is refused', async (t) => {
  let mode: 'answer' | 'silent' | 'fail' | 'gone' = 'answer';
  let asked = 0;
  let release: (() => void) | undefined;
  const noSuchHost = Object.assign(new Error('getaddrinfo ENOTFOUND flaky.test'), { code: 'ENOTFOUND' });
  const resolver: Resolver = (host) => {
    asked++;
    if (host !== 'flaky.test') return Promise.reject(noSuchHost);
    // An injected resolver has no deadline: this one answers only when released.
    if (mode === 'silent') return new Promise((_done, fail) => (release = () => fail(noSuchHost)));
    if (mode === 'fail') return Promise.reject(new Error('ESERVFAIL'));
    if (mode === 'gone') return Promise.reject(noSuchHost);
    return Promise.resolve([{ address: '127.0.0.1', family: 4 }]);
  };
  const s = await startWebhookService({}, { resolver });
  const r = await startReceiver();
  try {
    const c = await s.api.as('stale', WEBHOOK_SCOPES);
    const created = await c.post('/v1/webhook-endpoints', { endpointUrl: `http://flaky.test:${r.port}/hook`, eventTypes: ['order.created'] });
    t.is(created.status, 201);
    t.is((await c.post('/v1/orders', { currency: 'EUR' })).status, 201);
    await until('the first delivery', () => r.got.length === 1);
    for (const next of ['fail', 'silent'] as const) {
      mode = next;
      const before = asked;
      // Past the second a resolution is kept: the next delivery resolves the host again.
      await delay(1_100);
      t.is((await c.post('/v1/orders', { currency: 'EUR' })).status, 201);
      await until(`a delivery while the name servers are ${next}`, () => r.got.length === (next === 'fail' ? 2 : 3), 5_000);
      t.true(asked > before, 'the host was not resolved again');
    }
    // The silent resolution ends: the name does not exist. That is an answer, and the addresses
    // checked before are not used again.
    mode = 'gone';
    release!();
    await delay(1_100);
    const order = await c.post('/v1/orders', { currency: 'EUR' });
    t.is(order.status, 201);
    await until('a refused attempt', async () => {
      const page = await c.get(`/v1/webhook-endpoints/${created.json.id as string}/deliveries?limit=100`);
      return (page.json.data as { eventId: string; attempts: { error: string | null }[] }[]).some((d) => d.attempts.some((a) => /must resolve only to public addresses/.test(a.error ?? '')));
    });
    t.is(r.got.length, 3, 'a delivery went to the address of a host that no longer exists');
  } finally {
    await r.close();
    await s.close();
  }
});

test('registration refuses private targets (422 saying what the URL must be, never where it points); delivery re-checks after DNS and never connects to a rebound name', async (t) => {
  let rebound = false;
  const resolver: Resolver = async (host) => {
    if (host === 'private.test') return [{ address: '10.0.0.7', family: 4 }];
    if (host === 'mixed.test') return [{ address: PUBLIC, family: 4 }, { address: '127.0.0.1', family: 4 }];
    if (host === 'rebind.test') return [{ address: rebound ? '127.0.0.1' : PUBLIC, family: 4 }];
    throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  };
  const s = await startWebhookService({ WEBHOOK_ALLOW_PRIVATE_TARGETS: '' }, { resolver });
  const tls = await makeTestCa();
  const r = await startReceiver({ tls: { key: tls.key, cert: tls.cert } });
  try {
    const c = await s.api.as('ssrf', WEBHOOK_SCOPES);
    const refuse = async (url: string, reason: RegExp): Promise<void> => {
      const res = await c.post('/v1/webhook-endpoints', { endpointUrl: url, eventTypes: ['*'] });
      t.is(res.status, 422, url);
      t.is(res.json.errors[0].pointer, '/endpointUrl');
      t.regex(res.json.detail as string, reason, url);
      // Never where the host points, nor whether it resolves: the guard is no map of internal names.
      t.notRegex(JSON.stringify(res.json), /127\.0\.0\.1|10\.0\.0\.7|169\.254|does not resolve|not a public address|\.test/, url);
    };
    const notPublic = /^The endpoint URL must resolve only to public addresses\.$/;
    await refuse(`http://${PUBLIC}/`, /https/);
    await refuse(`https://${PUBLIC}:0/hook`, /port 0/);
    await refuse('https://127.0.0.1/', notPublic);
    await refuse('https://2130706433/', notPublic);
    await refuse('https://[::ffff:a9fe:a9fe]/', notPublic);
    await refuse('https://private.test/hook', notPublic);
    await refuse('https://mixed.test/hook', notPublic);
    await refuse('https://nowhere.test/hook', notPublic);

    const created = await c.post('/v1/webhook-endpoints', { endpointUrl: `https://rebind.test:${r.port}/hook`, eventTypes: ['*'] });
    t.is(created.status, 201);
    // A PATCH to a private URL is refused the same way.
    const patched = await c.patch(`/v1/webhook-endpoints/${created.json.id as string}`, { endpointUrl: 'https://private.test/' });
    t.is(patched.status, 422);

    rebound = true;
    t.is((await c.post('/v1/orders', { currency: 'EUR' })).status, 201);
    let attempts: { error: string | null; responseStatus: number | null }[] = [];
    await until('a refused attempt', async () => {
      const page = await c.get(`/v1/webhook-endpoints/${created.json.id as string}/deliveries`);
      attempts = page.json.data[0]?.attempts ?? [];
      return attempts.length > 0;
    });
    t.regex(attempts[0]!.error!, /must resolve only to public addresses/);
    t.notRegex(attempts[0]!.error!, /127\.0\.0\.1/);
    t.is(attempts[0]!.responseStatus, null);
    t.is(r.got.length, 0);
  } finally {
    await r.close();
    await s.close();
  }
});

test('registration when DNS gives no answer: 503 with Retry-After and nothing stored, also when other names hold every lookup slot; a name that does not exist stays 422', async (t) => {
  const silent: string[] = [];
  const inner: Resolver = (host) => {
    if (host === 'again.test') return Promise.reject(Object.assign(new Error('getaddrinfo EAI_AGAIN again.test'), { code: 'EAI_AGAIN' }));
    if (host === 'nowhere.test') return Promise.reject(Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.test'), { code: 'ENOTFOUND' }));
    if (host.startsWith('silent')) {
      silent.push(host);
      // Name servers that never answer.
      return new Promise<Address[]>(() => undefined);
    }
    return Promise.resolve([{ address: PUBLIC, family: 4 }]);
  };
  // Bounded as the system resolver is: a deadline, and two lookups at once.
  const s = await startWebhookService({ WEBHOOK_ALLOW_PRIVATE_TARGETS: '' }, { resolver: boundedResolver(inner, 300, 2) });
  try {
    const c = await s.api.as('dns-temp', WEBHOOK_SCOPES);
    const unavailable = async (res: { status: number; headers: Record<string, string>; json: { type: string; detail: string } }, what: string): Promise<void> => {
      t.is(res.status, 503, what);
      t.is(res.json.type, '/problems/unavailable', what);
      t.regex(res.headers['retry-after'] ?? '', /^[1-9]\d*$/, what);
      t.notRegex(res.json.detail, /\.test/, what);
    };
    await unavailable(await c.post('/v1/webhook-endpoints', { endpointUrl: 'https://again.test/hook', eventTypes: ['*'] }), 'EAI_AGAIN');
    const gone = await c.post('/v1/webhook-endpoints', { endpointUrl: 'https://nowhere.test/hook', eventTypes: ['*'] });
    t.is(gone.status, 422);
    t.is(gone.json.errors[0].pointer, '/endpointUrl');

    // One tenant's names whose DNS never answers hold both slots; another tenant's good name
    // waits for one past the deadline: a temporary refusal, not a verdict on its URL.
    const hog = await s.api.as('dns-hog', WEBHOOK_SCOPES);
    const held = await Promise.all(['silent-1.test', 'silent-2.test'].map((h) => hog.post('/v1/webhook-endpoints', { endpointUrl: `https://${h}/hook`, eventTypes: ['*'] })));
    for (const res of held) await unavailable(res, 'a name whose DNS never answers');
    const other = await s.api.as('dns-other', WEBHOOK_SCOPES);
    await unavailable(await other.post('/v1/webhook-endpoints', { endpointUrl: 'https://good.test/hook', eventTypes: ['*'] }), 'a good name behind held slots');
    t.is(silent.length, 2);

    for (const caller of [c, hog, other]) t.deepEqual((await caller.get('/v1/webhook-endpoints')).json.data, [], 'an endpoint was stored');
    // A PATCH to a name that gets no answer changes nothing either.
    const ok = await c.post('/v1/webhook-endpoints', { endpointUrl: `https://${PUBLIC}/hook`, eventTypes: ['*'] });
    t.is(ok.status, 201);
    const path = `/v1/webhook-endpoints/${ok.json.id as string}`;
    await unavailable(await c.patch(path, { endpointUrl: 'https://again.test/other' }), 'PATCH');
    t.is((await c.get(path)).json.endpointUrl, `https://${PUBLIC}/hook`);
  } finally {
    await s.close();
  }
});

test('TLS: a receiver whose certificate chains to the trusted test CA gets signed events; without the CA nothing is accepted', async (t) => {
  const tls = await makeTestCa();
  const resolver: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];
  const r = await startReceiver({ tls: { key: tls.key, cert: tls.cert }, host: 'localhost' });
  const trusting = await startWebhookService({}, { resolver, ca: tls.ca });
  const plain = await startWebhookService({}, { resolver });
  try {
    const c = await trusting.api.as('tls', WEBHOOK_SCOPES);
    const e = await c.post('/v1/webhook-endpoints', { endpointUrl: r.url, eventTypes: ['order.created'] });
    t.is(e.status, 201);
    t.true((r.url as string).startsWith('https://localhost:'));
    await c.post('/v1/orders', { currency: 'EUR', note: 'over tls' });
    await until('a delivery over TLS', () => r.got.length >= 1);
    t.is(verifyWebhook(r.got[0]!.raw, r.got[0]!.headers, e.json.signingSecret as string).type, 'order.created');

    const p = await plain.api.as('tls', WEBHOOK_SCOPES);
    const e2 = await p.post('/v1/webhook-endpoints', { endpointUrl: r.url, eventTypes: ['order.created'] });
    await p.post('/v1/orders', { currency: 'EUR', note: 'untrusted' });
    let error: string | null = null;
    await until('a failed TLS attempt', async () => {
      const page = await p.get(`/v1/webhook-endpoints/${e2.json.id as string}/deliveries`);
      error = page.json.data[0]?.attempts[0]?.error ?? null;
      return error !== null;
    });
    t.regex(error!, /CERT|SELF_SIGNED|VERIFY|certificate/i);
    t.false(r.got.some((g) => g.json.data?.note === 'untrusted'));
  } finally {
    await r.close();
    await trusting.close();
    await plain.close();
  }
});

test('a name with several checked addresses is reached through whichever answers: IPv6 refused, IPv4 taken', async (t) => {
  // Private targets allowed (development), so loopback is a fine stand-in for a public host; a
  // name only the injected resolver knows proves the connection uses the checked addresses.
  const resolver: Resolver = async (host) => {
    if (host === 'dual.test') return [{ address: '::1', family: 6 }, { address: '127.0.0.1', family: 4 }];
    throw new Error('ENOTFOUND');
  };
  const s = await startWebhookService({ WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' }, { resolver });
  const r = await startReceiver();
  try {
    const c = await s.api.as('dual', WEBHOOK_SCOPES);
    const port = new URL(r.url).port;
    const created = await c.post('/v1/webhook-endpoints', { endpointUrl: `http://dual.test:${port}/hook`, eventTypes: ['order.created'] });
    t.is(created.status, 201, created.text);
    t.is((await c.post('/v1/orders', { currency: 'EUR' })).status, 201);
    await until('the delivery', () => r.got.length >= 1, 15_000);
    t.is(r.got[0]!.headers.host, `dual.test:${port}`, 'the Host is the endpoint URL\'s');
  } finally {
    await r.close();
    await s.close();
  }
});
