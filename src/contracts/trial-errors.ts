/**
 * The kinds of error a trial can end with (a leaf: the job schema validates `retry` against them, the trial shapes
 * name them).
 */

/** Model API failures seen at the gateway, as the typed trial errors they become when the agent then fails. */
export const API_ERROR_TYPES = [
  'ApiRateLimitError',
  'AgentAuthenticationError',
  'ContextWindowExceededError',
  'ApiOverloadedError',
  'ApiUnreachableError',
] as const;
export type ApiErrorType = (typeof API_ERROR_TYPES)[number];

/**
 * The failures of the model's API itself (not of what the agent asked): a trial ending in one is not scored and is
 * retried like an infrastructure error. A context window overflow is the agent's doing and stays scored.
 */
export const UPSTREAM_ERROR_TYPES = [
  'ApiUnreachableError',
  'ApiOverloadedError',
  'ApiRateLimitError',
  'AgentAuthenticationError',
] as const satisfies readonly ApiErrorType[];

/**
 * Error types a trial can end with. Task-level ones are outcomes of the task or agent (retried only per job.yaml
 * `retry`, scored 0 when no reward), except the model API's own failures (UPSTREAM_ERROR_TYPES), which are not scored;
 * infrastructure ones are failures of Rollout's machinery after retries (excluded from metrics).
 */
export const TASK_ERROR_TYPES = [
  'EnvironmentBuildError',
  'EnvironmentStartError',
  'EnvironmentBrokenError',
  'AgentInstallError',
  'AgentInstallTimeoutError',
  'AgentTimeoutError',
  'SolutionNotFoundError',
  'MissingEnvironmentVariableError',
  'VerifierTimeoutError',
  'RewardFileNotFoundError',
  'RewardFileParseError',
  // A multi-step task's steps/<name>/workdir/setup.sh exited non-zero.
  'StepSetupError',
  // Model API failures seen at the gateway, when the agent then failed.
  ...API_ERROR_TYPES,
  // The trial reached its agent's job.yaml `limits`: its next model call was refused (verified and scored as usual).
  'AgentBudgetExceededError',
  // The job's `budget` was spent while the trial ran: its next model call was refused (not scored; runs on resume).
  'JobBudgetExhaustedError',
] as const;
export type TaskErrorType = (typeof TASK_ERROR_TYPES)[number];
export const JOB_BUDGET_ERROR = 'JobBudgetExhaustedError' satisfies TaskErrorType;
export const INFRASTRUCTURE_ERROR = 'InfrastructureError';
export const CANCELLED_ERROR = 'CancelledError';
export type TrialErrorType = TaskErrorType | typeof INFRASTRUCTURE_ERROR | typeof CANCELLED_ERROR;
