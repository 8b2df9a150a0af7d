// The uWS edge: turns uWS callbacks into a GatewayRequest and a GatewayResponse back into bytes.
// uWS rules this file keeps (uWS user manual): read everything from `req` before the first
// await (it is stack-allocated), register onAborted before any await, write inside cork, and
// stream large bodies with tryEnd/onWritable so a slow reader cannot grow our memory.

import { STATUS_CODES } from 'node:http';
import uWS from '@trufflesuite/uws-js-unofficial';
import { ApiError } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import type { GatewayRequest, GatewayResponse } from './http-types.js';
import { traceIdOf } from './pipeline.js';
import { problemResponse } from './problem.js';

export interface HttpServer {
  port: number;
  close(): void;
}

export interface HttpOptions {
  host: string;
  port: number;
  maxBodyBytes: number;
  log: Logger;
  /**
   * Renders a refusal decided here, before the pipeline runs (413), through the gateway, so it
   * is charged to the caller and carries the same headers as every other answer.
   */
  refuse(req: GatewayRequest, err: ApiError): GatewayResponse;
  /**
   * Whether the gateway may need the peer's address for this request. Reading it costs a
   * native call and a fresh ArrayBuffer, about 2-3 µs (a tenth of a whole GET), so the
   * address is read only when this says so, and always before any await.
   */
  needsAddress(headers: Record<string, string>): boolean;
}

const SMALL_BODY_BYTES = 16 * 1024;
// Addresses are ASCII; TextDecoder reads uWS's ArrayBuffer without wrapping it in a Buffer first.
const ascii = new TextDecoder();
const statusLines = new Map<number, string>();
function statusLine(status: number): string {
  let line = statusLines.get(status);
  if (!line) statusLines.set(status, (line = `${status} ${STATUS_CODES[status] ?? ''}`.trim()));
  return line;
}

// Answered here, before the pipeline runs, but rendered through `opts.refuse` and the one
// problem renderer so it carries Trace-Id, traceId and the rate-limit fields (CONTRACT §4).
function tooLarge(limit: number): ApiError {
  return new ApiError('payload-too-large', `The body exceeds the ${limit}-byte limit.`);
}

export function listen(handle: (req: GatewayRequest) => Promise<GatewayResponse>, opts: HttpOptions): Promise<HttpServer> {
  const app = uWS.App();

  app.any('/*', (res, req) => {
    const headers: Record<string, string> = {};
    req.forEach((k, v) => {
      headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
    });
    const request: GatewayRequest = {
      method: req.getCaseSensitiveMethod().toUpperCase(),
      path: req.getUrl(),
      query: req.getQuery() ?? '',
      headers,
      body: undefined,
      remoteAddress: opts.needsAddress(headers) ? ascii.decode(res.getRemoteAddressAsText()) : '',
    };
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });

    const send = (response: GatewayResponse, close = false): void => {
      if (aborted) return;
      res.cork(() => writeResponse(res, request.method, response, close, () => aborted));
    };
    const run = (): void => {
      handle(request)
        .then(send, (err: unknown) => {
          // handle() renders its own errors; reaching here is a bug in the pipeline itself.
          // problemResponse logs it with its stack and answers a bare 500 with a trace id.
          send(problemResponse(err, traceIdOf(request.headers.traceparent), opts.log));
        })
        // A throw while writing must not become an unhandled rejection: that ends the process.
        .catch((err: unknown) => opts.log.error({ err }, 'writing a response failed'));
    };

    const declared = headers['content-length'];
    const chunked = headers['transfer-encoding'] !== undefined;
    if (declared === undefined && !chunked) return run();
    if (declared !== undefined && Number(declared) > opts.maxBodyBytes) {
      // Refuse before reading a byte of it, and close: the rest of the body is never read.
      return send(opts.refuse(request, tooLarge(opts.maxBodyBytes)), true);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    res.onData((chunk, isLast) => {
      if (refused) return;
      size += chunk.byteLength;
      if (size > opts.maxBodyBytes) {
        refused = true;
        return send(opts.refuse(request, tooLarge(opts.maxBodyBytes)), true);
      }
      // uWS reuses the chunk's memory after this callback returns: copy it.
      chunks.push(Buffer.from(Buffer.from(chunk)));
      if (isLast) {
        request.body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
        run();
      }
    });
  });

  return new Promise((resolve, reject) => {
    app.listen(opts.host, opts.port, (socket) => {
      if (!socket) return reject(new Error(`cannot listen on ${opts.host}:${opts.port}`));
      resolve({
        port: uWS.us_socket_local_port(socket as unknown as uWS.us_socket),
        close: () => uWS.us_listen_socket_close(socket),
      });
    });
  });
}

/**
 * Every header in one native call: the first name, then its value followed by the other lines.
 * Each call into uWS costs more than building the string, and a response carries five or six
 * headers. A CR or LF inside a value would forge a header line, so each value is checked on its
 * own and any such byte becomes a space (values are ours; this guards against a bug, not a user).
 */
function writeHeaders(res: uWS.HttpResponse, headers: Record<string, string>): void {
  let first: string | undefined;
  let value = '';
  for (const k in headers) {
    let v = headers[k]!;
    if (CR_OR_LF.test(v)) v = v.replace(CR_OR_LF_ALL, ' ');
    if (first === undefined) {
      first = k;
      value = v;
    } else {
      value += `\r\n${k}: ${v}`;
    }
  }
  if (first !== undefined) res.writeHeader(first, value);
}

const CR_OR_LF = /[\r\n]/;
const CR_OR_LF_ALL = /[\r\n]/g;

function writeResponse(res: uWS.HttpResponse, method: string, r: GatewayResponse, close: boolean, isAborted: () => boolean): void {
  res.writeStatus(statusLine(r.status));
  writeHeaders(res, r.headers);
  // endWithoutBody() takes no length here: this uWS build mis-writes an explicit one.
  if (r.status === 204 || r.status === 304 || r.body === undefined) {
    res.endWithoutBody();
    return;
  }
  // A short string goes to uWS as it is (at most 3 UTF-8 bytes a UTF-16 unit, so under the
  // small-body bound); copying it into a Buffer first would only add an allocation.
  if (typeof r.body === 'string' && r.body.length * 3 <= SMALL_BODY_BYTES && method !== 'HEAD') {
    res.end(r.body, close);
    return;
  }
  const body = typeof r.body === 'string' ? Buffer.from(r.body) : r.body;
  if (method === 'HEAD') {
    // RFC 9110 §9.3.2: the length the GET would have had, and no body.
    res.writeHeader('content-length', String(body.length));
    res.endWithoutBody();
    return;
  }
  if (close || body.length <= SMALL_BODY_BYTES) {
    // uWS copies what the socket cannot take right away; for small bodies that bounded copy is
    // cheaper than the tryEnd/onWritable dance.
    res.end(body, close);
    return;
  }
  const start = res.getWriteOffset();
  const [ok, done] = res.tryEnd(body, body.length);
  if (ok || done) return;
  // Backpressure: resume from where the socket stopped, only when it can take more.
  res.onWritable((offset) => {
    if (isAborted()) return true;
    const [more] = res.tryEnd(body.subarray(offset - start), body.length);
    return more;
  });
}
