/** Statistics per reward key: pass@k, the Wilson and bootstrap intervals, partial keys; checked against hand computations. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { jStat } from 'jstat';

import { renderEvals } from '../../src/cli/report';
import { addTrial, emptyStats, groupMetrics } from '../../src/results/job-stats';
import {
  MIN_TASKS_BOOTSTRAP,
  TOO_FEW_TASKS_NOTE,
  meanEstimate,
  pairedEstimate,
  passAtK,
  passAtKByK,
  wilson,
} from '../../src/results/statistics';
import type { Rewards, TrialSummary } from '../../src/contracts/trial';

function choose(n: number, k: number): number {
  let result = 1;
  for (let i = 1; i <= k; i++) result = (result * (n - k + i)) / i;
  return result;
}

let serial = 0;
function trial(task: string, rewards: Rewards | null, error: string | null = null): TrialSummary {
  serial += 1;
  return {
    trialId: `t${serial}`,
    trialName: `t${serial}`,
    taskName: task,
    datasetName: 'd',
    agentName: 'a',
    attempt: 1,
    rewards,
    error: error ? { type: error as 'AgentTimeoutError', message: '', step: 'execute' } : null,
    hostQueue: null,
    builtImage: null,
    envKey: 'k',
  };
}

/** Equal up to 1e-6: jstat's t quantile is an iterative approximation good to about 1e-8. */
function close(actual: number | undefined, expected: number, message?: string): void {
  assert.ok(actual !== undefined && Math.abs(actual - expected) < 1e-6, `${message ?? ''} ${actual} ≠ ${expected}`);
}

describe('pass@k', () => {
  it('equals 1 − C(n−c, k)/C(n, k) (Chen et al. 2021) for every n ≤ 10, c ≤ n, k ≤ n', () => {
    for (let n = 1; n <= 10; n++)
      for (let c = 0; c <= n; c++)
        for (let k = 1; k <= n; k++)
          close(passAtK(n, c, k), 1 - choose(n - c, k) / choose(n, k), `n=${n} c=${c} k=${k}`);
  });

  it('averages over tasks, each k over the tasks with at least k trials', () => {
    // Task a: 3 trials, 1 passes; task b: 2 trials, 2 pass; task c: 3 trials, none.
    const result = passAtKByK([
      { n: 3, sum: 1, passes: 1 },
      { n: 2, sum: 2, passes: 2 },
      { n: 3, sum: 0, passes: 0 },
    ]);
    close(result?.['1'], (1 / 3 + 1 + 0) / 3);
    close(result?.['2'], (2 / 3 + 1 + 0) / 3);
    close(result?.['3'], (1 + 0) / 2);
    assert.equal(passAtKByK([{ n: 1, sum: 1, passes: 1 }]), undefined, 'one attempt: no pass@k');
  });
});

