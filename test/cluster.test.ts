// The same suite against cluster mode: a real nats-server, two actor node processes splitting the
// partitions 0-127 and 128-255, and a gateway that reaches them over NATS. A missing nats-server
// fails these tests (startNatsServer throws); it never skips them.

import anyTest, { type TestFn } from 'ava';
import { runOrderSuiteAgainst, type SuiteContext } from './helpers/order-suite.js';
import { startCluster } from './helpers/service.js';

runOrderSuiteAgainst(anyTest as TestFn<SuiteContext>, startCluster);
