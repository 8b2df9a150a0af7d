// The same suite against cluster mode: a real nats-server, two actor node processes splitting the
// partitions 0-127 and 128-255, and a gateway that reaches them over NATS. A missing nats-server
// fails these tests (startNatsServer throws); it never skips them.

import anyTest, { type TestFn } from 'ava';
import { Api } from './helpers/client.js';
import { registerOrderSuite, type SuiteContext } from './helpers/order-suite.js';
import { startCluster } from './helpers/service.js';

const test = anyTest as TestFn<SuiteContext>;

test.before(async (t) => {
  const service = await startCluster();
  t.context.service = service;
  t.context.api = new Api(service.url, service.secret);
});

test.after.always(async (t) => {
  const { api, service } = t.context as Partial<SuiteContext>;
  await api?.close();
  await service?.close();
});

registerOrderSuite(test);