describe('mean and 95% interval', () => {
  const unit = { min: 0, max: 1 };
  const T_7 = 2.3646242515927844; // t(0.975, 7)
  const T_1 = 12.706204736174698; // t(0.975, 1)

  it('is the Wilson interval for 0/1 rewards: 7 of 10 gives [0.3968, 0.8922]', () => {
    // By hand: z = 1.96, centre (0.7 + z²/20) / (1 + z²/10) = 0.64449, half-width 1.41603 · √(0.021 + z²/400) = 0.24772.
    const [low, high] = wilson(0.7, 10);
    assert.ok(Math.abs(low - 0.39678) < 1e-5 && Math.abs(high - 0.89221) < 1e-5, `${low} ${high}`);
    const values = [1, 1, 1, 0, 1, 1, 0, 1, 0, 1];
    const estimate = meanEstimate(
      values.map((v) => ({ n: 1, sum: v, passes: v })),
      unit
    );
    close(estimate.mean, 0.7);
    close(estimate.ci95?.[0], low, 'one attempt per task: the plain Wilson interval');
    close(estimate.ci95?.[1], high);
  });

  it('clusters by task: attempts that share a task count as fewer trials, never more', () => {
    // Two tasks, four attempts each: one always passes, one always fails. Design effect
    // Σ (S_i − n_i·p)² / (N·p·(1−p)) = (2² + 2²) / (8 · 0.25) = 4, so 2 effective trials, and the 1 degree of freedom
    // of two tasks scales that by (t(7) / t(1))².
    const estimate = meanEstimate(
      [
        { n: 4, sum: 4, passes: 4 },
        { n: 4, sum: 0, passes: 0 },
      ],
      unit
    );
    close(estimate.mean, 0.5);
    const expected = wilson(0.5, 2 * (T_7 / T_1) ** 2);
    close(estimate.ci95?.[0], expected[0]);
    close(estimate.ci95?.[1], expected[1]);
    assert.ok(estimate.ci95![0] < wilson(0.5, 8)[0], 'wider than 8 independent trials');
    assert.ok(estimate.ci95![0] >= 0 && estimate.ci95![1] <= 1);
    // All passed: the agreement of attempts cannot be measured, so they count as one per task (n_eff = 3).
    const allPass = meanEstimate(
      [1, 2, 3].map(() => ({ n: 3, sum: 3, passes: 3 })),
      unit
    );
    const t = jStat.studentt.inv(0.975, 8) / jStat.studentt.inv(0.975, 2);
    close(allPass.ci95?.[0], wilson(1, 3 * t ** 2)[0]);
    assert.equal(allPass.ci95?.[1], 1);
    assert.equal(meanEstimate([{ n: 3, sum: 2, passes: 2 }], unit).ci95, null, 'one task: no interval');
  });

  it('is a seeded task bootstrap for other rewards: inside the observed range, the same for the same tallies', () => {
    const tasks = Array.from({ length: 12 }, (_, i) => ({ n: 2, sum: [0.1, 0.5, 0.9, 0.3][i % 4]! * 2, passes: 0 }));
    const range = { min: 0.1, max: 0.9 };
    const estimate = meanEstimate(tasks, range);
    const [low, high] = estimate.ci95!;
    assert.ok(range.min <= low && low < estimate.mean && estimate.mean < high && high <= range.max, `${low} ${high}`);
    assert.deepEqual(meanEstimate([...tasks].reverse(), range).ci95, [low, high], 'order does not matter');
    assert.equal(meanEstimate(tasks.slice(0, MIN_TASKS_BOOTSTRAP - 1), range).ci95, null, 'too few tasks');
    // Skewed near a bound: a t-interval would pass 0 here, the bootstrap cannot.
    const skewed = Array.from({ length: 10 }, (_, i) => ({ n: 1, sum: i === 0 ? 0.9 : 0.01, passes: 0 }));
    assert.ok(meanEstimate(skewed, { min: 0.01, max: 0.9 }).ci95![0] >= 0.01);
  });

  it('from 200 tasks on is the bootstrap limit mean ± 1.96·SE, clipped to the observed range', () => {
    const values = Array.from({ length: 400 }, (_, i) => (i === 0 ? 0.5 : 0.98));
    const tasks = values.map((v) => ({ n: 1, sum: v, passes: 0 }));
    const mean = values.reduce((t, v) => t + v, 0) / 400;
    const se = Math.sqrt(values.reduce((t, v) => t + (v - mean) ** 2, 0)) / 400;
    const [low, high] = meanEstimate(tasks, { min: 0.5, max: 0.98 }).ci95!;
    close(low, mean - 1.959963984540054 * se);
    assert.equal(high, 0.98, 'clipped at the largest value');
    // Continuity: with 199 tasks the resampling bootstrap gives nearly the same interval.
    const resampled = meanEstimate(tasks.slice(0, 199), { min: 0.5, max: 0.98 }).ci95!;
    const limit = meanEstimate(tasks.slice(0, 200), { min: 0.5, max: 0.98 }).ci95!;
    assert.ok(Math.abs(resampled[0] - limit[0]) < 0.01, `${resampled[0]} ${limit[0]}`);
  });

  it('compares agents by a bootstrap of per-task differences, inside their range', () => {
    const differences = [1, 0, 0, 1, 0, -1, 1, 0, 1, 0, 0, 1];
    const estimate = pairedEstimate(differences);
    close(estimate.mean, 4 / 12);
    const [low, high] = estimate.ci95!;
    assert.ok(-1 <= low && low < 4 / 12 && 4 / 12 < high && high <= 1, `${low} ${high}`);
    assert.equal(pairedEstimate([1, 0, 1]).ci95, null, 'three tasks: too few');
    assert.deepEqual(pairedEstimate([]), { n: 0, mean: 0, ci95: null });
  });
});

