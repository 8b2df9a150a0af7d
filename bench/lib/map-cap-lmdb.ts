// lmdb-js with every environment's map capped at BENCH_MAP_CAP_GB (default 8 GiB): see map-cap.ts.
// Exports what the service imports from lmdb-js (storage/store.ts); a name missing here fails
// the service at start-up, loudly.
import { asBinary, open as openLmdb, type RootDatabase, type RootDatabaseOptionsWithPath } from 'lmdb';

export { asBinary };

const CAP = Number(process.env.BENCH_MAP_CAP_GB ?? 8) * 1024 ** 3;

export function open(options: RootDatabaseOptionsWithPath): RootDatabase {
  return openLmdb({ ...options, mapSize: Math.min(options.mapSize ?? CAP, CAP) });
}
