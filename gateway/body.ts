// A request body gathered from uWS's chunks into one buffer of its declared length. uWS hands
// over the body in as many pieces as the network delivers it, one callback each, and reuses each
// piece's memory when the callback returns, so each is copied: into that one buffer, never one
// allocation per piece.
import { Buffer } from 'node:buffer';

/**
 * Most callbacks one body may take. Each costs a crossing from uWS into JavaScript, about a
 * microsecond, so a body sent a byte at a time could make the loop spend a second on one request
 * while every other connection waits. A body arrives in as many pieces as the network delivers it
 * (a TCP segment is rarely under 536 bytes); any body whose pieces average 256 bytes or more fits.
 */
export function maxChunks(limit: number): number {
  return 1024 + Math.ceil(limit / 256);
}

export type Added = 'more' | 'done' | 'too-fragmented';

export class BodyBuffer {
  private buf: Buffer | undefined;
  private size = 0;
  private chunks = 0;

  /** `declared`: the Content-Length, already checked to be within the limit. */
  constructor(
    private readonly declared: number,
    private readonly chunkLimit: number,
  ) {}

  /** Copies a piece in (uWS reuses its memory afterwards). uWS hands over no more than `declared` bytes. */
  add(chunk: ArrayBuffer, isLast: boolean): Added {
    if (++this.chunks > this.chunkLimit) return 'too-fragmented';
    const n = chunk.byteLength;
    if (n > 0) {
      this.buf ??= Buffer.allocUnsafe(this.declared);
      this.buf.set(new Uint8Array(chunk), this.size);
      this.size += n;
    }
    return isLast ? 'done' : 'more';
  }

  /** The body's bytes (once `add` said done). */
  get body(): Buffer {
    return this.buf === undefined ? Buffer.alloc(0) : this.buf.subarray(0, this.size);
  }

  /** Bytes held for the body. */
  get capacity(): number {
    return this.buf?.length ?? 0;
  }
}
