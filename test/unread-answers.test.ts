// A client that sends and never reads (embedded service on port 0, over real sockets): its
// answers may not pile up in the process. Answers with a body are ended with tryEnd, so one the
// socket cannot take waits, and uWS drops the connection when the next request comes meanwhile;
// a HEAD past its rate limit, whose answer has no body to wait on, waits a turn instead.

import { connect } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import anyTest, { type TestFn } from 'ava';
import { loadConfig } from '../common/config.js';
import { type Service, startService } from '../gateway/app.js';
import { ALL_SCOPES, freshTenant, removeDir, silentLog, tempDir, token } from './helpers/edge-kit.js';
import { afterResponses, parseResponses, rawExchange, rawRequest } from './helpers/raw-http.js';

interface Context {
  dir: string;
  service: Service;
}

const test = anyTest as TestFn<Context>;
const SECRET = 'unread-answers-test-secret-0123456789';
const BURST = 50;

test.before(async (t) => {
  const dir = await tempDir('unread-answers');
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, AUTH_JWT_SECRET: SECRET, RATE_LIMIT_PER_SECOND: '1', RATE_LIMIT_BURST: String(BURST) });
  t.context = { dir, service: await startService(config, silentLog()) };
});

test.after.always(async (t) => {
  await t.context.service?.close();
  await removeDir(t.context.dir);
});

interface Flood {
  requests: number;
  closed: boolean;
}

/**
 * Writes `request` up to `max` times on one connection that reads nothing, in batches, waiting
 * whenever the kernel stops taking them; then waits `graceMs` for the server to close.
 */
function floodUnread(port: number, request: Buffer, max: number, graceMs: number): Promise<Flood> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' });
    socket.pause(); // never read: the answers stay in the kernel's buffers, then in the server's
    let requests = 0;
    let closed = false;
    const finish = (): void => {
      socket.destroy();
      resolve({ requests, closed });
    };
    socket.on('error', () => {}); // a reset is a close
    socket.on('close', () => {
      closed = true;
    });
    const batch = Buffer.concat(Array.from({ length: 500 }, () => request));
    socket.once('connect', () => {
      void (async () => {
        while (!closed && requests < max) {
          requests += 500;
          if (!socket.write(batch)) await Promise.race([new Promise((r) => socket.once('drain', r)), new Promise((r) => socket.once('close', r))]);
        }
        const until = Date.now() + graceMs;
        while (!closed && Date.now() < until) await delay(20);
        finish();
      })();
    });
  });
}

test('a client pipelining GETs that reads no answer is dropped once they back up; others are served meanwhile', async (t) => {
  const { service } = t.context;
  // Anonymous: 50 answers from the burst, then 429s, each with a problem body.
  const flood = floodUnread(service.port, rawRequest('GET', '/v1'), 200_000, 3_000);
  await delay(200);
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('bystander') });
  const r = await fetch(`${service.url}/v1`, { headers: { authorization: `Bearer ${tok}` } });
  t.is(r.status, 200, 'another client is served during the flood');
  const { requests, closed } = await flood;
  // Before endPaced, uWS read on and kept every answer (about 0.5 kB each) in the process: the
  // connection stayed open past the whole flood, holding tens of megabytes.
  t.true(closed, `the connection stayed open after ${requests} unread requests`);
  t.true(requests < 200_000, `all ${requests} requests were taken before the close`);
  t.log(`dropped after ${requests} requests were written`);
  const after = await fetch(`${service.url}/v1`, { headers: { authorization: `Bearer ${tok}` } });
  t.is(after.status, 200);
});

test('a HEAD past the rate limit waits a turn for its 429: one pipelined behind it drops the connection, one on its own is answered as a GET would be', async (t) => {
  const { service } = t.context;
  const tok = await token(SECRET, ALL_SCOPES, { tenant: freshTenant('heads') });
  const head = rawRequest('HEAD', '/v1', { Authorization: `Bearer ${tok}` });
  // A token not seen before is verified on a later turn, and uWS drops a connection whose next
  // request comes while an answer waits: the token is made known first, with one HEAD.
  const first = await rawExchange(service.port, { send: [rawRequest('HEAD', '/v1', { Authorization: `Bearer ${tok}`, Connection: 'close' })], timeoutMs: 5_000 });
  t.is(parseResponses(first.bytes, ['HEAD'])[0]?.status, 200);
  // Pipelined past the burst: the burst's answers, then the connection goes; no 429s pile up.
  const many = BURST + 200;
  const flood = await rawExchange(service.port, { send: [Buffer.concat(Array.from({ length: many }, () => head))], timeoutMs: 5_000 });
  t.true(flood.closed, 'the connection stays open');
  const answers = parseResponses(flood.bytes, Array.from({ length: many }, () => 'HEAD'));
  t.true(answers.length >= BURST - 1 && answers.length <= BURST + 2, `${answers.length} answers`);
  t.true(
    answers.every((a) => a.status === 200),
    `statuses ${JSON.stringify(answers.map((a) => a.status).slice(-5))}`,
  );
  // One HEAD on its own, the bucket empty: its 429 comes with the length the GET's 429 has, and
  // the connection stays open, as it does for the GET.
  const get = rawRequest('GET', '/v1', { Authorization: `Bearer ${tok}` });
  const both = await rawExchange(service.port, { send: [get, afterResponses(['GET']), head, afterResponses(['GET', 'HEAD'])], timeoutMs: 1_000 });
  const [getAnswer, headAnswer] = parseResponses(both.bytes, ['GET', 'HEAD']);
  t.is(getAnswer?.status, 429);
  t.is(headAnswer?.status, 429);
  t.truthy(headAnswer?.headers['retry-after']);
  t.is(headAnswer?.headers['content-length']?.[0], String(getAnswer?.body.length));
  t.false(both.closed, 'a HEAD refused 429 on its own closed its connection');
});
