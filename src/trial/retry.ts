/** job.yaml `retry`: whether a finished trial runs again, and after how long. Pure: the Trial workflow imports it. */
import { jitteredBackoffMs } from '../backoff';
import { UPSTREAM_ERROR_TYPES } from '../contracts/trial-errors';
import type { RetryPolicy, TrialError } from '../contracts/trial';

/**
 * Without job.yaml `retry`, a trial the model's API failed (unreachable, overloaded, rate-limited after the gateway's
 * own waiting, a rejected key) still runs again, as infrastructure failures do: it said nothing about the agent.
 */
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  errorTypes: [...UPSTREAM_ERROR_TYPES],
  maxRetries: 3,
  minWaitSec: 1,
  maxWaitSec: 60,
};

/**
 * The wait before retry number `retries + 1`, or null when the trial is done: exponential from min_wait_sec, capped
 * at max_wait_sec, with full jitter between half and all of it so trials that failed together do not return together.
 * `random` is the workflow's deterministic Math.random.
 */
export function retryWaitMs(
  policy: RetryPolicy | null | undefined,
  error: TrialError | null,
  retries: number,
  random: () => number = Math.random
): number | null {
  if (!policy || !error || retries >= policy.maxRetries || !policy.errorTypes.includes(error.type)) return null;
  return jitteredBackoffMs(policy.minWaitSec * 1000, policy.maxWaitSec * 1000, retries, random);
}
