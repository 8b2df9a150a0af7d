// The uWS edge: turns uWS callbacks into a GatewayRequest and a GatewayResponse back into bytes.
// uWS rules this file keeps (uWS user manual): read everything from `req` before the first
// await (it is stack-allocated), register onAborted before returning without an answer, write
// inside cork (uWS holds one around its own callbacks; a later turn takes its own), and end
// bodies with tryEnd/onWritable so a client that does not read cannot grow our memory (endPaced).

import { Buffer } from 'node:buffer';
import { STATUS_CODES } from 'node:http';
import uWS from '@trufflesuite/uws-js-unofficial';
import { ApiError } from '../common/errors.js';
import type { Logger } from '../common/log.js';
import type { GatewayRequest, GatewayResponse, RequestHeaders } from './http-types.js';
import { traceIdOf } from './pipeline.js';
import { BodyBuffer, maxChunks } from './body.js';
import { REPEATED_LINE } from './idempotency.js';
import { problemResponse } from './problem.js';

export interface HttpServer {
  port: number;
  /** Stops listening; exchanges under way go on. */
  close(): void;
  /**
   * Stops listening and lets the exchanges under way finish, up to the last byte of their
   * answers, for at most `deadlineMs`; an answer with a small body closes its connection. A
   * request arriving meanwhile on a connection kept open is answered 503 with Retry-After and
   * closed. Resolves once none is left, or at the deadline.
   */
  drain(deadlineMs: number): Promise<void>;
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
  needsAddress(headers: RequestHeaders): boolean;
}

const SMALL_BODY_BYTES = 16 * 1024;

/**
 * The headers the gateway reads (RequestHeaders), and only those: the others count toward the
 * head's size and are not kept. Every member is set on construction, so every request's headers
 * share one shape; an absent header is undefined, as a missing key would be.
 */
class KeptHeaders implements RequestHeaders {
  authorization: string | undefined = undefined;
  accept: string | undefined = undefined;
  'accept-encoding': string | undefined = undefined;
  'accept-language': string | undefined = undefined;
  'content-type': string | undefined = undefined;
  'content-length': string | undefined = undefined;
  'content-encoding': string | undefined = undefined;
  'if-match': string | undefined = undefined;
  'if-none-match': string | undefined = undefined;
  'idempotency-key': string | undefined = undefined;
  traceparent: string | undefined = undefined;
}

/** Repeated header lines arrive one by one; their values are joined with ', ' (RFC 9110 §5.3). */
function joined(before: string | undefined, v: string): string {
  return before === undefined ? v : `${before}, ${v}`;
}

// Addresses are ASCII; TextDecoder reads uWS's ArrayBuffer without wrapping it in a Buffer first.
const ascii = new TextDecoder();
// Status lines as bytes: uWS takes a byte view as it is, where a string is measured and encoded.
// TextEncoder's arrays have memory of their own; a short Buffer.from is a slice of a shared 8 KiB
// pool block, which a kept slice would keep alive.
const encoder = new TextEncoder();
const statusLines = new Map<number, Uint8Array>();
function statusLine(status: number): Uint8Array {
  let line = statusLines.get(status);
  if (!line) statusLines.set(status, (line = encoder.encode(`${status} ${STATUS_CODES[status] ?? ''}`.trim())));
  return line;
}

/**
 * Most bytes a request head (request line, header lines, the blank line) may have. uWS 20.30
 * keeps at most 4096 bytes of a head that arrives in pieces and drops the connection past that,
 * yet takes a larger head that arrives in one read; refusing the same size here makes the limit
 * the same however TCP splits the bytes. (This uWS build has no UWS_HTTP_MAX_HEADERS_SIZE.)
 */
export const MAX_HEAD_BYTES = 4096;

/**
 * The longest request target (path, `?` and query, in bytes) taken: past it the answer is 414
 * (RFC 9110 §15.5.15), whatever the rest of the head. Every query the API issues or takes fits
 * within it: a `next` link holds a cursor of at most MAX_CURSOR_LENGTH (2048) characters, and
 * every field and expand path of a resource comes to a few hundred more.
 */
export const MAX_TARGET_BYTES = 3072;

// The head bytes besides the method, target and header lines: the request line's two spaces,
// "HTTP/1.1" and CRLF, then the blank line's CRLF. OWS that uWS trimmed is not counted.
const REQUEST_LINE_BYTES = 2 + 8 + 2 + 2;
const CONTENT_LENGTH = /^[0-9]+$/;

