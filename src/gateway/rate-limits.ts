/**
 * The gateway's side of shared rate limits: which job.yaml `rate_limits` rules a call falls under, and the lease
 * source it waits on (a Temporal workflow per rule in a deployment: src/temporal/rate-limits.ts).
 */
import { minimatch } from 'minimatch';

import type { Vendor } from './dialect';
import type { RateLimitRule } from './rate-window';

/** Grants leases of a shared limit; resolves once this call may go (rejects if `signal` aborts first). */
export interface SharedRateLimits {
  acquire(rule: RateLimitRule, tokens: number, signal: AbortSignal): Promise<void>;
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
