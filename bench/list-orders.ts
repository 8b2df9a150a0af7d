// Scenario: one list page with a status filter over 100k orders (CONTRACT §2, §6):
// `GET /v1/orders?status=<s>&limit=20`. One in ten orders is cancelled, so `pending` matches
// almost everything and `cancelled` is selective (the peer has to skip nine of ten entries, the
// service can walk its (tenant, status, ...) index). Seeding is not timed.
import { closeHttp } from './lib/http.js';
import { cancelOrders, seedOrders } from './lib/orders.js';
import { compare, contenders, finish, printRun, settings, type Plan } from './lib/scenario.js';
import { mintToken } from './lib/token.js';

const SCENARIO = 'list-orders';
const s = settings();
const count = Math.max(100, Number(process.env.BENCH_LIST_ORDERS ?? 100_000));
const statuses = ['pending', 'cancelled'] as const;
printRun(`${SCENARIO} over ${count.toLocaleString('en-US')} orders`, s);
const token = await mintToken();
const seeding: Record<string, unknown> = {};

const rows = await compare(
  contenders(),
  async (subject): Promise<Plan[]> => {
    if (subject.kind !== 'uws-ceiling') {
      const seeded = await seedOrders(subject.url, token, { count, keepIds: true, maxSeconds: 600 });
      const toCancel = seeded.ids.filter((_, i) => i % 10 === 9);
      const cancelled = await cancelOrders(subject.url, token, toCancel);
      const { ids: _ids, ...summary } = seeded;
      seeding[subject.kind] = { ...summary, cancelled };
      console.log(
        `  seeded ${subject.kind}: ${seeded.created} orders via ${seeded.via} in ${seeded.seconds} s, ${cancelled} cancelled` +
          (seeded.failures > 0 ? `, ${seeded.failures} failures (first: ${seeded.firstFailure ?? ''})` : ''),
      );
      if (seeded.created < count) throw new Error(`seeding stopped at ${seeded.created} of ${count} orders`);
    }
    return statuses.map((status) => ({
      scenario: `list-orders ${status}`,
      request: {
        method: 'GET',
        paths: [`/v1/orders?status=${status}&limit=20`],
        headers: { authorization: `Bearer ${token}` },
        expectStatus: 200,
      },
    }));
  },
  s,
  SCENARIO,
);

finish(SCENARIO, s, rows, [], { orders: count, cancelledShare: 0.1, seeding });
await closeHttp();