/**
 * Told to every client on a connection we keep open, as Node's own HTTP server does. uWS closes
 * a connection idle for 8 to 12 s (10 s, checked on a 4 s tick), and a client that reuses one
 * just as it is closed has its request reset unanswered: seen as ECONNRESET on POSTs while
 * seeding under load, where an event-loop turn of over a second let uWS's idle sweep run before
 * a request's bytes were read. Clients that read the hint close an idle connection after it,
 * less their margin, well before uWS does: undici and Node's fetch always, Node's http.Agent
 * when its own `timeout` is longer.
 */
export const KEEP_ALIVE = 'timeout=5';

/**
 * The head's size in bytes, as far as uWS lets JavaScript see it: uWS 20.30 decodes the target
 * and header values as UTF-8, and trims bytes of 0x80 and above at either end of a value as it
 * trims spaces, so those never reach us and are not counted (uWS's receive buffer bounds them).
 * A byte that is not UTF-8 inside a value arrives as U+FFFD and counts three.
 */
function headBytesOf(req: uWS.HttpRequest, request: GatewayRequest): number {
  let n = Buffer.byteLength(request.method) + Buffer.byteLength(request.path) + (request.query ? Buffer.byteLength(request.query) + 1 : 0) + REQUEST_LINE_BYTES;
  req.forEach((k, v) => {
    n += Buffer.byteLength(k) + Buffer.byteLength(v) + 4;
  });
  return n;
}

function targetBytes(request: GatewayRequest): number {
  return Buffer.byteLength(request.path) + (request.query ? Buffer.byteLength(request.query) + 1 : 0);
}

function tooLarge(limit: number): ApiError {
  return new ApiError('payload-too-large', `The body exceeds the ${limit}-byte limit.`);
}

function badFraming(detail: string): ApiError {
  return new ApiError('malformed-request', detail);
}

/**
 * What the head alone decides, before a byte of the body is read. Every refusal here closes the
 * connection: after a framing error the server cannot know where the next request starts.
 * `lengths` and `codings` count header lines, since repeats arrive joined into one value.
 */
function refuseHead(request: GatewayRequest, headBytes: number, lengths: number, codings: number, maxBodyBytes: number): ApiError | undefined {
  const headers = request.headers;
  // In UTF-16 units first: only a target that could be over the limit is counted in bytes.
  if ((request.path.length + request.query.length) * 3 > MAX_TARGET_BYTES && targetBytes(request) > MAX_TARGET_BYTES) {
    return new ApiError('uri-too-long', `The request target (path and query) exceeds ${MAX_TARGET_BYTES} bytes.`);
  }
  if (headBytes > MAX_HEAD_BYTES) {
    return new ApiError('request-header-fields-too-large', `The request line and headers exceed ${MAX_HEAD_BYTES} bytes.`);
  }
  const declared = headers['content-length'];
  if (codings > 0) {
    // RFC 9112 §6.1 and §6.3 item 3: both together may smuggle a second request past an
    // intermediary that frames by the other one, and the server must close the connection after
    // answering. (uWS 20.30 already drops such a connection unanswered; this does not rely on it.)
    if (declared !== undefined) return badFraming('The request has both Content-Length and Transfer-Encoding.');
    // No chunked body is read: uWS 20.30's chunked parser misframes what RFC 9112 §7.1 allows and
    // what it forbids. It takes a size line's leading space for the end of the size (a size of 0,
    // the last chunk, and the chunk's data then read as a request of its own), an extension's
    // characters for hex digits, and a trailer field for the next request's start. Refused before
    // a byte is read and closed, a chunked body is never parsed (RFC 9110 §15.5.12).
    return new ApiError('length-required', 'A request body must be sent with Content-Length; Transfer-Encoding is not accepted.');
  }
  if (declared === undefined) return undefined;
  // RFC 9112 §6.3 item 5: an invalid Content-Length is an unrecoverable framing error, answered
  // 400 and closed. uWS 20.30 reads an empty one as 0 and frames by the first of several; RFC
  // 9110 §8.6 allows refusing a repeat even of one value, and a conforming client sends one.
  if (lengths > 1 || !CONTENT_LENGTH.test(declared)) return badFraming('Content-Length must appear once, as a decimal number.');
  // Refuse before reading a byte of it: the rest of the body is never read.
  if (Number(declared) > maxBodyBytes) return tooLarge(maxBodyBytes);
  return undefined;
}

