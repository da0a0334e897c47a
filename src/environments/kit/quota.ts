/**
 * Quota and rate-limit replies of a cloud vendor (too many sandboxes, too many requests), handled once for every
 * provider: the call is retried with jittered exponential backoff for up to ROLLOUT_CLOUD_QUOTA_WAIT_SEC in all, then
 * fails with a CloudQuotaError carrying the vendor's own message. That is an infrastructure error (never the agent's
 * fault, excluded from metrics): the activities pass it to Temporal as non-retryable, so the trial restarts after
 * the wait instead of the step being retried at once.
 */
import { setTimeout as sleep } from 'node:timers/promises';

import { jitteredBackoffMs } from '../../backoff';
import { quotaReplied, quotaRetrying } from './quota-replies';

export class CloudQuotaError extends Error {
  constructor(
    readonly provider: string,
    readonly vendorMessage: string,
    /** null: a quota that waiting does not clear (refused at once). */
    waitedMs: number | null
  ) {
    super(
      waitedMs === null
        ? `${provider}: a quota that waiting does not clear (raise it with the vendor): ${vendorMessage}`
        : `${provider}: quota or rate limit, still refused after waiting ${Math.round(waitedMs / 1000)} s: ${vendorMessage}`
    );
    this.name = 'CloudQuotaError';
  }
}

export interface QuotaBackoffOptions {
  /** In all; default ROLLOUT_CLOUD_QUOTA_WAIT_SEC, else 300 s. */
  maxWaitMs?: number;
  minDelayMs?: number;
  maxDelayMs?: number;
  signal?: AbortSignal;
  /** Told of every wait (for the trial log). */
  onWait?: (delayMs: number, vendorMessage: string) => void;
  /**
   * The vendor's message when its error is a quota that never clears by waiting (a snapshot quota, a per-sandbox
   * maximum): refused at once, as a CloudQuotaError; else null.
   */
  lasting?: (err: unknown) => string | null;
}

const DEFAULT_MAX_WAIT_SEC = 300;

/** ROLLOUT_CLOUD_QUOTA_WAIT_SEC, or the default. */
export function quotaMaxWaitMs(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.ROLLOUT_CLOUD_QUOTA_WAIT_SEC;
  if (raw === undefined || raw === '') return DEFAULT_MAX_WAIT_SEC * 1000;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds < 0) {
    throw new Error(`ROLLOUT_CLOUD_QUOTA_WAIT_SEC: expected a number of seconds ≥ 0, got "${raw}"`);
  }
  return seconds * 1000;
}

/**
 * Runs `call`, retrying while `quotaMessage` recognises its error as the vendor's quota or rate-limit reply (returning
 * the vendor's message; null for any other error, which is thrown as it is).
 */
export async function withQuotaBackoff<T>(
  provider: string,
  quotaMessage: (err: unknown) => string | null,
  call: () => Promise<T>,
  options: QuotaBackoffOptions = {}
): Promise<T> {
  const maxWaitMs = options.maxWaitMs ?? quotaMaxWaitMs();
  const begun = Date.now();
  for (let retries = 0; ; retries++) {
    try {
      return await call();
    } catch (err) {
      const lasting = options.lasting?.(err) ?? null;
      if (lasting !== null) throw new CloudQuotaError(provider, lasting, null);
      const message = quotaMessage(err);
      if (message === null) throw err;
      quotaReplied();
      const waited = Date.now() - begun;
      if (waited >= maxWaitMs) throw new CloudQuotaError(provider, message, waited);
      const delay = Math.min(
        jitteredBackoffMs(options.minDelayMs ?? 1000, options.maxDelayMs ?? 30_000, retries, Math.random),
        maxWaitMs - waited
      );
      options.onWait?.(delay, message);
      await sleep(delay, undefined, options.signal ? { signal: options.signal } : {});
      await quotaRetrying(options.signal);
    }
  }
}
