import { setTimeout as sleep } from 'node:timers/promises';

import type { HealthcheckConfig } from '../contracts/task-config';
import type { EnvironmentHandle } from '../contracts/trial';
import type { Environment } from '../contracts/environment';
import { TaskEnvironmentError } from '../contracts/environment';

/**
 * task.toml `[environment.healthcheck]`, with Docker HEALTHCHECK's meaning as Harbor runs it: the command is run until
 * it exits 0; failures within the start period do not count (it is retried every start_interval_sec), after it
 * `retries` consecutive failures (interval_sec apart) fail the trial before the agent is installed.
 */
export async function runHealthcheck(
  environment: Environment,
  handle: EnvironmentHandle,
  check: HealthcheckConfig,
  signal?: AbortSignal
): Promise<{ attempts: number }> {
  const startPeriodEnd = Date.now() + check.start_period_sec * 1000;
  let failures = 0;
  for (let attempts = 1; ; attempts++) {
    const inStartPeriod = Date.now() < startPeriodEnd;
    const result = await environment.exec(handle, {
      command: check.command,
      timeoutMs: check.timeout_sec * 1000,
      signal,
    });
    if (result.exitCode === 0 && !result.timedOut) return { attempts };
    const last = result.timedOut
      ? `timed out after ${check.timeout_sec} s`
      : `exit ${result.exitCode}${outputOf(result.stdout + result.stderr)}`;
    if (!inStartPeriod && ++failures >= check.retries) {
      throw new TaskEnvironmentError(
        'EnvironmentStartError',
        `healthcheck failed ${check.retries} times in a row (last: ${last}): ${check.command}`
      );
    }
    await sleep((inStartPeriod ? check.start_interval_sec : check.interval_sec) * 1000, undefined, { signal });
  }
}

/** Longest time a healthcheck can take before it passes or fails: what the start step must allow for it. */
export function healthcheckBudgetSec(check: HealthcheckConfig | undefined): number {
  if (!check) return 0;
  const inStartPeriod = check.start_period_sec + check.start_interval_sec + check.timeout_sec;
  return inStartPeriod + check.retries * (check.timeout_sec + check.interval_sec);
}

function outputOf(text: string): string {
  const line = text.trim().split('\n').pop()?.slice(0, 200);
  return line ? `, ${line}` : '';
}
