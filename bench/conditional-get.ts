// Scenario: conditional GET of one order with a matching If-None-Match (CONTRACT §5): every
// answer is 304 with no body, so this measures the cost of deciding "not modified".
import { call, closeHttp } from './lib/http.js';
import { createOrder } from './lib/orders.js';
import { compare, contenders, finish, printRun, settings } from './lib/scenario.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'conditional-get';
const s = settings();
printRun(SCENARIO, s);
const token = await mintToken();

const rows = await compare(
  contenders(),
  async (subject) => {
    const { path } = await createOrder(subject.url, token);
    const headers = { authorization: `Bearer ${token}` };
    // The ETag of the representation these exact request headers get (ETags differ per variant).
    const first = await call(`${subject.url}${path}`, { headers });
    const etag = first.headers.etag;
    if (first.status !== 200 || !etag) throw new Error(`GET ${path} answered ${first.status} without an ETag`);
    return [
      { scenario: SCENARIO, request: { method: 'GET', paths: [path], headers: { ...headers, 'if-none-match': etag }, expectStatus: 304 } },
    ];
  },
  s,
  SCENARIO,
);

finish(SCENARIO, s, rows);
await closeHttp();
