// Runs one of the service's entry points (BENCH_ENTRY) inside this process. The bench starts the
// service through this file so that a stop signal the bench did not send shows up in the
// server's output: the service exits 0 on SIGTERM/SIGINT, which otherwise looks like a clean
// exit. (On the shared development machine, bench servers were seen stopped by outside SIGTERMs;
// a command line without `gateway/main.js` in it also keeps broad clean-ups off the service.)
import { pathToFileURL } from 'node:url';

const entry = process.env.BENCH_ENTRY;
if (!entry) {
  process.stderr.write('BENCH_ENTRY is not set\n');
  process.exit(2);
}
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  // The service installs its own handlers for these; this one only reports the arrival.
  process.on(signal, () => process.stderr.write(`[bench-launch] ${signal} received by pid ${process.pid}\n`));
}
await import(pathToFileURL(entry).href);
