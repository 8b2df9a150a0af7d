// A small keep-alive client for probes and seeding (never for the measured load).
import { Agent, request } from 'undici';

const agent = new Agent({ connections: 128, pipelining: 1, keepAliveTimeout: 10_000 });

export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface Req {
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  headers?: Record<string, string>;
  body?: string;
  timeoutMs?: number;
}

export async function call(url: string, req: Req = {}): Promise<Reply> {
  const timeout = req.timeoutMs ?? 30_000;
  const res = await request(url, {
    method: req.method ?? 'GET',
    headers: req.headers,
    body: req.body,
    dispatcher: agent,
    headersTimeout: timeout,
    bodyTimeout: timeout,
  });
  const body = await res.body.text();
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) {
    if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return { status: res.statusCode, headers, body };
}

export async function closeHttp(): Promise<void> {
  await agent.close();
}

/** Runs `work(i)` for i in [0, n) with at most `concurrency` in flight. */
export async function pool(n: number, concurrency: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < n) {
      const i = next++;
      await work(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
}
