/**
 * When the gateway retries an upstream call itself: a 429, 503 or 529 (rate limited or overloaded) is retried after
 * the upstream's own `retry-after` (or `retry-after-ms`) when it gives one, else after an exponential, jittered
 * backoff; and only while the call's total wait stays within `max_wait`. A connection that could not be made is
 * tried a few times, quickly (a keep-alive socket the upstream just closed, a restart), then reported.
 */
import type { IncomingHttpHeaders } from 'node:http';

import { jitteredBackoffMs } from '../backoff';

export const RETRIED_STATUSES: ReadonlySet<number> = new Set([429, 503, 529]);
/** Attempts at a connection the upstream refused or that broke before any answer. */
export const CONNECT_ATTEMPTS = 3;
/** Default for `max_wait`: how long one call may wait at the gateway in all (ROLLOUT_GATEWAY_MAX_WAIT_SEC). */
export const DEFAULT_MAX_WAIT_MS = 5 * 60_000;

const BACKOFF_MIN_MS = 1_000;
const BACKOFF_MAX_MS = 60_000;
const CONNECT_BACKOFF_MIN_MS = 250;
/** Added on top of a retry-after so that callers told the same instant do not all return at it. */
const RETRY_AFTER_JITTER_MS = 1_000;

/** The wait an upstream asked for, in ms: `retry-after-ms`, else `retry-after` in seconds or as an HTTP date. */
export function retryAfterMs(headers: IncomingHttpHeaders, now = Date.now()): number | null {
  const ms = Number(headers['retry-after-ms']);
  if (headers['retry-after-ms'] !== undefined && Number.isFinite(ms) && ms >= 0) return ms;
  const value = headers['retry-after'];
  if (value === undefined || value === '') return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

/** The wait before retry number `retries + 1` of a rate-limited or overloaded call. */
export function statusRetryWaitMs(retries: number, retryAfter: number | null, random = Math.random): number {
  if (retryAfter === null) return jitteredBackoffMs(BACKOFF_MIN_MS, BACKOFF_MAX_MS, retries, random);
  return Math.round(retryAfter + random() * RETRY_AFTER_JITTER_MS);
}

/** The wait before connection attempt number `retries + 2`. */
export function connectRetryWaitMs(retries: number, random = Math.random): number {
  return jitteredBackoffMs(CONNECT_BACKOFF_MIN_MS, BACKOFF_MAX_MS, retries, random);
}

/** ROLLOUT_GATEWAY_MAX_WAIT_SEC, or the default. */
export function maxWaitMsFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.ROLLOUT_GATEWAY_MAX_WAIT_SEC;
  if (raw === undefined || raw === '') return DEFAULT_MAX_WAIT_MS;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds < 0)
    throw new Error(`ROLLOUT_GATEWAY_MAX_WAIT_SEC: expected a number of seconds ≥ 0, got "${raw}"`);
  return seconds * 1000;
}
