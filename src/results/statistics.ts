/**
 * The statistics Rollout reports per reward key, as pure functions over small tallies (the Job workflow imports
 * them). Formulas and their reasons are in docs/results.md.
 */
import { jStat } from 'jstat';

/** The trials of one task for one reward key: how many, the sum of their values, how many passed (value ≥ 1). */
export interface TaskTally {
  n: number;
  sum: number;
  passes: number;
}

export interface MeanEstimate {
  n: number;
  mean: number;
  /** 95% confidence interval of the mean, or null when fewer than two tasks make one. */
  ci95: [number, number] | null;
}

/** A trial passes when its value reaches this: full marks on the usual 0–1 reward. */
export const PASS_VALUE = 1;

/**
 * Mean over all trials, with a 95% t-interval whose standard error is clustered by task (trials of one task are
 * not independent draws: their attempts share the task's difficulty). With one trial per task this is the usual
 * t-interval s/√n.
 */
export function meanEstimate(tasks: readonly TaskTally[]): MeanEstimate {
  const counted = tasks.filter((task) => task.n > 0);
  const n = counted.reduce((total, task) => total + task.n, 0);
  if (n === 0) return { n: 0, mean: 0, ci95: null };
  const mean = counted.reduce((total, task) => total + task.sum, 0) / n;
  const clusters = counted.length;
  if (clusters < 2) return { n, mean, ci95: null };
  const squares = counted.reduce((total, task) => total + (task.sum - task.n * mean) ** 2, 0);
  const standardError = Math.sqrt((clusters / (clusters - 1)) * squares) / n;
  const half = jStat.studentt.inv(0.975, clusters - 1) * standardError;
  return { n, mean, ci95: [mean - half, mean + half] };
}

/** Chen et al. (2021): the unbiased estimate of P(at least one of k samples passes) from n samples, c passing. */
export function passAtK(n: number, c: number, k: number): number {
  if (n - c < k) return 1;
  // 1 − C(n−c, k) / C(n, k), as a product so large n never overflows.
  let allFail = 1;
  for (let i = n - c + 1; i <= n; i++) allFail *= 1 - k / i;
  return 1 - allFail;
}

/**
 * pass@k for k = 1 … the most trials any task has, each the mean over the tasks with at least k trials; undefined
 * when no task has more than one (one attempt: pass@1 is just the pass rate).
 */
export function passAtKByK(tasks: readonly TaskTally[]): Record<string, number> | undefined {
  const maxK = Math.max(0, ...tasks.map((task) => task.n));
  if (maxK < 2) return undefined;
  const result: Record<string, number> = {};
  for (let k = 1; k <= maxK; k++) {
    const eligible = tasks.filter((task) => task.n >= k);
    result[String(k)] = eligible.reduce((total, task) => total + passAtK(task.n, task.passes, k), 0) / eligible.length;
  }
  return result;
}