/** The exchanges under way, so that a stop lets them finish before what serves them closes. */
class Exchanges {
  count = 0;
  draining = false;
  private idle: (() => void) | undefined;

  ended(): void {
    if (--this.count === 0) this.idle?.();
  }

  /** Resolves once no exchange is under way, or after `deadlineMs`. */
  settled(deadlineMs: number): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, deadlineMs);
      this.idle = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

const SHUTTING_DOWN = 'The service is shutting down; retry the request.';

/**
 * One exchange's state at the edge. uWS needs onAborted only for an answer it does not get
 * before the request's callback returns: `watch` registers it the first time one has to wait.
 * It is under way (Exchanges) from its head to its answer, or to its client going away.
 */
class Exchange {
  aborted = false;
  private watched = false;
  private done = false;

  constructor(
    private readonly res: uWS.HttpResponse,
    private readonly under: Exchanges,
  ) {
    under.count++;
  }

  watch(): void {
    if (this.watched) return;
    this.watched = true;
    this.res.onAborted(() => {
      this.aborted = true;
      this.end();
    });
  }

  /** The server is draining: a small body closes its connection, a large one is waited for (writeResponse). */
  get draining(): boolean {
    return this.under.draining;
  }

  /** Its answer is out (or cannot be): it is no longer under way. */
  end(): void {
    if (this.done) return;
    this.done = true;
    this.under.ended();
  }
}

/**
 * `handle` answers at once when it can (Gateway.answer): that answer is written before uWS's
 * callback returns, inside the cork uWS holds around it, as the bare uWS server does.
 */
