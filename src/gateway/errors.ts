/** Model API failures seen at the gateway, as the typed trial errors they become when the agent then fails. */
export const API_ERROR_TYPES = [
  'ApiRateLimitError',
  'AgentAuthenticationError',
  'ContextWindowExceededError',
  'ApiOverloadedError',
] as const;
export type ApiErrorType = (typeof API_ERROR_TYPES)[number];

const CONTEXT_WINDOW =
  /context.?length|context.?window|too long|too many tokens|maximum context|exceeds? the (model'?s )?(maximum|context)|input token count/i;

/** The error type of a failed model call (an HTTP status, or 0 when the connection or stream broke), if any. */
export function classifyFailure(status: number, body: string): ApiErrorType | null {
  if (status === 429) return 'ApiRateLimitError';
  if (status === 401 || status === 403) return 'AgentAuthenticationError';
  if ((status === 400 || status === 413 || status === 422) && CONTEXT_WINDOW.test(body))
    return 'ContextWindowExceededError';
  if (status === 0 || status >= 500) return 'ApiOverloadedError';
  return null;
}
