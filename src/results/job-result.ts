import type { JobStats, RewardMetrics } from './job-stats';
import { finishedCount, groupMetrics } from './job-stats';
import type { MetricType } from '../contracts/job-config';
import type { JobBudgetResult } from '../budget/workflow/spend';
import type { TrialUsage } from '../contracts/trial';
import { addUsage, emptyUsage } from './usage';

/** `<job>/result.json`, rewritten as trials finish. Documented in docs/results.md. Pure: the Job workflow builds it. */
export interface JobResult {
  job_name: string;
  workflow_id: string;
  /** budget_exhausted: job.yaml `budget` was spent; trials not started then run on `rollout resume` (raise it). */
  status: 'running' | 'completed' | 'cancelled' | 'budget_exhausted';
  started_at: string;
  updated_at: string;
  finished_at: string | null;
  n_total_trials: number;
  n_finished_trials: number;
  n_running_trials: number;
  n_completed_trials: number;
  n_errored_trials: number;
  n_cancelled_trials: number;
  /** Trials that ended in an infrastructure error after retries: excluded from metrics, listed apart. */
  n_infrastructure_errors: number;
  errors_by_type: Record<string, number>;
  /** Keyed "<agent>__<dataset>". */
  evals: Record<
    string,
    {
      agent: string;
      dataset: string;
      n_trials: number;
      n_scored_trials: number;
      n_errors: number;
      /** per reward key, e.g. { "reward": { "n": 4, "mean": 0.5, "ci95": [0.1, 0.9], "pass_at_k": {"1": 0.5, "2": 0.8} } } */
      metrics: Record<string, RewardMetrics>;
      /** Model usage and cost summed over the group's trials on the gateway; null when none used it. */
      usage: TrialUsage | null;
    }
  >;
  /** Model usage and cost per agent, over all datasets (only agents on the gateway). */
  usage_by_agent: Record<string, TrialUsage>;
  /** With job.yaml `budget`: the budget, and what the job spent on all workers (all its runs), from its ledger. */
  budget?: JobBudgetResult;
  /** Live control (`rollout ctl`) as of this write; absent in results written before it existed. */
  control?: { paused: boolean; n_concurrent_trials: number };
}

export function buildJobResult(input: {
  jobName: string;
  workflowId: string;
  status: JobResult['status'];
  startedAt: string;
  now: string;
  running: number;
  stats: JobStats;
  metrics: readonly MetricType[];
  control?: { paused: boolean; concurrency: number };
}): JobResult {
  const { stats } = input;
  return {
    job_name: input.jobName,
    workflow_id: input.workflowId,
    status: input.status,
    started_at: input.startedAt,
    updated_at: input.now,
    finished_at: input.status === 'running' ? null : input.now,
    n_total_trials: stats.n_total_trials,
    n_finished_trials: finishedCount(stats),
    n_running_trials: input.running,
    n_completed_trials: stats.n_completed,
    n_errored_trials: stats.n_errored,
    n_cancelled_trials: stats.n_cancelled,
    n_infrastructure_errors: stats.n_infrastructure_errors,
    errors_by_type: { ...stats.errors_by_type },
    evals: Object.fromEntries(
      Object.entries(stats.groups).map(([key, group]) => [
        key,
        {
          agent: group.agent,
          dataset: group.dataset,
          n_trials: group.n_trials,
          n_scored_trials: group.n_scored,
          n_errors: group.n_errors,
          metrics: groupMetrics(group, input.metrics),
          usage: group.usage ?? null,
        },
      ])
    ),
    usage_by_agent: usageByAgent(stats),
    ...(input.control
      ? { control: { paused: input.control.paused, n_concurrent_trials: input.control.concurrency } }
      : {}),
  };
}

function usageByAgent(stats: JobStats): Record<string, TrialUsage> {
  const out: Record<string, TrialUsage> = {};
  for (const group of Object.values(stats.groups)) {
    if (group.usage) out[group.agent] = addUsage(out[group.agent] ?? emptyUsage(), group.usage);
  }
  return out;
}
