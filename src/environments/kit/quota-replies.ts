/**
 * Who hears of a vendor's quota and rate-limit replies: the sandbox creation gate (src/environments/sandbox-creation.ts)
 * runs a create inside `observingQuotaReplies`, and withQuotaBackoff (quota.ts), which every cloud provider's
 * calls go through, reports each such reply to it and waits for it before trying again, so that retries keep the
 * deployment's pace too. The providers need not know of the gate.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export interface QuotaReplyObserver {
  /** A vendor answered a call with a quota or rate-limit reply. */
  replied(): void;
  /** The call is about to be sent again: resolves when it may be. */
  retrying(signal: AbortSignal | undefined): Promise<void>;
}

const observers = new AsyncLocalStorage<QuotaReplyObserver>();

/** Runs `work` with `observer` told of the quota and rate-limit replies to the calls made within it. */
export function observingQuotaReplies<T>(observer: QuotaReplyObserver, work: () => Promise<T>): Promise<T> {
  return observers.run(observer, work);
}

export function quotaReplied(): void {
  observers.getStore()?.replied();
}

export async function quotaRetrying(signal: AbortSignal | undefined): Promise<void> {
  await observers.getStore()?.retrying(signal);
}
