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
  /** 95% confidence interval of the mean, or null when too few tasks make an honest one. */
  ci95: [number, number] | null;
}

/** A trial passes when its value reaches this: full marks on the usual 0–1 reward. */
export const PASS_VALUE = 1;

/** The normal quantile of a two-sided 95% interval. */
const Z_95 = 1.959963984540054;

/** Fewest tasks for an interval: the binomial one holds from two tasks on, the bootstrap needs more (docs). */
export const MIN_TASKS_BINARY = 2;
export const MIN_TASKS_BOOTSTRAP = 10;
export const BOOTSTRAP_RESAMPLES = 2000;
/** From this many tasks on, the bootstrap's normal limit replaces resampling (taskBootstrap). */
export const BOOTSTRAP_NORMAL_TASKS = 200;
/** The bootstrap's fixed seed: the same results give the same interval, in every run and every place it is shown. */
export const BOOTSTRAP_SEED = 20261125;

/** Shown under a table where an interval is `–`. */
export const TOO_FEW_TASKS_NOTE =
  `–: too few tasks for an honest interval (rewards of only 0 or 1 need ${MIN_TASKS_BINARY} tasks, ` +
  `other rewards ${MIN_TASKS_BOOTSTRAP})`;

/** Whether any of these estimates has trials but no interval: tables then print TOO_FEW_TASKS_NOTE once. */
export function lacksInterval(estimates: readonly Pick<MeanEstimate, 'n' | 'ci95'>[]): boolean {
  return estimates.some((estimate) => estimate.n > 0 && !estimate.ci95);
}

/**
 * Mean over all trials and its 95% interval, never outside what the reward can be. `range` is the lowest and
 * highest value counted. Rewards of only 0 or 1: a Wilson interval on the effective number of trials (the design
 * effect of attempts that share a task); other rewards: a percentile bootstrap that resamples tasks.
 */
export function meanEstimate(tasks: readonly TaskTally[], range: { min: number; max: number }): MeanEstimate {
  const counted = tasks.filter((task) => task.n > 0);
  const n = counted.reduce((total, task) => total + task.n, 0);
  if (n === 0) return { n: 0, mean: 0, ci95: null };
  const mean = counted.reduce((total, task) => total + task.sum, 0) / n;
  const binary = range.min >= 0 && range.max <= 1 && counted.every((task) => task.sum === task.passes);
  return { n, mean, ci95: binary ? clusteredWilson(counted, n, mean) : taskBootstrap(counted, range) };
}

/** The Wilson score interval of a proportion `p` observed over `n` (possibly fractional, effective) trials. */
export function wilson(p: number, n: number): [number, number] {
  const z2n = (Z_95 * Z_95) / n;
  const centre = (p + z2n / 2) / (1 + z2n);
  const half = (Z_95 / (1 + z2n)) * Math.sqrt((p * (1 - p)) / n + z2n / (4 * n));
  // Inside [0, 1] by construction; the bounds only absorb rounding.
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

/**
 * Wilson on the effective sample size of Korn & Graubard (1998): N / design effect, the design effect being the
 * clustered variance of the mean over the binomial one (1 with one attempt per task, up to the attempts per task
 * when a task's attempts always agree), scaled by (t(N−1) / t(C−1))² for the C − 1 degrees of freedom C tasks give.
 */
function clusteredWilson(tasks: readonly TaskTally[], n: number, p: number): [number, number] | null {
  if (tasks.length < MIN_TASKS_BINARY) return null;
  // All passed or all failed: the data cannot show how much attempts of a task agree, so assume they always do.
  const designEffect =
    p > 0 && p < 1
      ? Math.max(1, tasks.reduce((total, task) => total + (task.sum - task.n * p) ** 2, 0) / (n * p * (1 - p)))
      : n / tasks.length;
  const t = (df: number) => jStat.studentt.inv(0.975, df);
  return wilson(p, (n / designEffect) * (t(n - 1) / t(tasks.length - 1)) ** 2);
}

/**
 * The task bootstrap: the 2.5th and 97.5th percentiles of the mean over BOOTSTRAP_RESAMPLES resamples of whole
 * tasks (with replacement), seeded with BOOTSTRAP_SEED. Each resampled mean averages observed values, so the
 * interval never leaves their range (but for rounding, which clip() absorbs). Tasks are taken in a canonical order (by n, then sum): the interval depends
 * only on the tallies. From BOOTSTRAP_NORMAL_TASKS tasks on, the bootstrap's large-sample limit instead (the same
 * interval up to its Monte Carlo noise, at a bounded cost: the Job workflow computes this on every write).
 */
export function taskBootstrap(
  tasks: readonly Pick<TaskTally, 'n' | 'sum'>[],
  range: { min: number; max: number }
): [number, number] | null {
  const count = tasks.length;
  if (count < MIN_TASKS_BOOTSTRAP) return null;
  if (count >= BOOTSTRAP_NORMAL_TASKS) return bootstrapLimit(tasks, range);
  const sorted = [...tasks].sort((a, b) => a.n - b.n || a.sum - b.sum);
  const ns = Float64Array.from(sorted, (task) => task.n);
  const sums = Float64Array.from(sorted, (task) => task.sum);
  const random = mulberry32(BOOTSTRAP_SEED);
  const means = new Float64Array(BOOTSTRAP_RESAMPLES);
  for (let b = 0; b < BOOTSTRAP_RESAMPLES; b++) {
    let n = 0;
    let sum = 0;
    for (let i = 0; i < count; i++) {
      const pick = Math.floor(random() * count);
      n += ns[pick]!;
      sum += sums[pick]!;
    }
    means[b] = sum / n;
  }
  means.sort();
  const tail = Math.round(BOOTSTRAP_RESAMPLES * 0.025);
  return clip(means[tail]!, means[BOOTSTRAP_RESAMPLES - 1 - tail]!, range);
}

/** mean ± z·SE with the bootstrap's own standard error √(Σ (S_i − n_i·m)²) / N, clipped to the observed range. */
function bootstrapLimit(
  tasks: readonly Pick<TaskTally, 'n' | 'sum'>[],
  range: { min: number; max: number }
): [number, number] {
  const n = tasks.reduce((total, task) => total + task.n, 0);
  const mean = tasks.reduce((total, task) => total + task.sum, 0) / n;
  const squares = tasks.reduce((total, task) => total + (task.sum - task.n * mean) ** 2, 0);
  const half = (Z_95 * Math.sqrt(squares)) / n;
  return clip(mean - half, mean + half, range);
}

/** The interval within the observed range: the limit can pass it; resampled means only by rounding. */
function clip(low: number, high: number, range: { min: number; max: number }): [number, number] {
  return [Math.max(range.min, low), Math.min(range.max, high)];
}

/**
 * Two agents compared task by task: the mean of the per-task differences (one per task both ran) and its interval,
 * the same task bootstrap (the differences are bounded too, and rarely 0/1 alone).
 */
export function pairedEstimate(differences: readonly number[]): MeanEstimate {
  const n = differences.length;
  if (n === 0) return { n, mean: 0, ci95: null };
  const mean = differences.reduce((total, d) => total + d, 0) / n;
  const range = {
    min: differences.reduce((low, d) => Math.min(low, d), Infinity),
    max: differences.reduce((high, d) => Math.max(high, d), -Infinity),
  };
  return {
    n,
    mean,
    ci95: taskBootstrap(
      differences.map((sum) => ({ n: 1, sum })),
      range
    ),
  };
}

/** mulberry32: a small, fast 32-bit generator; any seeded uniform generator would do. */
function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
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
