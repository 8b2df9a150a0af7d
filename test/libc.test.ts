// common/libc.ts: the C library's calls load here (CI runs on glibc Linux) and answer as the C
// library does.

import test from 'ava';
import { isTransient, libc, libcFailure, MADV_DONTNEED } from '../common/libc.js';

test('malloc_trim and madvise can be called', (t) => {
  const calls = libc();
  t.truthy(calls, String(libcFailure()));
  t.true([0, 1].includes(calls!.mallocTrim(0)));
  // An address that is not page-aligned: EINVAL, -1, and nothing touched.
  t.is(calls!.madvise(1n, 4096n, MADV_DONTNEED), -1);
  t.is(libc(), calls, 'loaded once');
});

test('a want of descriptors or memory is passing; anything else is not', (t) => {
  t.true(isTransient(Object.assign(new Error('open failed'), { code: 'EMFILE' })));
  t.true(isTransient(Object.assign(new Error('x'), { code: 'ENFILE' })));
  t.true(isTransient(new Error('libc.so.6: cannot open shared object file: Too many open files')));
  t.false(isTransient(Object.assign(new Error('no such file'), { code: 'ENOENT' })));
  t.false(isTransient(new Error('koffi: cannot find libc.so.6')));
  t.false(isTransient(undefined));
});
