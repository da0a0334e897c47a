/**
 * The Job workflow's state (workflows/job/state.ts) is pure: counted here without a server. What it must keep across
 * signals, reconciles and continue-as-new: each trial counted once, late reports held until the plan reaches them,
 * an environment's images released only once no trial needs it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { TrialSpec, TrialSummary } from '../../src/contracts/trial';
import type { JobInput } from '../../workflows/job/state';
import { JobState } from '../../workflows/job/state';

const NOW = '2026-11-25T00:00:00.000Z';

const input: JobInput = {
  jobName: 'state',
  jobDir: '/nowhere',
  totalTrials: 3,
  concurrency: 2,
  metrics: ['mean'],
  environmentType: 'docker',
  deleteImages: true,
  rerunErrorTypes: [],
};

function spec(trialId: string, envKey: string): TrialSpec {
  return {
    trialId,
    trialName: trialId,
    taskName: 'task',
    datasetName: 'ds',
    agentName: 'agent',
    attempt: 1,
    envKey,
  } as TrialSpec;
}

function summary(trialId: string, envKey: string, extra: Partial<TrialSummary> = {}): TrialSummary {
  return {
    trialId,
    trialName: trialId,
    taskName: 'task',
    datasetName: 'ds',
    agentName: 'agent',
    attempt: 1,
    rewards: { reward: 1 },
    error: null,
    hostQueue: null,
    builtImage: null,
    envKey,
    ...extra,
  };
}

describe('the Job workflow state', () => {
  it('counts a running trial once when it ends, and frees its slot', () => {
    const job = new JobState(input, 'job/state', NOW);
    job.dirty = false;
    job.trialStarted(spec('a', 'env1'), job.env('env1'), NOW);
    assert.equal(job.runningCount, 1);
    job.trialEnded(summary('a', 'env1'));
    job.trialEnded(summary('a', 'env1')); // a reconcile after the signal: not counted again
    assert.equal(job.runningCount, 0);
    assert.equal(job.dirty, true);
    const progress = job.progress(NOW);
    assert.equal(progress.finished, 1);
    assert.equal(progress.completed, 1);
    assert.equal(progress.meanReward, 1);
  });

  it('holds the report of a trial an earlier run started until the plan reaches it, once', () => {
    const job = new JobState(input, 'job/state', NOW);
    job.trialEnded(summary('b', 'env1'));
    assert.equal(job.progress(NOW).finished, 0);
    assert.equal(job.takeLate('b')?.trialId, 'b');
    assert.equal(job.takeLate('b'), undefined);
  });

  it("releases an environment's images only once it is dispatched and no trial holds it", () => {
    const job = new JobState(input, 'job/state', NOW);
    job.trialStarted(spec('c', 'env1'), job.env('env1'), NOW);
    job.env('env1').dispatched = true;
    assert.deepEqual([...job.releasable()], []);
    job.trialEnded(summary('c', 'env1', { builtImages: [{ hostQueue: 'rollout-docker@h1', image: 'img:1' }] }));
    const released = [...job.releasable()];
    assert.deepEqual(
      released.map((env) => env.images),
      [{ 'rollout-docker@h1': 'img:1' }]
    );
    assert.deepEqual([...job.releasable()], [], 'taken out of the state: released once');
  });

  it('keeps every image an environment got on one queue (Daytona snapshots differ by trial size)', () => {
    const job = new JobState(input, 'job/state', NOW);
    for (const [id, image] of [
      ['f', 'rollout-k-1c1g1d'],
      ['g', 'rollout-k-1c2g10d'],
      ['h', 'rollout-k-1c2g10d'],
    ] as const) {
      job.trialStarted(spec(id, 'env1'), job.env('env1'), NOW);
      job.trialEnded(summary(id, 'env1', { builtImages: [{ hostQueue: 'rollout-daytona', image }] }));
    }
    job.env('env1').dispatched = true;
    assert.deepEqual(
      [...job.releasable()].map((env) => env.images),
      [{ 'rollout-daytona': 'rollout-k-1c1g1d', 'rollout-daytona\nrollout-k-1c2g10d': 'rollout-k-1c2g10d' }]
    );
  });

  it('scores neither infrastructure errors nor cancellations, and carries everything into the next run', () => {
    const job = new JobState(input, 'job/state', NOW);
    for (const [id, type] of [
      ['d', 'InfrastructureError'],
      ['e', 'CancelledError'],
    ] as const) {
      job.trialStarted(spec(id, 'env1'), job.env('env1'), NOW);
      job.trialEnded(summary(id, 'env1', { rewards: null, error: { type, message: 'x', step: 'execute' } }));
    }
    assert.equal(job.progress(NOW).meanReward, null);
    const next = job.continued();
    assert.equal(next.carried?.continuedAsNew, 1);
    const resumed = new JobState(next, 'job/state', NOW);
    assert.equal(resumed.progress(NOW).finished, 2);
    assert.equal(resumed.progress(NOW).infrastructureErrors, 1);
  });
});
