/**
 * What a call through the gateway waits for before it goes upstream: the `rate_limits` rules it falls under (the
 * worker config's and the job's), their shared leases, and a concurrency slot (a rule's `max_concurrent`, or the
 * upstream's adaptive limit).
 */
import type http from 'node:http';

import type { AdaptiveLimitOptions } from './adaptive-limit';
import { ADAPTIVE_LIMIT_DEFAULTS, AdaptiveLimit } from './adaptive-limit';
import type { Vendor } from '../contracts/job-config';
import type { SharedConcurrency, SharedRateLimits } from './rules';
import { estimatedInputTokens, matchingRules, mergedRules } from './rules';
import type { RateLimitRule } from '../contracts/job-config';

export interface CallLimitsOptions {
  /** The adaptive concurrency limit each upstream (origin) starts with, and its bounds. */
  adaptiveLimit?: AdaptiveLimitOptions;
  /** Where leases of shared rate limits come from; without it, `rate_limits` rules only cap concurrency. */
  sharedLimits?: SharedRateLimits;
  /** Where shares of deployment-wide `max_concurrent` come from; without it, the cap holds per worker. */
  sharedConcurrency?: SharedConcurrency;
  /** The worker's own `rate_limits` (its config file), applied with each job's. */
  rateLimits?: RateLimitRule[];
}

export class CallLimits {
  private readonly limits = new Map<string, AdaptiveLimit>();

  constructor(private readonly options: CallLimitsOptions) {}

  /** The rules a generation call falls under: the worker's and its job's (`jobRules`). */
  rulesOf(jobRules: readonly RateLimitRule[], vendor: Vendor, model: string | null): RateLimitRule[] {
    return matchingRules(mergedRules(this.options.rateLimits ?? [], jobRules), vendor, model);
  }

  /**
   * The concurrency limit of a call: a rule's `max_concurrent` when one matches (this worker's share of it across the
   * deployment, or fixed per worker without a shared source), else the upstream's adaptive one, per job and origin
   * (one vendor endpoint): a job whose agents hold slots with long streams or draw 429s slows only its own calls.
   */
  limitOf(target: URL, rules: readonly RateLimitRule[] = [], job = ''): AdaptiveLimit {
    const capped = rules.find((rule) => rule.max_concurrent !== undefined);
    if (capped && this.options.sharedConcurrency) {
      return this.options.sharedConcurrency.limitFor({ ...capped, max_concurrent: capped.max_concurrent! });
    }
    const key = capped
      ? `max_concurrent ${JSON.stringify(capped.match)} ${capped.max_concurrent}`
      : `${job} ${target.origin}`;
    let limit = this.limits.get(key);
    if (!limit) {
      const n = capped?.max_concurrent;
      limit = new AdaptiveLimit(
        n !== undefined ? { initial: n, min: n, max: n } : (this.options.adaptiveLimit ?? ADAPTIVE_LIMIT_DEFAULTS)
      );
      this.limits.set(key, limit);
    }
    return limit;
  }

  /** Waits for a lease of every shared limit the call falls under; returns the milliseconds waited. */
  async sharedLeases(rules: readonly RateLimitRule[], body: Buffer, res: http.ServerResponse): Promise<number> {
    const shared = this.options.sharedLimits;
    const limited = rules.filter((r) => r.requests_per_minute !== undefined || r.input_tokens_per_minute !== undefined);
    if (!shared || limited.length === 0) return 0;
    const begun = Date.now();
    const gone = new AbortController();
    const onClose = () => gone.abort();
    res.once('close', onClose);
    try {
      for (const rule of limited) await shared.acquire(rule, estimatedInputTokens(body), gone.signal);
    } finally {
      res.off('close', onClose);
    }
    return Date.now() - begun;
  }

  /** Gives back what this gateway holds of shared limits. */
  async close(): Promise<void> {
    await this.options.sharedConcurrency?.close();
  }
}
