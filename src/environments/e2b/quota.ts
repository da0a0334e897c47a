/**
 * E2B's quota and rate-limit replies (HTTP 429: the team's concurrent sandboxes or API rate; 503: busy), waited on
 * through the cloud providers' shared backoff (../cloud/quota.ts), then a CloudQuotaError with E2B's message.
 */
import { log } from '../../log';
import { withQuotaBackoff } from '../cloud/quota';
import { sdk } from './client';

/** How long quota replies are waited on in all: undefined for ROLLOUT_CLOUD_QUOTA_WAIT_SEC's. */
export type QuotaWaitMs = number | undefined;

/** E2B's message when `err` is its quota or rate-limit reply; else null. */
export function e2bQuotaMessage(err: unknown): string | null {
  const { RateLimitError, ServiceBusyError } = sdk();
  return err instanceof RateLimitError || err instanceof ServiceBusyError ? err.message : null;
}

/** `call` (an E2B API call, `what` for the log) through the shared quota backoff. */
export function withE2BQuota<T>(
  what: string,
  maxWaitMs: QuotaWaitMs,
  call: () => Promise<T>,
  signal?: AbortSignal
): Promise<T> {
  return withQuotaBackoff('e2b', e2bQuotaMessage, call, {
    maxWaitMs,
    signal,
    onWait: (delayMs, message) =>
      log.debug(`e2b: ${what}: ${message}; trying again in ${Math.round(delayMs / 1000)} s`),
  });
}
