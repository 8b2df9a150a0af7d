// A webhook receiver for bench/webhook-fanout.ts: node:http, answers every POST 204 at once and
// counts it; `GET /count` reports the count. It verifies nothing: the bench measures the
// sender, and the receiver must cost the same for signed and unsigned requests.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

let count = 0;
let lastAt = 0;
const server = http.createServer((req, res) => {
  if (req.method === 'GET') {
    // The count, and when the last one arrived (epoch ms, sub-ms): the bench polls coarsely
    // without its polling interval entering the figure.
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`${count} ${lastAt}`);
    return;
  }
  req.resume();
  req.on('end', () => {
    count++;
    lastAt = performance.timeOrigin + performance.now();
    res.writeHead(204).end();
  });
});
server.keepAliveTimeout = 30_000;
server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`webhook receiver listening on http://127.0.0.1:${port}\n`);
});
