/**
 * The gateway's side of shared rate limits: which `rate_limits` rules (job.yaml's and the worker config's) a call
 * falls under, and the sources it waits on (Temporal workflows per rule in a deployment: src/limits/shared-rate-limits.ts
 * and concurrency-limits.ts).
 */
import { minimatch } from 'minimatch';

import type { AdaptiveLimit } from './adaptive-limit';
import type { Vendor } from '../contracts/job-config';
import type { RateLimitRule } from '../contracts/job-config';

/** Grants leases of a shared limit; resolves once this call may go (rejects if `signal` aborts first). */
export interface SharedRateLimits {
  acquire(rule: RateLimitRule, tokens: number, signal: AbortSignal): Promise<void>;
}

/** A deployment-wide `max_concurrent`: this gateway's share of it, as a local limit the source keeps up to date. */
export interface SharedConcurrency {
  limitFor(rule: RateLimitRule & { max_concurrent: number }): AdaptiveLimit;
  /** Gives the shares back. */
  close(): Promise<void>;
}

/**
 * The rules a call is under: the worker's (its config file) and the job's (job.yaml). Both apply; a rule in both is
 * one limit, not two.
 */
export function mergedRules(worker: readonly RateLimitRule[], job: readonly RateLimitRule[]): RateLimitRule[] {
  const seen = new Set<string>();
  return [...worker, ...job].filter((rule) => {
    const key = JSON.stringify([
      rule.match.upstream,
      rule.match.model,
      rule.requests_per_minute,
      rule.input_tokens_per_minute,
      rule.max_concurrent,
    ]);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

export function matchingRules(rules: readonly RateLimitRule[], vendor: Vendor, model: string | null): RateLimitRule[] {
  return rules.filter(
    (rule) =>
      (rule.match.upstream === undefined || rule.match.upstream === vendor) &&
      (rule.match.model === undefined || (model !== null && minimatch(model, rule.match.model)))
  );
}

/** A call's input tokens, estimated before it is sent (about 4 bytes of JSON per token). */
export function estimatedInputTokens(body: Buffer): number {
  return Math.ceil(body.length / 4);
}
