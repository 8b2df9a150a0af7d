// ApiError is a problem for the client, never logged with a stack: it captures none, and leaves
// stack capture as it was for every other error (a bug's stack is what its log line is for).

import test from 'ava';
import { ApiError } from '../common/errors.js';
import { problemResponse } from '../gateway/problem.js';
import { capturingLog } from './helpers/edge-kit.js';

function deep(n: number, make: () => Error): Error {
  return n === 0 ? make() : deep(n - 1, make);
}

test('an ApiError carries no stack frames, and other errors still do', (t) => {
  const limit = Error.stackTraceLimit;
  const problem = deep(5, () => new ApiError('rate-limited', 'Too many requests; retry in 1 s.'));
  t.is(problem.stack, 'Error: Too many requests; retry in 1 s.');
  t.is(Error.stackTraceLimit, limit);
  const bug = deep(5, () => new TypeError('a bug'));
  t.true((bug.stack ?? '').split('\n').length > 5, bug.stack);
});

test('a bug is still logged with its stack and answered 500 without it', (t) => {
  const lines: string[] = [];
  const res = problemResponse(deep(3, () => new TypeError('x is undefined')), 'trace-1', capturingLog(lines));
  t.is(res.status, 500);
  t.false(String(res.body).includes('deep'));
  t.true(lines.some((l) => l.includes('unhandled error') && l.includes('at deep')), lines.join('\n'));
});

test('an ApiError made where the stack is nearly full leaves stack capture as it was', (t) => {
  const limit = Error.stackTraceLimit;
  let made = 0;
  let overflowed = 0;
  // At some depth super() itself overflows; whatever depth that is, the limit comes back.
  for (let pad = 0; pad < 200 && overflowed === 0; pad++) {
    const deeper = (n: number): number => {
      try {
        return deeper(n + 1) + 1;
      } catch (err) {
        if (!(err instanceof RangeError)) throw err;
        new ApiError('rate-limited', 'x');
        made++;
        return 0;
      }
    };
    try {
      deeper(pad);
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
      overflowed++;
    }
    t.is(Error.stackTraceLimit, limit);
  }
  t.true(made + overflowed > 0);
  t.true((new TypeError('a bug').stack ?? '').split('\n').length > 1);
});