export function listen(handle: (req: GatewayRequest) => GatewayResponse | Promise<GatewayResponse>, opts: HttpOptions): Promise<HttpServer> {
  const app = uWS.App();
  const chunkLimit = maxChunks(opts.maxBodyBytes);
  const exchanges = new Exchanges();

  app.any('/*', (res, req) => {
    const headers = new KeptHeaders();
    let headBytes = 0;
    let lengths = 0;
    let codings = 0;
    let connection: string | undefined;
    req.forEach((k, v) => {
      headBytes += k.length + v.length + 4; // "name: value" CRLF
      // Named stores into one fixed shape: a store keyed by the name uWS hands over (a fresh
      // string) would look the name up in V8's string table and leave the object in
      // dictionary mode, for every header of every request. The name's length picks the few
      // names to compare: each comparison of a fresh string is a call, and a line the gateway
      // does not read (Host, User-Agent) went through all twelve.
      switch (k.length) {
        case 6:
          if (k === 'accept') headers.accept = joined(headers.accept, v);
          break;
        case 8:
          if (k === 'if-match') headers['if-match'] = joined(headers['if-match'], v);
          break;
        case 10:
          if (k === 'connection') connection = joined(connection, v);
          break;
        case 11:
          if (k === 'traceparent') headers.traceparent = joined(headers.traceparent, v);
          break;
        case 12:
          if (k === 'content-type') headers['content-type'] = joined(headers['content-type'], v);
          break;
        case 13:
          if (k === 'authorization') headers.authorization = joined(headers.authorization, v);
          else if (k === 'if-none-match') headers['if-none-match'] = joined(headers['if-none-match'], v);
          break;
        case 14:
          if (k === 'content-length') {
            lengths++;
            headers['content-length'] = joined(headers['content-length'], v);
          }
          break;
        case 15:
          if (k === 'accept-encoding') headers['accept-encoding'] = joined(headers['accept-encoding'], v);
          else if (k === 'accept-language') headers['accept-language'] = joined(headers['accept-language'], v);
          // Repeats are joined by a line feed, which no one line can hold: the key is one value
          // (a structured-field String), and two lines are refused, never read as "a, b".
          else if (k === 'idempotency-key') headers['idempotency-key'] = headers['idempotency-key'] === undefined ? v : `${headers['idempotency-key']}${REPEATED_LINE}${v}`;
          break;
        case 16:
          if (k === 'content-encoding') headers['content-encoding'] = joined(headers['content-encoding'], v);
          break;
        case 17:
          if (k === 'transfer-encoding') codings++;
          break;
      }
    });
    const request: GatewayRequest = {
      method: req.getCaseSensitiveMethod().toUpperCase(),
      path: req.getUrl(),
      query: req.getQuery() ?? '',
      headers,
      body: undefined,
      remoteAddress: opts.needsAddress(headers) ? ascii.decode(res.getRemoteAddressAsText()) : '',
    };
    headBytes += request.method.length + request.path.length + (request.query ? request.query.length + 1 : 0) + REQUEST_LINE_BYTES;
    // Counted so far in UTF-16 units, each at most three bytes of UTF-8: only a head that could
    // be over the limit is counted again, in bytes (most heads are well under a third of it).
    if (headBytes > MAX_HEAD_BYTES / 3) headBytes = headBytesOf(req, request);
    // The client's "close" option (RFC 9112 §9.6), in any line and beside other options: no
    // Keep-Alive hint, and an answer with a small body closes the connection (writeResponse).
    // uWS itself closes after any answer when the first Connection line's value has 5
    // characters, its test for "close". The answer is still written as soon as it is ready: held
    // for a later turn, it would be lost to a client that half-closes after its request (uWS
    // closes on the FIN). So a request a client pipelines behind its own "close", which RFC 9112
    // forbids it to send, may still run.
    const clientCloses = connection !== undefined && closeOption(connection);
    const exchange = new Exchange(res, exchanges);

    // From a later turn: inside a cork of its own, unless the connection went away meanwhile.
    const send = (response: GatewayResponse, close = false): void => {
      if (exchange.aborted) return;
      let out = true;
      try {
        res.cork(() => {
          out = writeResponse(res, request.method, response, close, !close && !clientCloses, exchange);
        });
      } finally {
        if (out) exchange.end();
      }
    };
    // Answered here, before the pipeline runs, but rendered by the one problem renderer so it
    // carries Trace-Id, traceId and the rate-limit fields like every other answer (CONTRACT §4);
    // then closed. Sent on a later turn of the event loop, never from inside this callback: uWS 20.30 goes on to
    // dispatch a request that follows the refused one in the same read, even after an answer
    // that closes the connection, so bytes smuggled behind a framing error would be run. While
    // our answer is pending it drops the connection instead (both unanswered), and once the
    // answer is written it closes the socket at once.
    // From a timer, not setImmediate: a socket this uWS build closes in the event loop's check
    // phase is never freed (about 460 bytes of native memory each; test/edge-memory.test.ts),
    // one closed from the timers or poll phase is.
    const refuse = (err: ApiError): void => {
      // Rendered by the gateway: charged to the caller, with the rate-limit fields.
      later(opts.refuse(request, err), true);
    };
    const later = (response: GatewayResponse, close: boolean): void => {
      exchange.watch();
      setTimeout(() => {
        try {
          send(response, close);
        } catch (err) {
          writeFailed(err);
        }
      }, 0);
    };
    // A throw while writing is a bug of ours: logged, and the connection closed, since how much of
    // the answer went out is unknown. (uWS also ends the process when its callback returns with
    // neither an answer nor onAborted.)
    const writeFailed = (err: unknown): void => {
      exchange.end();
      try {
        opts.log.error({ err }, 'writing a response failed');
        exchange.watch();
        if (!exchange.aborted) res.close();
      } catch {
        // Nothing more can be done for this connection; the process goes on.
      }
    };
    // handle() renders its own errors; reaching here is a bug in the pipeline itself.
    // problemResponse logs it with its stack and answers a bare 500 with a trace id.
    const pipelineFailed = (err: unknown): GatewayResponse => problemResponse(err, traceIdOf(request.headers.traceparent), opts.log);
    const run = (): void => {
      let answered: GatewayResponse | Promise<GatewayResponse>;
      try {
        answered = handle(request);
      } catch (err) {
        answered = pipelineFailed(err);
      }
      if (!(answered instanceof Promise)) {
        if (answersLater(request.method, answered)) return later(answered, false);
        // Still inside uWS's callback (the request's, or the body's last chunk's).
        try {
          if (writeResponse(res, request.method, answered, false, !clientCloses, exchange)) exchange.end();
        } catch (err) {
          writeFailed(err);
        }
        return;
      }
      exchange.watch();
      // A later turn's answer, or the pipeline's failure to give one, written or logged.
      const deliver = (response: GatewayResponse | undefined, failure?: unknown): void => {
        try {
          send(response ?? pipelineFailed(failure));
        } catch (err) {
          writeFailed(err);
        }
      };
      // One reaction, whose handlers never throw: an unhandled rejection would end the process,
      // and a `.catch` after it would cost every answer a second promise and job.
      answered.then(deliver, (err: unknown) => deliver(undefined, err));
    };

    const refusal = refuseHead(request, headBytes, lengths, codings, opts.maxBodyBytes) ?? (exchanges.draining ? new ApiError('unavailable', SHUTTING_DOWN) : undefined);
    if (refusal) return refuse(refusal);
    if (lengths === 0) return run();
    exchange.watch();
    // refuseHead let a body through only with one Content-Length of digits within the limit.
    const body = new BodyBuffer(Number(headers['content-length']), chunkLimit);
    let refused = false;
    res.onData((chunk, isLast) => {
      if (refused) return;
      switch (body.add(chunk, isLast)) {
        case 'more':
          return;
        case 'done':
          request.body = body.body;
          run();
          return;
        case 'too-fragmented':
          refused = true;
          return refuse(badFraming(`The body came in more than ${chunkLimit} pieces; send it in fewer, larger ones.`));
      }
    });
  });

  return new Promise((resolve, reject) => {
    // Exclusive: a second process started on the same port (a leftover `npm start`, two nodes
    // given one PORT) must fail to start, not share the port. This build binds with SO_REUSEADDR
    // only; uSockets builds since set SO_REUSEPORT unless told otherwise, and the kernel would then
    // split connections between the two (test/listen.test.ts).
    listenExclusive(app, opts.host, opts.port, (socket) => {
      if (!socket) return reject(new Error(`cannot listen on ${opts.host}:${opts.port}: the port is in use, or the address is not this machine's`));
      let listening = true;
      const close = (): void => {
        if (listening) uWS.us_listen_socket_close(socket);
        listening = false;
      };
      resolve({
        port: uWS.us_socket_local_port(socket as unknown as uWS.us_socket),
        close,
        drain(deadlineMs) {
          close();
          exchanges.draining = true;
          return exchanges.settled(deadlineMs);
        },
      });
    });
  });
}

