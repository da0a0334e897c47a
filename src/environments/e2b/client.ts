/**
 * The `e2b` SDK, loaded on first use (its undici and Connect clients cost start-up time every other command saves),
 * and how its replies read: not found, or a quota or rate limit (HTTP 429: the team's concurrent sandboxes or API
 * rate; 503: busy), waited on through the providers' shared backoff (../kit/quota.ts).
 */
import type * as E2B from 'e2b';

import { log } from '../../log';
import { withQuotaBackoff } from '../kit/quota';
import { ifFoundBy } from '../kit/not-found';

let loaded: typeof E2B | undefined;

export function sdk(): typeof E2B {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on first use (see above)
  loaded ??= require('e2b') as typeof E2B;
  return loaded;
}

/**
 * E2B's reply that a sandbox or a template's tag is not there: the SDK's SandboxNotFoundError, or a TemplateError
 * carrying the API's 404 (the SDK has no class of its own for it).
 */
export function isNotFound(err: unknown): boolean {
  const { SandboxNotFoundError, TemplateError } = sdk();
  return (
    err instanceof SandboxNotFoundError || (err instanceof TemplateError && /\b404\b|not found/i.test(err.message))
  );
}

/** The call's value, or undefined when E2B says what it reads or removes is not there. */
export const ifFound = ifFoundBy(isNotFound);

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

export type { Sandbox, CommandHandle, CommandResult } from 'e2b';
