// A preload (`node --import`) for running the service under valgrind: valgrind gives its guest
// far less address space than the 256 GiB the store maps (storage/store.ts MAP_SIZE), and LMDB
// fails to open. This caps the map each `open` of lmdb-js asks for, through a module hook that
// hands every importer of `lmdb` but one a wrapper (map-cap-lmdb.ts). Bench only: the service
// itself has no such setting.
import { register } from 'node:module';

register('./map-cap-hooks.js', import.meta.url);
