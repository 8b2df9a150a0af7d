// The ceiling: bare uWS answering fixed bytes. Nothing is looked up, validated or stored, so no
// server on this stack can be faster; the service's figures are read as a fraction of this one.
import uWS from '@trufflesuite/uws-js-unofficial';
import { sampleOrder } from '../lib/fixtures.js';

const order = sampleOrder();
const ORDER = JSON.stringify(order);
const ETAG = '"v1-ceiling"';
const PAGE = JSON.stringify({
  data: Array.from({ length: 20 }, (_, i) => sampleOrder(`ord_${String(i).padStart(26, '0')}`)),
  hasMore: true,
  _links: { self: { href: '/v1/orders?status=pending&limit=20' }, next: { href: '/v1/orders?status=pending&limit=20&cursor=c1' } },
});
const PAGE_ETAG = '"p1-ceiling"';

const port = Number(process.env.PORT ?? 0);
const host = process.env.HOST ?? '127.0.0.1';

uWS
  .App()
  .get('/v1/orders/:id', (res, req) => {
    if (req.getHeader('if-none-match') === ETAG) {
      res.writeStatus('304 Not Modified').writeHeader('ETag', ETAG).endWithoutBody();
      return;
    }
    res.writeHeader('Content-Type', 'application/json').writeHeader('ETag', ETAG).end(ORDER);
  })
  .get('/v1/orders', (res) => {
    res.writeHeader('Content-Type', 'application/json').writeHeader('ETag', PAGE_ETAG).end(PAGE);
  })
  .post('/v1/orders', (res) => {
    // The body is read to the end (as any real server must) but not parsed.
    let aborted = false;
    res.onAborted(() => (aborted = true));
    res.onData((_chunk, isLast) => {
      if (!isLast || aborted) return;
      res.cork(() => {
        res
          .writeStatus('201 Created')
          .writeHeader('Content-Type', 'application/json')
          .writeHeader('Location', `/v1/orders/${order.id}`)
          .writeHeader('ETag', ETAG)
          .end(ORDER);
      });
    });
  })
  .any('/*', (res) => {
    res.writeStatus('404 Not Found').end();
  })
  .listen(host, port, (socket) => {
    if (!socket) {
      console.error(`cannot listen on ${host}:${port}`);
      process.exit(1);
    }
    console.log(`listening on http://${host}:${uWS.us_socket_local_port(socket)}`);
  });
