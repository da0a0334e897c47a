/**
 * Rollout's own messages (CLI and workers) on stderr, at the job's `log_level` (or `rollout worker --log-level`).
 * Results (the report, `results:` lines) are not log messages and always print.
 */

import type { LogLevel } from './contracts/job-config';

const SEVERITY: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, warning: 30, error: 40 };
let threshold: number = SEVERITY.info;

export function setLogLevel(level: LogLevel): void {
  threshold = SEVERITY[level];
}

export function logEnabled(level: LogLevel): boolean {
  return SEVERITY[level] >= threshold;
}

export const log = {
  debug: (message: string) => write('debug', message),
  info: (message: string) => write('info', message),
  warn: (message: string) => write('warn', `warning: ${message}`),
  error: (message: string) => write('error', `error: ${message}`),
};

function write(level: LogLevel, line: string): void {
  if (logEnabled(level)) console.error(line);
}

/**
 * The one idiom for a best-effort call (a clean-up whose failure must not fail the caller): its value, or undefined
 * with one line saying what failed, so nothing is swallowed silently.
 */
export async function bestEffort<T>(what: string, call: Promise<T>, level: LogLevel = 'warn'): Promise<T | undefined> {
  try {
    return await call;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    log[level === 'warning' ? 'warn' : level](`${what} failed (best effort, carrying on): ${message.split('\n')[0]}`);
    return undefined;
  }
}
