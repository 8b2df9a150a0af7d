// A raw TCP client for what an HTTP library would hide: the exact bytes of a response, whether
// a body or a Content-Length was sent where none may be, and when the server closed.

import { connect } from 'node:net';

export interface RawExchange {
  bytes: Buffer;
  /** The server closed (or reset) the connection before the deadline. */
  closed: boolean;
  /** Milliseconds from connect to the close, when it closed. */
  closedAfterMs: number | undefined;
}

/** A step between writes; it sees the bytes received so far (e.g. to wait for an answer). */
export type RawStep = (received: () => Buffer) => Promise<void>;

export interface RawOptions {
  /** Written in order once connected; a function runs when its turn comes. */
  send: (Buffer | string | RawStep)[];
  /** Give up waiting for the close after this long and report what arrived. */
  timeoutMs?: number;
  /** Shut the client's side down (a FIN) once everything is sent, as `nc -N` does. */
  halfClose?: boolean;
}

export function rawExchange(port: number, opts: RawOptions): Promise<RawExchange> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1');
    let done = false;
    const finish = (closed: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ bytes: Buffer.concat(chunks), closed, closedAfterMs: closed ? Date.now() - started : undefined });
    };
    const timer = setTimeout(() => finish(false), opts.timeoutMs ?? 5000);
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    // A reset after the server answered and closed is still a close; a refused connect is not.
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (chunks.length > 0 || err.code === 'ECONNRESET' || err.code === 'EPIPE') finish(true);
      else if (!done) {
        done = true;
        clearTimeout(timer);
        reject(err);
      }
    });
    socket.once('connect', () => {
      void (async () => {
        for (const [i, part] of opts.send.entries()) {
          if (done || socket.destroyed) return;
          if (typeof part === 'function') await part(() => Buffer.concat(chunks));
          // The last part and the FIN in one go, so they arrive together.
          else if (opts.halfClose && i === opts.send.length - 1) socket.end(part);
          else socket.write(part);
        }
        if (opts.halfClose && !done && !socket.writableEnded) socket.end();
      })().catch(() => finish(false));
    });
  });
}

export interface RawResponse {
  status: number;
  /** Header names lower-cased; a repeated header keeps every value. */
  headers: Record<string, string[]>;
  body: Buffer;
}

function header(r: RawResponse, name: string): string | undefined {
  return r.headers[name]?.[0];
}

export { header as rawHeader };

export function only(rs: RawResponse[]): RawResponse {
  if (rs.length !== 1) throw new Error(`expected one response, got ${rs.length}`);
  return rs[0]!;
}

/** A response in the shape assertProblem takes: repeated headers joined, the body as text. */
export function asAnswer(r: RawResponse): { status: number; headers: Record<string, string>; text: string } {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) headers[k] = v.join(', ');
  return { status: r.status, headers, text: r.body.toString('utf8') };
}

/**
 * Splits a byte stream into consecutive responses. `methods` are the methods of the requests in
 * order: HEAD answers, 1xx, 204 and 304 have no body whatever their headers say (RFC 9112 §6.3),
 * so bytes after their head must be the next response. Anything that is not a status line
 * where a response must start throws.
 */
export function parseResponses(bytes: Buffer, methods: string[]): RawResponse[] {
  const out: RawResponse[] = [];
  let at = 0;
  for (const method of methods) {
    if (at >= bytes.length) break;
    const headEnd = bytes.indexOf('\r\n\r\n', at);
    if (headEnd < 0) throw new Error(`incomplete response head at byte ${at}: ${JSON.stringify(bytes.subarray(at, at + 200).toString('latin1'))}`);
    const head = bytes.subarray(at, headEnd).toString('latin1').split('\r\n');
    const statusLine = head.shift() ?? '';
    const m = /^HTTP\/1\.1 (\d{3})(?: .*)?$/.exec(statusLine);
    if (!m) throw new Error(`expected a status line at byte ${at}, got ${JSON.stringify(statusLine.slice(0, 200))}`);
    const status = Number(m[1]);
    const headers: Record<string, string[]> = {};
    for (const line of head) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      (headers[name] ??= []).push(line.slice(colon + 1).trim());
    }
    at = headEnd + 4;
    let body: Buffer = Buffer.alloc(0);
    const bodiless = method === 'HEAD' || status === 204 || status === 304 || status < 200;
    if (!bodiless) {
      const te = headers['transfer-encoding']?.[0];
      const cl = headers['content-length']?.[0];
      if (te && /chunked/i.test(te)) {
        const parts: Buffer[] = [];
        for (;;) {
          const lineEnd = bytes.indexOf('\r\n', at);
          if (lineEnd < 0) throw new Error('incomplete chunk size line');
          const size = parseInt(bytes.subarray(at, lineEnd).toString('latin1'), 16);
          at = lineEnd + 2;
          if (size === 0) {
            const trailerEnd = bytes.indexOf('\r\n', at);
            at = trailerEnd + 2;
            break;
          }
          parts.push(bytes.subarray(at, at + size));
          at += size + 2;
        }
        body = Buffer.concat(parts);
      } else if (cl !== undefined) {
        const n = Number(cl);
        body = bytes.subarray(at, at + n);
        if (body.length < n) throw new Error(`body shorter than Content-Length ${n}`);
        at += n;
      } else {
        body = bytes.subarray(at);
        at = bytes.length;
      }
    }
    out.push({ status, headers, body });
  }
  if (at < bytes.length) throw new Error(`${bytes.length - at} stray bytes after the last response: ${JSON.stringify(bytes.subarray(at, at + 200).toString('latin1'))}`);
  return out;
}

/**
 * Waits until the responses to `methods` have fully arrived. uWS closes a connection when a
 * request arrives while the previous answer is still pending on I/O (it refuses "async
 * pipelining"), so keep-alive tests send the next request only after this.
 */
export function afterResponses(methods: string[], timeoutMs = 5000): RawStep {
  return async (received) => {
    const until = Date.now() + timeoutMs;
    for (;;) {
      try {
        if (parseResponses(received(), methods).length === methods.length) return;
      } catch {
        // incomplete so far
      }
      if (Date.now() > until) throw new Error(`no complete answers to ${methods.join(', ')} within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
}

/** One HTTP/1.1 request as bytes; Content-Length is added for a body unless told otherwise. */
export function rawRequest(method: string, path: string, headers: Record<string, string> = {}, body?: string | Buffer): Buffer {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  const h = { ...headers };
  if (body !== undefined && !Object.keys(h).some((k) => /^(content-length|transfer-encoding)$/i.test(k))) h['Content-Length'] = String(Buffer.byteLength(body));
  for (const [k, v] of Object.entries(h)) lines.push(`${k}: ${v}`);
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  return body === undefined ? head : Buffer.concat([head, Buffer.isBuffer(body) ? body : Buffer.from(body)]);
}

/** A chunked body in chunks of `size` bytes, with the terminating zero chunk. */
export function chunked(body: string, size: number): Buffer {
  const parts: Buffer[] = [];
  const bytes = Buffer.from(body);
  for (let i = 0; i < bytes.length; i += size) {
    const c = bytes.subarray(i, i + size);
    parts.push(Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}