/** Whether a Connection field value names the "close" option (tokens are case-insensitive). */
export function closeOption(value: string): boolean {
  if (value.length === 5) return value.toLowerCase() === 'close';
  for (const option of value.split(',')) if (option.trim().toLowerCase() === 'close') return true;
  return false;
}

/**
 * A HEAD's answer has no body for endPaced to hold back, so a client sending HEADs past its rate
 * limit without reading the answers would pile its 429s up in our memory. That 429 is written on
 * a later turn instead, like the edge's own refusals: uWS drops the connection if another request
 * comes while it waits. A HEAD sent on its own gets its 429, with the GET's length, as any other.
 */
function answersLater(method: string, r: GatewayResponse): boolean {
  return r.status === 429 && method === 'HEAD';
}

/** uWS's LIBUS_LISTEN_EXCLUSIVE_PORT: bind without SO_REUSEPORT. (This build exports no name for it.) */
const LISTEN_EXCLUSIVE_PORT = 1;

type Listening = (socket: uWS.us_listen_socket | false) => void;

/** listen(host, port, options, cb): the native call takes it; this build's typings omit the overload. */
function listenExclusive(app: uWS.TemplatedApp, host: string, port: number, cb: Listening): void {
  const withOptions = app.listen as unknown as (this: uWS.TemplatedApp, host: string, port: number, options: number, cb: Listening) => void;
  withOptions.call(app, host, port, LISTEN_EXCLUSIVE_PORT, cb);
}

/**
 * The headers in two native calls: the lines whose values come from a small set (FixedLines) as
 * bytes kept per combination, then the others as one string, the first name followed by its
 * value and the other lines. Each call into uWS costs more than building the string, and a string
 * is measured, flattened and encoded by uWS on every call, where bytes are copied as they are.
 * A CR or LF inside a value would forge a header line, so each value is checked on its own and any
 * such byte becomes a space (values are ours; this guards against a bug, not a user); a fixed
 * combination is checked once, when it is first kept.
 */
