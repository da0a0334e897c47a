/**
 * Job statistics, folded one trial at a time so the Job workflow carries only a few numbers per agent × dataset
 * (never the trials themselves) across continue-as-new. Pure code: the Job workflow imports it.
 */
import type { MetricType } from '../contracts/job-config';
import type { TrialErrorType, TrialSummary } from '../contracts/trial';
import { CANCELLED_ERROR, INFRASTRUCTURE_ERROR, isScored } from '../contracts/trial';
import type { TaskTally } from './statistics';
import type { TrialUsage } from '../contracts/trial';
import { addUsage, emptyUsage } from './usage';
import { PASS_VALUE, meanEstimate, passAtKByK } from './statistics';

export interface RewardAccumulator {
  n: number;
  sum: number;
  min: number;
  max: number;
}

/** One task's scored trials: those without any reward, and per reward key `[trials, sum, passes]`. */
export interface TaskStats {
  unrewarded: number;
  keys: Record<string, [number, number, number]>;
}

/** One agent × dataset. Scored trials are all but infrastructure and model API errors and cancellations. */
export interface GroupStats {
  agent: string;
  dataset: string;
  n_trials: number;
  n_scored: number;
  n_errors: number;
  rewards: Record<string, RewardAccumulator>;
  /** Scored trials with no reward at all (a task error before the verifier wrote one). */
  n_unrewarded?: number;
  /** Per task name: what the interval and pass@k need (a few numbers per task, never per trial). */
  tasks?: Record<string, TaskStats>;
  /** Model usage summed over the group's trials that used the gateway (every trial: tokens were spent). */
  usage?: TrialUsage;
}

/** What each reward key reports in the job result (docs/results.md). */
export interface RewardMetrics {
  /** Trials the key is summarised over. */
  n: number;
  mean: number;
  sum?: number;
  min?: number;
  max?: number;
  ci95: [number, number] | null;
  /** With several attempts per task: k → pass@k. */
  pass_at_k?: Record<string, number>;
}

export interface JobStats {
  n_total_trials: number;
  n_completed: number;
  n_errored: number;
  n_cancelled: number;
  n_infrastructure_errors: number;
  errors_by_type: Partial<Record<TrialErrorType, number>>;
  groups: Record<string, GroupStats>;
}

export function emptyStats(totalTrials: number): JobStats {
  return {
    n_total_trials: totalTrials,
    n_completed: 0,
    n_errored: 0,
    n_cancelled: 0,
    n_infrastructure_errors: 0,
    errors_by_type: {},
    groups: {},
  };
}

export function groupKey(agent: string, dataset: string): string {
  return `${agent}__${dataset}`;
}

/** Adds one finished trial. Mutates and returns `stats`. */
export function addTrial(stats: JobStats, trial: TrialSummary): JobStats {
  const key = groupKey(trial.agentName, trial.datasetName);
  const group = (stats.groups[key] ??= {
    agent: trial.agentName,
    dataset: trial.datasetName,
    n_trials: 0,
    n_scored: 0,
    n_errors: 0,
    rewards: {},
  });
  group.n_trials += 1;
  if (trial.usage) group.usage = addUsage(group.usage ?? emptyUsage(), trial.usage);
  const errorType = trial.error?.type;
  if (errorType) stats.errors_by_type[errorType] = (stats.errors_by_type[errorType] ?? 0) + 1;
  // As `--max-errors` counts: task and infrastructure errors; a cancellation is not the trial's error.
  if (errorType && errorType !== CANCELLED_ERROR) group.n_errors += 1;
  if (errorType === CANCELLED_ERROR) stats.n_cancelled += 1;
  else if (errorType === INFRASTRUCTURE_ERROR) stats.n_infrastructure_errors += 1;
  else if (errorType) stats.n_errored += 1;
  else stats.n_completed += 1;

  // Infrastructure and model API errors and cancellations say nothing about the agent: out of the metrics.
  if (!isScored(errorType)) return stats;
  group.n_scored += 1;
  // Groups carried over from a run of an older Rollout lack the per-task tallies: they start from here.
  const task = ((group.tasks ??= {})[trial.taskName] ??= { unrewarded: 0, keys: {} });
  const rewards = Object.entries(trial.rewards ?? {});
  if (rewards.length === 0) {
    group.n_unrewarded = (group.n_unrewarded ?? 0) + 1;
    task.unrewarded += 1;
  }
  for (const [name, value] of rewards) {
    const acc = (group.rewards[name] ??= { n: 0, sum: 0, min: value, max: value });
    acc.n += 1;
    acc.sum += value;
    acc.min = Math.min(acc.min, value);
    acc.max = Math.max(acc.max, value);
    const tally = (task.keys[name] ??= [0, 0, 0]);
    tally[0] += 1;
    tally[1] += value;
    if (value >= PASS_VALUE) tally[2] += 1;
  }
  return stats;
}

export function finishedCount(stats: JobStats): number {
  return stats.n_completed + stats.n_errored + stats.n_cancelled + stats.n_infrastructure_errors;
}

/** The key a group is judged by: "reward" when any trial reports it, else the first key reported. */
export function primaryKey(keys: readonly string[]): string {
  return keys.includes('reward') ? 'reward' : ([...keys].sort()[0] ?? 'reward');
}

/**
 * Metrics per reward key (docs/results.md): a key is summarised over the trials that report it; the primary key
 * also over scored trials with no reward at all, which count 0 (a scored error is a failure, not a gap). Each key
 * has its n, mean and 95% interval, the configured metrics and, with several attempts per task, pass@k.
 */
export function groupMetrics(group: GroupStats, metrics: readonly MetricType[]): Record<string, RewardMetrics> {
  const primary = primaryKey(Object.keys(group.rewards));
  const keys = Object.keys(group.rewards).sort();
  if (!keys.includes(primary) && group.n_scored > 0) keys.push(primary);
  const result: Record<string, RewardMetrics> = {};
  for (const key of keys) {
    const unrewarded = key === primary ? (group.n_unrewarded ?? 0) : 0;
    const acc = group.rewards[key];
    const tallies: TaskTally[] = Object.values(group.tasks ?? {}).map((task) => {
      const [n, sum, passes] = task.keys[key] ?? [0, 0, 0];
      const zeros = key === primary ? task.unrewarded : 0;
      return { n: n + zeros, sum, passes };
    });
    const n = (acc?.n ?? 0) + unrewarded;
    const sum = acc?.sum ?? 0;
    // The lowest and highest value counted: the trials without a reward count 0.
    const min = unrewarded > 0 ? Math.min(acc?.min ?? 0, 0) : (acc?.min ?? 0);
    const max = unrewarded > 0 ? Math.max(acc?.max ?? 0, 0) : (acc?.max ?? 0);
    const values: RewardMetrics = { n, mean: n > 0 ? sum / n : 0, ci95: meanEstimate(tallies, { min, max }).ci95 };
    for (const metric of metrics) {
      if (metric === 'sum') values.sum = sum;
      else if (metric === 'mean') continue;
      else if (metric === 'min') values.min = min;
      else values.max = max;
    }
    const passAtK = passAtKByK(tallies);
    if (passAtK) values.pass_at_k = passAtK;
    result[key] = values;
  }
  return result;
}

/** The primary reward of a trial: "reward" when present, else the first key. Used for the live running mean. */
export function primaryReward(rewards: Record<string, number> | null): number | null {
  if (!rewards) return null;
  if ('reward' in rewards) return rewards.reward ?? null;
  const first = Object.keys(rewards).sort()[0];
  return first === undefined ? null : (rewards[first] ?? null);
}
