/**
 * The small, serialisable shapes that travel through Temporal: workflow inputs, activity inputs and outputs, and the
 * trial summary a Trial workflow returns. Pure types and constants only: workflows import this file.
 */
import { UPSTREAM_ERROR_TYPES } from './trial-errors';
import type { RateLimitRule } from './job-config';
import type { RegistryTaskSource } from './registry';
import type { TrialErrorType } from './trial-errors';
import { CANCELLED_ERROR, INFRASTRUCTURE_ERROR, JOB_BUDGET_ERROR } from './trial-errors';

/** A multi-step task's `min_reward`: one number for the primary reward, or a minimum per reward key. */
export type MinReward = number | Record<string, number>;
/** How a multi-step task's rewards come from its steps'. */
export type MultiStepRewardStrategy = 'mean' | 'final';

export const STEPS = ['build', 'start', 'install', 'execute', 'verify', 'collect', 'stop', 'cleanup'] as const;
export type StepName = (typeof STEPS)[number];

/** Per-step time limits in seconds, already scaled by timeout_multiplier and job overrides. */
export type StepTimeouts = Record<StepName, number>;

export interface TrialResources {
  cpus: number;
  memoryBytes: number;
  storageBytes: number;
  /** Most processes (and threads) the environment may hold at once: a fork bomb stops there. */
  pidsLimit: number;
}

/** How much of the environment's /logs a trial may bring back to the host. */
export interface CollectLimits {
  maxBytes: number;
  /** Files and folders. */
  maxFiles: number;
}

/** What collect brought back, and what it left behind because a limit was reached. */
export interface CollectReport {
  files: number;
  bytes: number;
  /** The limit that stopped collection, if any. */
  limit_reached: 'bytes' | 'files' | null;
  /** Paths (relative to the trial folder) not collected: the first entry over the limit, and any after it seen. */
  cut: string[];
}

/** One planned trial: the Trial workflow's input. File contents and secrets never go here. */
export interface TrialSpec {
  jobName: string;
  jobDir: string;
  jobWorkflowId: string;
  trialId: string;
  trialName: string;
  taskName: string;
  /** The task's folder on the host that planned the job (for a registry task, in that host's cache). */
  taskDir: string;
  /** A registry task's coordinates: a worker whose cache lacks it fetches it itself (src/task/locate.ts). */
  taskSource?: RegistryTaskSource;
  /** A local task of a job in an object store: packed there by the CLI, fetched by digest (src/task/archives.ts). */
  taskArchive?: { store: string; digest: string };
  datasetName: string;
  agentName: string;
  attempt: number;
  /** The provider's `type` (src/environments/registry.ts, or one loaded with `import`). */
  environmentType: string;
  /** Content hash of environment/ (+ docker_image): trials sharing it share an image. */
  envKey: string;
  timeouts: StepTimeouts;
  resources: TrialResources;
  collectLimits: CollectLimits;
  forceBuild: boolean;
  verify: boolean;
  /** How long a step may wait for its host's worker before the trial restarts on another host. */
  hostLostTimeoutSec: number;
  /** job.yaml `environment.task_env_allow`: the worker variables a task's `${VAR}`s may read (absent: none). */
  taskEnvAllow?: string[];
  /** Agent env given for this trial alone, not secret (a remote rollout's model and base URL). */
  agentEnv?: Record<string, string>;
  /** Agent env given for this trial alone and secret, sealed (src/secrets/sealed-env.ts): only ciphertext here. */
  sealedAgentEnv?: string;
  /** job.yaml `rate_limits` (absent when none). */
  rateLimits?: RateLimitRule[];
  /** The job has a job.yaml `budget`: the gateway checks each call against its ledger and reports the spend. */
  budgeted?: boolean;
  /**
   * Model calls are stamped with the job's policy version (job.yaml `policy_version`, or an agent with `tokens`): its
   * value when planned (null: none yet); the gateway reads the current one from the Job workflow (docs/rl.md).
   */
  policyVersion?: number | null;
  /** `policyVersion` is the trial's own (a `rollout serve` rollout's /init `metadata.policy_version`): not read live. */
  policyVersionFixed?: boolean;
  /** job.yaml `retry`: task errors that run the trial again (absent in specs planned before it existed). */
  retry?: RetryPolicy | null;
  /**
   * Set when the agent installs nothing (the oracle, terminus, a custom agent without install): the trial skips the
   * install step, a round trip for nothing, and its result names this agent.
   */
  agentWithoutInstall?: AgentInfo;
  /**
   * The provider's own job.yaml `environment:` keys, as its settings schema parsed them: opaque here, read only by the
   * provider (src/contracts/provider.ts). Absent in specs planned before providers had settings of their own.
   */
  environmentSettings?: Record<string, unknown>;
  /**
   * Sandboxes of this provider the deployment creates a second at most (job.yaml `environment.creates_per_second`, else
   * the vendor's documented limit: src/environments/creation-rates.ts); absent: creations are not paced.
   */
  createsPerSecond?: number;
  /** A multi-step task's steps (task.toml `[[steps]]`), run in order in one environment; absent for a single step. */
  multiStep?: MultiStepSpec;
}

