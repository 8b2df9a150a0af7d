// common/libc.ts: the C library's calls load here (CI runs on glibc Linux) and answer as the C
// library does.

import test from 'ava';
import { libc, libcFailure, MADV_DONTNEED } from '../common/libc.js';

test('malloc_trim and madvise can be called', (t) => {
  const calls = libc();
  t.truthy(calls, String(libcFailure()));
  t.true([0, 1].includes(calls!.mallocTrim(0)));
  // An address that is not page-aligned: EINVAL, -1, and nothing touched.
  t.is(calls!.madvise(1n, 4096n, MADV_DONTNEED), -1);
  t.is(libc(), calls, 'loaded once');
});
