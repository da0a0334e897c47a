/** What one pass of a trial's lifecycle produced, and how a failure is told apart (pure). */
import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';

import type { TrialResult } from '../../src/results/trial-result';
import type {
  AgentInfo,
  CollectReport,
  ExecuteOutcome,
  Rewards,
  StepName,
  TaskStepResult,
  TrialError,
} from '../../src/contracts/trial';
import { INFRASTRUCTURE_ERROR, TASK_ERROR_TYPES } from '../../src/contracts/trial';

export interface Outcome {
  rewards: Rewards | null;
  error: TrialError | null;
  agentExitCode: number | null;
  agent: AgentInfo | null;
  image: string | null;
  unenforced: string[];
  collected: CollectReport | null;
  /** Set when this run hit an infrastructure failure and the trial should start over. */
  restart: TrialError | null;
  /** A multi-step task's steps that ran, and the last of them (whose logs collect files under its name). */
  stepResults?: TaskStepResult[];
  taskStep?: string;
}

export function emptyOutcome(): Outcome {
  return {
    rewards: null,
    error: null,
    agentExitCode: null,
    agent: null,
    image: null,
    unenforced: [],
    collected: null,
    restart: null,
  };
}

/** Task outcomes are non-retryable application failures of a known type; everything else is infrastructure. */
export function classify(err: unknown, step: StepName | 'trial'): TrialError {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (
    cause instanceof ApplicationFailure &&
    cause.type &&
    (TASK_ERROR_TYPES as readonly string[]).includes(cause.type)
  ) {
    return { type: cause.type as TrialError['type'], message: cause.message, step };
  }
  const message = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return { type: INFRASTRUCTURE_ERROR, message, step };
}

/**
 * The task outcome of an agent run that the verifier still grades: a refused call at the agent's `limits` (the likely
 * reason it then stopped or ran out of time), else its timeout.
 */
export function executeError(execution: ExecuteOutcome, timeoutSec: number): TrialError | null {
  if (execution.limitReached) {
    const message = `the trial reached its limit (${execution.limitReached}): further model calls were refused`;
    return { type: 'AgentBudgetExceededError', message, step: 'execute' };
  }
  if (execution.timedOut)
    return { type: 'AgentTimeoutError', message: `agent exceeded ${timeoutSec} s`, step: 'execute' };
  return null;
}

export function describe(result: TrialResult): string {
  const rewards = result.rewards ? JSON.stringify(result.rewards) : 'none';
  const error = result.error ? `\n\n**${result.error.type}** (${result.error.step}): ${result.error.message}` : '';
  return `**${result.trial_name}**: rewards ${rewards}${error}`;
}
