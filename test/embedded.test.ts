// The order, line item and product suite against embedded mode: one in-process service on port 0
// with its actors on LMDB in a temporary DATA_DIR.

import anyTest, { type TestFn } from 'ava';
import { runOrderSuiteAgainst, type SuiteContext } from './helpers/order-suite.js';
import { startEmbedded } from './helpers/service.js';

runOrderSuiteAgainst(anyTest as TestFn<SuiteContext>, startEmbedded);