export interface MultiStepSpec {
  strategy: MultiStepRewardStrategy;
  steps: TaskStepSpec[];
}

/** One `[[steps]]` entry as the Trial workflow runs it: its limits (seconds) are already scaled. */
export interface TaskStepSpec {
  name: string;
  minReward: MinReward | null;
  /** `prepare`: its workdir/setup.sh and healthcheck, which run in its execute step before the agent. */
  timeouts: { prepare: number; execute: number; verify: number };
}

/** One step of a multi-step trial, in result.json's `step_results` (Harbor's name). */
export interface TaskStepResult {
  name: string;
  rewards: Rewards | null;
  /** What ended the step early (setup.sh failed, agent timed out, no reward file, …). */
  error: TrialError | null;
  agent_exit_code: number | null;
  execute: StepTiming | null;
  verify: StepTiming | null;
  /** Set when the step's rewards fell short of its `min_reward`, so the steps after it did not run. */
  below_min_reward?: string;
}

export interface RetryPolicy {
  errorTypes: string[];
  maxRetries: number;
  minWaitSec: number;
  maxWaitSec: number;
}

// The error kinds live in ./errors (a leaf the job schema reads too); re-exported for the shapes that name them.
export { CANCELLED_ERROR, INFRASTRUCTURE_ERROR, TASK_ERROR_TYPES } from './trial-errors';
export type { TaskErrorType, TrialErrorType } from './trial-errors';

export interface TrialError {
  type: TrialErrorType;
  message: string;
  step: StepName | 'trial';
}

export type Rewards = Record<string, number>;

export interface StepTiming {
  started_at: string;
  finished_at: string | null;
}

export type TrialStatus = 'pending' | 'running' | 'completed' | 'errored' | 'cancelled';

/** What a Trial workflow returns and signals to its Job: enough for metrics, status and image clean-up. */
export interface TrialSummary {
  trialId: string;
  trialName: string;
  taskName: string;
  datasetName: string;
  agentName: string;
  attempt: number;
  rewards: Rewards | null;
  error: TrialError | null;
  /** Host task queue whose Docker holds the image, and the image if Rollout built it (null: pre-built or none). */
  hostQueue: string | null;
  builtImage: string | null;
  /** Every image the trial built, on each host it ran on (a restarted trial may have built on several). */
  builtImages?: BuiltImage[];
  envKey: string;
  /** Model usage recorded by the gateway; absent when the agent did not use it (or before Rollout recorded it). */
  usage?: TrialUsage | null;
}

export interface BuiltImage {
  hostQueue: string;
  image: string;
}

/** A collect, stop or cleanup step that failed: logs may be missing, or an environment left behind. */
export interface CleanupError extends TrialError {
  host: string | null;
}

/** A handle to a started environment: all later steps address it by this. */
export interface EnvironmentHandle {
  id: string;
  workdir: string;
}

/** The agent a trial ran: its catalogue name (or its own for custom agents), the version installed, the model. */
export interface AgentInfo {
  name: string;
  version: string | null;
  model: string | null;
}

export interface ExecuteOutcome {
  exitCode: number | null;
  timedOut: boolean;
  /** The trial reached its agent's job.yaml `limits` and a model call was refused: which limit. */
  limitReached?: string;
}

/**
 * Whether a trial's end says anything about the agent: infrastructure errors, cancellations and failures of the
 * model's API (unreachable, overloaded, rate-limited after all waiting, a rejected key) stay out of the metrics.
 */
export function isScored(errorType: string | null | undefined): boolean {
  if (!errorType) return true;
  if (errorType === INFRASTRUCTURE_ERROR || errorType === CANCELLED_ERROR || errorType === JOB_BUDGET_ERROR)
    return false;
  return !(UPSTREAM_ERROR_TYPES as readonly string[]).includes(errorType);
}

export function trialStatus(summary: Pick<TrialSummary, 'error'>): TrialStatus {
  if (!summary.error) return 'completed';
  return summary.error.type === CANCELLED_ERROR ? 'cancelled' : 'errored';
}

/**
 * What one model call used, normalised from any vendor's reply: `input_tokens` includes cached ones (`cached_tokens`
 * is a subset), as ATIF counts them.
 */
export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
}

/** What a trial's model calls used and cost, from the gateway's records. */
export interface TrialUsage {
  n_llm_calls: number;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  cost_usd: number | null;
  /** Why cost_usd is null. */
  cost_unknown_reason?: string;
  /** Calls the gateway sent upstream more than once (a 429, 503, 529 or a connection error retried); absent before. */
  n_retried_calls?: number;
  /** Milliseconds calls waited at the gateway: shared rate limits, a concurrency slot, retry backoff; absent before. */
  waited_ms?: number;
}

/** A trial as the plan file stores it: its spec, and whether it is the last trial of its environment. */
export interface PlannedTrial {
  spec: TrialSpec;
  envLast: boolean;
}
