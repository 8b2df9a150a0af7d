// Shared pieces for the fast-check property runs (orders-model, fuzz). Their checks throw
// instead of calling ava's `t.is`: an ava assertion records a failure and carries on, while
// fast-check only sees a failure that throws, and needs one to shrink it to a minimal case.

import assert from 'node:assert/strict';
import type { ExecutionContext } from 'ava';
import fc from 'fast-check';
import type { Problem } from './edge-kit.js';

/** What the checks need of an answer, whichever client produced it. */
export interface Answered {
  status: number;
  /** Lower-cased names. */
  headers: Record<string, string>;
  /** The body after undoing Content-Encoding. */
  text: string;
}

/**
 * An RFC 9457 problem (CONTRACT §4): problem+json whose `status` repeats the HTTP status and
 * whose `traceId` is the `Trace-Id` header. `context` names the request in the failure message.
 */
export function checkProblem(res: Answered, context: string): Problem {
  assert.match(res.headers['content-type'] ?? '', /^application\/problem\+json\b/, `${context}: ${res.status} is not problem+json`);
  let body: Problem;
  try {
    body = JSON.parse(res.text) as Problem;
  } catch {
    assert.fail(`${context}: the ${res.status} problem body is not JSON: ${res.text.slice(0, 200)}`);
  }
  assert.equal(body.status, res.status, `${context}: problem status ${body.status} differs from HTTP ${res.status}`);
  assert.ok(res.headers['trace-id'], `${context}: no Trace-Id header`);
  assert.equal(body.traceId, res.headers['trace-id'], `${context}: traceId differs from the Trace-Id header`);
  assert.match(String(body.type), /^\/problems\/[a-z-]+$/, `${context}: type ${body.type}`);
  assert.ok(typeof body.title === 'string' && body.title.length > 0, `${context}: no title`);
  assert.ok(typeof body.detail === 'string' && body.detail.length > 0, `${context}: no detail`);
  return body;
}

/** A problem of exactly this status and slug. */
export function expectProblem(res: Answered, status: number, slug: string, context: string): Problem {
  assert.equal(res.status, status, `${context}: expected ${status} ${slug}, got ${res.status}: ${res.text.slice(0, 300)}`);
  const body = checkProblem(res, context);
  assert.equal(body.type, `/problems/${slug}`, `${context}: ${res.text.slice(0, 300)}`);
  return body;
}

/**
 * Runs a property with fast-check's defaults (on failure it throws with the seed, the path and
 * the shrunk counterexample). FC_SEED and FC_PATH, as printed by a failure, replay that run;
 * FC_NUM_RUNS asks for a longer (or shorter) search than the file's default.
 * The test's own timeout is raised to `shrinkBudgetMs` so a failure found late still has time
 * to shrink before ava's inactivity timeout ends the worker and loses the counterexample.
 */
export async function assertProperty<Ts extends [unknown, ...unknown[]]>(
  t: ExecutionContext<unknown>,
  property: fc.IAsyncPropertyWithHooks<Ts>,
  params: { numRuns: number; shrinkBudgetMs?: number },
): Promise<void> {
  t.timeout(params.shrinkBudgetMs ?? 10 * 60_000, 'the property run (with shrinking) did not end');
  const seed = process.env.FC_SEED;
  const replay: fc.Parameters<Ts> = seed === undefined ? {} : { seed: Number(seed), path: process.env.FC_PATH, endOnFailure: true };
  const numRuns = process.env.FC_NUM_RUNS === undefined ? params.numRuns : Number(process.env.FC_NUM_RUNS);
  const started = Date.now();
  // The failing check's own message goes into the report: ava does not print an error's cause.
  await fc.assert(property, { numRuns, includeErrorInReport: true, ...replay });
  t.log(`${numRuns} runs in ${((Date.now() - started) / 1000).toFixed(1)} s${seed === undefined ? '' : ` (replaying seed ${seed})`}`);
}
