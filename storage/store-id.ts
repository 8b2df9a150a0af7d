// The identity of the data in a directory: made once, when the directory is first used, and kept
// beside the data, so a copy of the directory (a node moved to another machine, or split in two)
// is the same store, and a new directory is another. Cluster mode records which store holds each
// partition (common/nats-partition-owners.ts) by this id. Read and made under the directory's lock
// (dir-lock.ts), so no two processes make one at once.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { replaceFile } from '../common/atomic-file.js';

const FILE = 'STORE_ID';
const SHAPE = /^[0-9a-f]{32}$/;

export function storeIdOf(dir: string): string {
  const file = join(dir, FILE);
  try {
    const id = readFileSync(file, 'utf8').trim();
    if (!SHAPE.test(id)) throw new Error(`${file} does not hold a store id; restore it from a backup of this directory`);
    return id;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const id = randomBytes(16).toString('hex');
  // Written whole or not at all: a crash leaves either no file (a new id next time, before any
  // partition was claimed with this one) or this one.
  replaceFile(file, `${id}\n`, `${file}.tmp`);
  return id;
}
