import type { ApiErrorType } from '../contracts/trial-errors';

/** How a call ended when no full HTTP answer came back. */
export type BrokenCall = 'unreachable' | 'stream-cut' | 'client-closed';

const CONTEXT_WINDOW =
  /context.?length|context.?window|too long|too many tokens|maximum context|exceeds? the (model'?s )?(maximum|context)|input token count/i;

/** The error type of a failed model call from its HTTP status and body, if any. */
export function classifyStatus(status: number, body: string): ApiErrorType | null {
  if (status === 429) return 'ApiRateLimitError';
  if (status === 401 || status === 403) return 'AgentAuthenticationError';
  if ((status === 400 || status === 413 || status === 422) && CONTEXT_WINDOW.test(body))
    return 'ContextWindowExceededError';
  if (status >= 500) return 'ApiOverloadedError';
  return null;
}

/**
 * The error type of a call that broke: no connection to the upstream (refused, DNS, TLS) is ApiUnreachableError;
 * an answer cut mid-way is ApiOverloadedError; the agent hanging up is nobody's API failure.
 */
export function classifyBroken(broken: BrokenCall): ApiErrorType | null {
  if (broken === 'unreachable') return 'ApiUnreachableError';
  if (broken === 'stream-cut') return 'ApiOverloadedError';
  return null;
}
