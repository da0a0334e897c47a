/** job.yaml `retry`: whether a finished trial runs again, and after how long. Pure: the Trial workflow imports it. */
import type { RetryPolicy, TrialError } from './types';

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
  const ceiling = Math.min(policy.maxWaitSec, policy.minWaitSec * 2 ** retries);
  return Math.round(ceiling * (0.5 + random() / 2) * 1000);
}
