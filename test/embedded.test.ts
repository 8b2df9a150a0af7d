// The order, line item and product suite against embedded mode: one in-process service on port 0
// with its actors on LMDB in a temporary DATA_DIR.

import anyTest, { type TestFn } from 'ava';
import { Api } from './helpers/client.js';
import { registerOrderSuite, type SuiteContext } from './helpers/order-suite.js';
import { startEmbedded } from './helpers/service.js';

const test = anyTest as TestFn<SuiteContext>;

test.before(async (t) => {
  const service = await startEmbedded();
  t.context.service = service;
  t.context.api = new Api(service.url, service.secret);
});

test.after.always(async (t) => {
  // The context is partly filled when before() failed half-way.
  const { api, service } = t.context as Partial<SuiteContext>;
  await api?.close();
  await service?.close();
});

registerOrderSuite(test);
