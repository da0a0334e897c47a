import type { TrialUsage } from '../contracts/trial';
import type {
  AgentInfo,
  BuiltImage,
  CleanupError,
  CollectReport,
  StepName,
  StepTiming,
  TaskStepResult,
  TrialError,
  TrialSpec,
  TrialSummary,
  Rewards,
} from '../contracts/trial';

/** `<job>/<trial>/result.json`. Documented in docs/results.md. */
export interface TrialResult {
  trial_name: string;
  task_name: string;
  dataset_name: string;
  agent_name: string;
  /** The agent that ran (catalogue name, installed version, model); null when the trial ended before its install. */
  agent: AgentInfo | null;
  attempt: number;
  rewards: Rewards | null;
  error: TrialError | null;
  agent_exit_code: number | null;
  started_at: string;
  finished_at: string;
  steps: Partial<Record<StepName, StepTiming>>;
  workflow_id: string;
  job_name: string;
  task_dir: string;
  environment_type: string;
  host: string | null;
  image: string | null;
  unenforced_limits: string[];
  /** How many times the trial was restarted from scratch after losing its host or an infrastructure failure. */
  restarts: number;
  /** What collect copied from /logs/agent and /logs/verifier, and what it cut at the job's collect limits. */
  collected: CollectReport | null;
  /** Collect, stop or cleanup steps that failed (absent in results of older versions). */
  cleanup_errors?: CleanupError[];
  /** How many times job.yaml `retry` ran the trial again after a task error it names. */
  retries?: number;
  /** Model calls, tokens and cost recorded by the gateway; null when the agent did not use it. */
  usage?: TrialUsage | null;
  /** A multi-step task's steps that ran, in order (absent for a single-step task); `rewards` is derived from them. */
  step_results?: TaskStepResult[];
}

export function summaryFromResult(spec: TrialSpec, result: TrialResult, builtImages: BuiltImage[]): TrialSummary {
  const last = builtImages.at(-1);
  return {
    trialId: spec.trialId,
    trialName: spec.trialName,
    taskName: spec.taskName,
    datasetName: spec.datasetName,
    agentName: spec.agentName,
    attempt: spec.attempt,
    rewards: result.rewards,
    error: result.error,
    hostQueue: last?.hostQueue ?? null,
    builtImage: last?.image ?? null,
    builtImages,
    envKey: spec.envKey,
  };
}
