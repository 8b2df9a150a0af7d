// A small file replaced whole or not at all (DEPRECATIONS_FILE, DATA_DIR/actors/STORE_ID).

import { closeSync, fsyncSync, openSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

function flush(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes `text` to `tmp` beside `path`, flushes it, renames it over `path`, and flushes the
 * directory: readers see the old file or the new one, never half, and after a crash the rename
 * is there or was never made.
 */
export function replaceFile(path: string, text: string, tmp: string): void {
  writeFileSync(tmp, text);
  flush(tmp);
  renameSync(tmp, path);
  flush(dirname(path));
}
