/** Statistics per reward key: pass@k, the clustered t-interval, partial keys; checked against direct computations. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { addTrial, emptyStats, groupMetrics } from '../src/results/job-stats';
import { meanEstimate, passAtK, passAtKByK } from '../src/results/statistics';
import type { Rewards, TrialSummary } from '../src/trial/types';

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
  it('is the t-interval s/√n with one trial per task', () => {
    const values = [1, 0, 1, 1, 0];
    const estimate = meanEstimate(values.map((v) => ({ n: 1, sum: v, passes: v })));
    const mean = 0.6;
    const s = Math.sqrt(values.reduce((t, v) => t + (v - mean) ** 2, 0) / 4);
    const half = 2.7764451051977987 * (s / Math.sqrt(5)); // t(0.975, 4)
    close(estimate.mean, mean);
    close(estimate.ci95?.[0], mean - half);
    close(estimate.ci95?.[1], mean + half);
  });

  it('clusters by task: attempts of one task widen the interval instead of narrowing it', () => {
    // Two tasks, four attempts each: one always passes, one always fails. 8 "independent" trials would give a
    // narrow interval; two clusters give the t(1) interval of two task means.
    const estimate = meanEstimate([
      { n: 4, sum: 4, passes: 4 },
      { n: 4, sum: 0, passes: 0 },
    ]);
    close(estimate.mean, 0.5);
    // SE = sqrt(2/1 · ((4−2)² + (0−2)²)) / 8 = 0.5; t(0.975, 1) = 12.706…
    close(estimate.ci95?.[1], 0.5 + 12.706204736174698 * 0.5);
    assert.equal(meanEstimate([{ n: 3, sum: 2, passes: 2 }]).ci95, null, 'one task: no interval');
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
    assert.ok(reward.ci95 && reward.ci95[0] < 1 / 3 && reward.ci95[1] > 1 / 3);
  });
});
