/**
 * Job statistics, folded one trial at a time so the Job workflow carries only a few numbers per agent × dataset
 * (never the trials themselves) across continue-as-new. Pure code: the Job workflow imports it.
 */
import type { MetricType } from '../job/schema';
import type { TrialErrorType, TrialSummary } from '../trial/types';
import { CANCELLED_ERROR, INFRASTRUCTURE_ERROR } from '../trial/types';

export interface RewardAccumulator {
  n: number;
  sum: number;
  min: number;
  max: number;
}

/** One agent × dataset. Scored trials are all but infrastructure errors and cancellations. */
export interface GroupStats {
  agent: string;
  dataset: string;
  n_trials: number;
  n_scored: number;
  n_errors: number;
  rewards: Record<string, RewardAccumulator>;
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
  const errorType = trial.error?.type;
  if (errorType) {
    stats.errors_by_type[errorType] = (stats.errors_by_type[errorType] ?? 0) + 1;
    group.n_errors += 1;
  }
  if (errorType === CANCELLED_ERROR) stats.n_cancelled += 1;
  else if (errorType === INFRASTRUCTURE_ERROR) stats.n_infrastructure_errors += 1;
  else if (errorType) stats.n_errored += 1;
  else stats.n_completed += 1;

  // Infrastructure errors and cancellations say nothing about the agent: they stay out of the metrics.
  if (errorType === CANCELLED_ERROR || errorType === INFRASTRUCTURE_ERROR) return stats;
  group.n_scored += 1;
  for (const [name, value] of Object.entries(trial.rewards ?? {})) {
    const acc = (group.rewards[name] ??= { n: 0, sum: 0, min: value, max: value });
    acc.n += 1;
    acc.sum += value;
    acc.min = Math.min(acc.min, value);
    acc.max = Math.max(acc.max, value);
  }
  return stats;
}

export function finishedCount(stats: JobStats): number {
  return stats.n_completed + stats.n_errored + stats.n_cancelled + stats.n_infrastructure_errors;
}

/**
 * Metric values per reward key. A scored trial without a value for a key (no reward file, or a reward.json without
 * that key) counts as 0, as Harbor does; a group with no reward at all reports the key "reward".
 */
export function groupMetrics(
  group: GroupStats,
  metrics: readonly MetricType[]
): Record<string, Record<string, number>> {
  const keys = Object.keys(group.rewards).sort();
  if (keys.length === 0 && group.n_scored > 0) keys.push('reward');
  const result: Record<string, Record<string, number>> = {};
  for (const key of keys) {
    const acc = group.rewards[key] ?? { n: 0, sum: 0, min: 0, max: 0 };
    const missing = group.n_scored - acc.n;
    const values: Record<string, number> = {};
    for (const metric of metrics) {
      if (metric === 'sum') values.sum = acc.sum;
      else if (metric === 'mean') values.mean = group.n_scored > 0 ? acc.sum / group.n_scored : 0;
      else if (metric === 'min') values.min = missing > 0 ? Math.min(acc.n > 0 ? acc.min : 0, 0) : acc.min;
      else values.max = missing > 0 ? Math.max(acc.n > 0 ? acc.max : 0, 0) : acc.max;
    }
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
