/**
 * Shared rate limits (job.yaml `rate_limits`): the rule shape, and the sliding window of grants a limiter keeps.
 * Pure: the rate limiter workflow (one per deployment and rule) grants from it, so every worker of the deployment
 * draws from one window.
 */

import type { RateLimitRule } from '../../contracts/job-config';

export interface RateAsk {
  requests: number;
  /** Input tokens the requests are expected to send (estimated from their size). */
  tokens: number;
}

export interface RateGrant {
  requests: number;
  tokens: number;
  /** When nothing was granted: how long until the window frees some. */
  retryAfterMs: number;
}

export interface GrantEntry {
  at: number;
  requests: number;
  tokens: number;
}

/**
 * How long a grant counts: a minute, plus the 2 s by which a call may follow its grant (a worker holds a lease for up
 * to a second, and the upstream counts by its own clock), so that no minute the upstream sees holds more.
 */
export const RATE_WINDOW_MS = 62_000;

/**
 * Grants as many of the asked requests as fit in the last minute's window (and their tokens), recording them;
 * `grants` is mutated. A request larger than the whole token limit is granted alone into an empty window, else it
 * could never run.
 */
export function grantFromWindow(
  grants: GrantEntry[],
  limits: Pick<RateLimitRule, 'requests_per_minute' | 'input_tokens_per_minute'>,
  now: number,
  ask: RateAsk
): RateGrant {
  while (grants.length > 0 && grants[0]!.at <= now - RATE_WINDOW_MS) grants.shift();
  const used = grants.reduce((sum, g) => ({ requests: sum.requests + g.requests, tokens: sum.tokens + g.tokens }), {
    requests: 0,
    tokens: 0,
  });
  const perRequest = ask.requests > 0 ? ask.tokens / ask.requests : 0;
  let requests = ask.requests;
  if (limits.requests_per_minute !== undefined)
    requests = Math.min(requests, Math.max(0, Math.floor(limits.requests_per_minute - used.requests)));
  if (limits.input_tokens_per_minute !== undefined && perRequest > 0) {
    const free = Math.max(0, limits.input_tokens_per_minute - used.tokens);
    requests = Math.min(
      requests,
      grants.length === 0 ? Math.max(1, Math.floor(free / perRequest)) : Math.floor(free / perRequest)
    );
  }
  if (requests <= 0) {
    const oldest = grants[0];
    return { requests: 0, tokens: 0, retryAfterMs: oldest ? oldest.at + RATE_WINDOW_MS - now : 1_000 };
  }
  const tokens = Math.round(requests * perRequest);
  grants.push({ at: now, requests, tokens });
  return { requests, tokens, retryAfterMs: 0 };
}
