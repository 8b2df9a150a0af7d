// A request body gathered from uWS's chunks into one buffer. uWS hands over one chunk per
// callback (a chunked body's every chunk is one, however small) and reuses its memory when the
// callback returns, so each is copied. Into one buffer, never one allocation per chunk: a body of
// a million one-byte chunks would otherwise hold a million Buffers, about a hundred times its
// size. The buffer is the declared length when there is one, and otherwise doubles as it fills,
// never past the limit: at most twice the body's bytes, and never more than `limit`.
import { Buffer } from 'node:buffer';

/** Smallest buffer a body of unknown length starts with. */
const FIRST_CAPACITY = 4 * 1024;

/**
 * Most callbacks one body may take. Each costs a crossing from uWS into JavaScript, about a
 * microsecond, so a body cut into one-byte chunks could make the loop spend a second on one
 * request while every other connection waits. A body arrives in as many pieces as the network
 * delivers it (a TCP segment is rarely under 536 bytes) or its sender chunks it; any body whose
 * pieces average 256 bytes or more fits.
 */
export function maxChunks(limit: number): number {
  return 1024 + Math.ceil(limit / 256);
}

export type Added = 'more' | 'done' | 'too-large' | 'too-fragmented';

export class BodyBuffer {
  private buf: Buffer | undefined;
  private size = 0;
  private chunks = 0;
  private readonly chunkLimit: number;

  /** `declared`: the Content-Length, already checked to be at most `limit`; undefined when chunked. */
  constructor(
    private readonly limit: number,
    private readonly declared: number | undefined,
  ) {
    this.chunkLimit = maxChunks(limit);
  }

  /** Copies a chunk in (uWS reuses its memory afterwards). */
  add(chunk: ArrayBuffer, isLast: boolean): Added {
    const n = chunk.byteLength;
    const size = this.size + n;
    if (size > this.limit) return 'too-large';
    if (++this.chunks > this.chunkLimit) return 'too-fragmented';
    if (n === 0) return isLast ? 'done' : 'more';
    if (this.buf === undefined && isLast) {
      // The common case, a body in one piece: one copy of exactly its bytes.
      this.buf = Buffer.allocUnsafe(n);
      this.buf.set(new Uint8Array(chunk));
      this.size = n;
      return 'done';
    }
    this.reserve(size);
    this.buf!.set(new Uint8Array(chunk), this.size);
    this.size = size;
    return isLast ? 'done' : 'more';
  }

  /** The body's bytes (once `add` said done). */
  get body(): Buffer {
    return this.buf === undefined ? Buffer.alloc(0) : this.buf.subarray(0, this.size);
  }

  /** Bytes held for the body, used or not. */
  get capacity(): number {
    return this.buf?.length ?? 0;
  }

  private reserve(size: number): void {
    const have = this.buf?.length ?? 0;
    if (size <= have) return;
    let capacity: number;
    if (this.declared !== undefined && this.declared >= size) capacity = this.declared;
    else capacity = Math.min(this.limit, Math.max(size, FIRST_CAPACITY, have * 2));
    const grown = Buffer.allocUnsafe(capacity);
    if (this.buf !== undefined) this.buf.copy(grown, 0, 0, this.size);
    this.buf = grown;
  }
}