describe('metrics per reward key', () => {
  it('summarises a partial key over the trials that report it; no reward at all counts 0 in the primary key', () => {
    const stats = emptyStats(4);
    addTrial(stats, trial('txt-task', { reward: 1 }));
    addTrial(stats, trial('json-task', { accuracy: 0.5, style: 1 }));
    addTrial(stats, trial('broken-task', null, 'RewardFileNotFoundError'));
    addTrial(stats, trial('lost-task', null, 'InfrastructureError'));
    const metrics = groupMetrics(stats.groups['a__d']!, ['mean', 'min', 'max']);
    assert.deepEqual(Object.keys(metrics), ['accuracy', 'reward', 'style']);
    assert.equal(metrics.reward?.n, 2);
    close(metrics.reward?.mean, 0.5);
    assert.equal(metrics.reward?.min, 0);
    assert.equal(metrics.accuracy?.n, 1);
    close(metrics.accuracy?.mean, 0.5);
    assert.equal(metrics.accuracy?.ci95, null);
    assert.equal(metrics.style?.n, 1);
  });

  it('reports pass@k per key with several attempts, and an interval clustered by task', () => {
    const stats = emptyStats(6);
    for (const value of [1, 0, 1]) addTrial(stats, trial('x', { reward: value }));
    for (const value of [0, 0, 0]) addTrial(stats, trial('y', { reward: value }));
    const reward = groupMetrics(stats.groups['a__d']!, ['mean'])['reward']!;
    assert.equal(reward.n, 6);
    close(reward.mean, 1 / 3);
    assert.deepEqual(Object.keys(reward.pass_at_k ?? {}), ['1', '2', '3']);
    close(reward.pass_at_k?.['1'], (2 / 3 + 0) / 2);
    close(reward.pass_at_k?.['3'], 0.5);
    assert.ok(reward.ci95 && 0 <= reward.ci95[0] && reward.ci95[0] < 1 / 3 && reward.ci95[1] > 1 / 3);
    assert.ok(reward.ci95[1] <= 1);
  });
});

describe('the CLI table', () => {
  it('prints no interval outside [0, 1] for the examples (two 0/1 tasks), and – with one note when too few tasks', () => {
    const stats = emptyStats(4);
    addTrial(stats, trial('hello-world', { reward: 1 }));
    addTrial(stats, trial('impossible', { reward: 0 }));
    addTrial(stats, trial('word-count', { lines: 1, words: 0.5 }));
    const table = renderEvals({
      a__d: {
        agent: 'a',
        dataset: 'd',
        n_trials: 3,
        n_scored_trials: 3,
        n_errors: 0,
        metrics: groupMetrics(stats.groups['a__d']!, ['mean']),
        usage: null,
      },
    });
    // Before: [-5.853, 6.853], a t-interval with one degree of freedom.
    assert.match(table, /a\s+d\s+reward\s+2\s+3\s+0\s+0\.500\s+\[0\.095, 0\.905\]/);
    for (const [, low, high] of table.matchAll(/\[(-?[\d.]+), (-?[\d.]+)\]/g))
      assert.ok(Number(low) >= 0 && Number(high) <= 1, table);
    assert.match(table, /lines\s+1\s+3\s+0\s+1\s+–/);
    assert.equal(table.split(TOO_FEW_TASKS_NOTE).length - 1, 1, 'said once under the table');
  });
});