function writeHeaders(res: uWS.HttpResponse, headers: Record<string, string>, keepAlive: boolean): void {
  let first: string | undefined;
  let value = '';
  let cacheControl: string | undefined;
  let vary: string | undefined;
  let contentType: string | undefined;
  let policy: string | undefined;
  for (const k in headers) {
    const v = headers[k]!;
    switch (k) {
      case 'cache-control':
        cacheControl = v;
        continue;
      case 'vary':
        vary = v;
        continue;
      case 'content-type':
        contentType = v;
        continue;
      case 'ratelimit-policy':
        policy = v;
        continue;
    }
    const line = selfFormatted(k) ? v : oneLine(v);
    if (first === undefined) {
      first = k;
      value = line;
    } else {
      value += `\r\n${k}: ${line}`;
    }
  }
  if (first !== undefined) res.writeHeader(first, value);
  const fixed = fixedLines.get(cacheControl, vary, contentType, policy, keepAlive);
  if (fixed) res.writeHeader(fixed.name, fixed.rest);
}

/**
 * The fields whose values the gateway formats itself from digits, hex and base64url alone
 * (traceIdOf, the tags of representation.ts, RateLimiter.charge), or from printable ASCII it
 * checked when it took it in (a route's lifecycle: gateway/lifecycle.ts, parseEntries and fill),
 * so they cannot hold a CR or LF; test/header-values.test.ts pins those alphabets. Checking them
 * anyway cost a GET 1.35k of its 37k instructions (the scans, and flattening each value a second
 * time), and a sunsetting route's GET about 0.6k more for its three lines.
 */
function selfFormatted(name: string): boolean {
  switch (name) {
    case 'trace-id':
    case 'etag':
    case 'ratelimit':
    case 'deprecation':
    case 'sunset':
    case 'link':
      return true;
  }
  return false;
}

const CR_OR_LF_ALL = /[\r\n]/g;

/** The value with any CR or LF turned to a space. */
function oneLine(v: string): string {
  // Two indexOf scans cost less than half a regular expression test on these short values.
  return v.indexOf('\r') !== -1 || v.indexOf('\n') !== -1 ? v.replace(CR_OR_LF_ALL, ' ') : v;
}

interface FixedBlock {
  cacheControl: string | undefined;
  vary: string | undefined;
  contentType: string | undefined;
  policy: string | undefined;
  keepAlive: boolean;
  /** The first line's name, then its value and the other lines, as writeHeader takes them. */
  name: Uint8Array;
  rest: Uint8Array;
}

/**
 * Cache-Control, Vary, Content-Type, RateLimit-Policy and Keep-Alive: values taken from the
 * routes, the negotiated media type and the limiter's policy, so only a few combinations occur.
 * Each is encoded once and looked up by its values; at most MAX_FIXED_BLOCKS are kept (the first
 * kept goes first), so a combination never seen before costs an encoding and a bounded slot.
 */
export class FixedLines {
  private readonly blocks: FixedBlock[] = [];

  get size(): number {
    return this.blocks.length;
  }

  get(cacheControl: string | undefined, vary: string | undefined, contentType: string | undefined, policy: string | undefined, keepAlive: boolean): FixedBlock | undefined {
    for (const b of this.blocks) {
      if (b.cacheControl === cacheControl && b.vary === vary && b.contentType === contentType && b.policy === policy && b.keepAlive === keepAlive) return b;
    }
    const lines: [string, string | undefined][] = [
      ['cache-control', cacheControl],
      ['vary', vary],
      ['content-type', contentType],
      ['ratelimit-policy', policy],
      ['keep-alive', keepAlive ? KEEP_ALIVE : undefined],
    ];
    let name: string | undefined;
    let rest = '';
    for (const [n, v] of lines) {
      if (v === undefined) continue;
      if (name === undefined) name = n;
      else rest += `\r\n${n}: `;
      rest += oneLine(v);
    }
    if (name === undefined) return undefined;
    const block: FixedBlock = { cacheControl, vary, contentType, policy, keepAlive, name: encoder.encode(name), rest: encoder.encode(rest) };
    if (this.blocks.length >= MAX_FIXED_BLOCKS) this.blocks.shift();
    this.blocks.push(block);
    return block;
  }
}

export const MAX_FIXED_BLOCKS = 64;
const fixedLines = new FixedLines();

/**
 * Writes the answer: true once it is out, false while a paced body still waits for the socket
 * (the exchange then ends when the rest is written, or its client goes away). While the server
 * drains, a small body closes its connection as it ends (uWS writes `Connection: close` and
 * closes: RFC 9112 §9.6 has a server that says close close), and a large one is paced, so the
 * stop waits for its last byte, and says nothing: uWS cannot close after a paced end, and a
 * request that follows on that connection is answered 503 and closed. An answer without a body
 * cannot close here either, and keeps its own framing (a HEAD its GET's length).
 */
