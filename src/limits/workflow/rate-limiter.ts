/**
 * One shared rate limit of a deployment (a job.yaml `rate_limits` rule): every worker's gateway asks it for leases
 * of requests and input tokens, in small batches, through the `acquire` update (update-with-start, so the first ask
 * starts it). Grants come from one sliding window of the last minute, so the upstream sees the rule's rate whatever
 * the number of workers; what a crashed worker held leaves the window within the minute. The workflow ends after
 * ten idle minutes and continues as new before its history grows long.
 */
import { continueAsNew, defineUpdate, setHandler } from '@temporalio/workflow';

import type { GrantEntry, RateAsk, RateGrant } from './rate-window';
import type { RateLimitRule } from '../../contracts/job-config';
import { grantFromWindow } from './rate-window';
import { serveUntilIdleOrLong } from './limiter-loop';

export const acquireRateUpdate = defineUpdate<RateGrant, [RateAsk]>('acquire');

export interface RateLimiterInput {
  limits: Pick<RateLimitRule, 'requests_per_minute' | 'input_tokens_per_minute'>;
  /** The window carried across continue-as-new. */
  grants?: GrantEntry[];
}

export async function rateLimiterWorkflow(input: RateLimiterInput): Promise<void> {
  const grants = input.grants ?? [];
  let handled = 0;
  setHandler(
    acquireRateUpdate,
    (ask) => {
      handled += 1;
      return grantFromWindow(grants, input.limits, Date.now(), ask);
    },
    {
      validator: (ask: RateAsk) => {
        if (!(ask.requests >= 1 && ask.tokens >= 0)) throw new Error('an ask is at least one request');
      },
    }
  );
  if (!(await serveUntilIdleOrLong(() => handled))) return;
  await continueAsNew<typeof rateLimiterWorkflow>({ limits: input.limits, grants });
}
