/**
 * One shared rate limit of a deployment (a job.yaml `rate_limits` rule): every worker's gateway asks it for leases
 * of requests and input tokens, in small batches, through the `acquire` update (update-with-start, so the first ask
 * starts it). Grants come from one sliding window of the last minute, so the upstream sees the rule's rate whatever
 * the number of workers; what a crashed worker held leaves the window within the minute. The workflow ends after
 * ten idle minutes and continues as new before its history grows long.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  defineUpdate,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';

import type { GrantEntry, RateAsk, RateGrant, RateLimitRule } from '../src/gateway/rate-window';
import { grantFromWindow } from '../src/gateway/rate-window';

export const acquireRateUpdate = defineUpdate<RateGrant, [RateAsk]>('acquire');

export interface RateLimiterInput {
  limits: Pick<RateLimitRule, 'requests_per_minute' | 'input_tokens_per_minute'>;
  /** The window carried across continue-as-new. */
  grants?: GrantEntry[];
}

const UPDATES_PER_RUN = 1_000;
const IDLE_END = '10 minutes';

export async function rateLimiterWorkflow(input: RateLimiterInput): Promise<void> {
  const grants = input.grants ?? [];
  let handled = 0;
  let lastAsk = 0;
  setHandler(
    acquireRateUpdate,
    (ask) => {
      handled += 1;
      lastAsk = handled;
      return grantFromWindow(grants, input.limits, Date.now(), ask);
    },
    {
      validator: (ask: RateAsk) => {
        if (!(ask.requests >= 1 && ask.tokens >= 0)) throw new Error('an ask is at least one request');
      },
    }
  );
  for (;;) {
    const seen = lastAsk;
    const busy = await condition(
      () => handled >= UPDATES_PER_RUN || workflowInfo().continueAsNewSuggested || lastAsk !== seen,
      IDLE_END
    );
    if (!busy) return;
    if (handled >= UPDATES_PER_RUN || workflowInfo().continueAsNewSuggested) break;
  }
  await condition(allHandlersFinished);
  await continueAsNew<typeof rateLimiterWorkflow>({ limits: input.limits, grants });
}