function writeResponse(res: uWS.HttpResponse, method: string, r: GatewayResponse, close: boolean, keepAlive: boolean, exchange: Exchange): boolean {
  // Closing when it can, as a stop does: while draining, or when the client asked to close.
  const draining = !close && (exchange.draining || !keepAlive);
  // uWS writes 200 OK itself when no status is given.
  if (r.status !== 200) res.writeStatus(statusLine(r.status));
  writeHeaders(res, r.headers, keepAlive && !draining);
  // endWithoutBody() takes no length here: this uWS build mis-writes an explicit one.
  if (r.status === 204 || r.status === 304 || r.body === undefined) {
    res.endWithoutBody();
    return true;
  }
  // A short string goes to uWS as it is (at most 3 UTF-8 bytes a UTF-16 unit, so under the
  // small-body bound); copying it into a Buffer first would only add an allocation.
  if (typeof r.body === 'string' && r.body.length * 3 <= SMALL_BODY_BYTES && method !== 'HEAD') {
    return endBody(res, r.body, close, draining, exchange);
  }
  if (method === 'HEAD' && close) {
    // A refusal that must close. This uWS build closes only through end() (endWithoutBody
    // takes no close flag here), which also writes Content-Length: 0 where the GET's length
    // belongs; closing wins: after a framing error the next request's start is unknown.
    res.end('', true);
    return true;
  }
  const body = typeof r.body === 'string' ? Buffer.from(r.body) : r.body;
  if (method === 'HEAD') {
    // RFC 9110 §9.3.2: the length the GET would have had, and no body.
    res.writeHeader('content-length', String(body.length));
    res.endWithoutBody();
    return true;
  }
  return endBody(res, body, close, draining, exchange);
}

/**
 * Ends the answer with its body: closing (a refusal, or a small body while draining), paced (a
 * large body always, a small one when drawn), or at once. False while a paced body waits for
 * the socket.
 */
function endBody(res: uWS.HttpResponse, body: string | Buffer, close: boolean, draining: boolean, exchange: Exchange): boolean {
  const large = typeof body !== 'string' && body.length > SMALL_BODY_BYTES;
  if (close || (draining && !large)) res.end(body, true);
  else if (large || paceNow()) return endPaced(res, body, exchange);
  else res.end(body);
  return true;
}

/**
 * Whether this small answer is ended by endPaced: one in PACE_EVERY, drawn at random. tryEnd
 * hands back a new array, built through V8's API, which cost a GET 2.5k of its 32k instructions;
 * end() costs none. Drawn, not counted: a counter shared by every connection could be kept in
 * step by a client that sends one request between each fifteen of its own on another
 * connection, so that its answers were never the checked ones. Drawn, a client that reads
 * nothing escapes the check on n answers with odds of (15/16)^n: about one in 400,000 for 200.
 */
function paceNow(): boolean {
  return Math.random() < 1 / PACE_EVERY;
}

const PACE_EVERY = 16;

/**
 * Ends the answer with what the socket takes now, and the rest as it drains. end() alone would
 * not do: uWS copies whatever the socket cannot take into the connection's own buffer, with no
 * bound, and a client pipelining small GETs without reading the answers grew the process by
 * 70 MB a connection within seconds. An answer tryEnd cannot finish stays pending instead, and
 * uWS closes a connection whose next request arrives while an answer is pending (HttpContext:
 * "not ready for another request yet"), so what waits on a connection is bounded by the socket
 * buffers and a few answers (paceNow). Answers without a body (204, 304, HEAD) cannot be held
 * back this way; past the caller's rate limit they are 429s, whose body holds them back (a
 * HEAD's waits a turn: answersLater).
 */
function endPaced(res: uWS.HttpResponse, body: string | Buffer, exchange: Exchange): boolean {
  const start = res.getWriteOffset();
  // A string's length in bytes is counted by uWS as it copies it (a total of 0 means "this").
  const [ok, done] = res.tryEnd(body, typeof body === 'string' ? 0 : body.length);
  if (ok || done) return true;
  // Backpressure: resume from where the socket stopped, only when it can take more. The exchange
  // is under way until the last byte is out: a stop waits for it.
  exchange.watch();
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  res.onWritable((offset) => {
    if (exchange.aborted) return true;
    const [more, finished] = res.tryEnd(bytes.subarray(offset - start), bytes.length);
    if (finished) exchange.end();
    return more;
  });
  return false;
}
