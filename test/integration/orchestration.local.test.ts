/**
 * Orchestration at scale and across workers, on the `local` environment (host processes) so containers do not
 * drown the signal: continue-as-new, exactly-once trials, two hosts sharing a job, attaching instead of duplicating.
 * Real Temporal dev server; real workers in this process.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';
import type { NativeConnection, Worker } from '@temporalio/worker';

import { jobFiles } from '../../src/results/files';
import type { TrialResult } from '../../src/results/trial-result';
import { localWorkers, runHistoryLengths, submitJob, writeLocalJob } from '../support/local-job';
import { REPO_ROOT, testTemporal } from '../support/temporal';
import { runCli, startCli } from '../support/cli';
import { waitFor, within } from '../support/wait';
import { recordHistory } from '../support/histories';
import { trialStateQuery } from '../../workflows/messages';

let client: Client;
let connection: Connection;
const started: { connection: NativeConnection; workers: Worker[]; running: Promise<unknown> }[] = [];

async function startWorkers(hostId: string, maxTrials: number, serveWorkflows = true, host = true) {
  const set = await localWorkers({ hostId, maxTrials, serveWorkflows, host });
  const entry = { ...set, running: Promise.all(set.workers.map((w) => w.run())) };
  started.push(entry);
  return entry;
}

async function stopWorkers(): Promise<void> {
  for (const set of started.splice(0)) {
    for (const worker of set.workers) if (worker.getState() === 'RUNNING') worker.shutdown();
    await set.running;
    await set.connection.close();
  }
}

async function trialResults(jobDir: string, trialNames: string[]): Promise<TrialResult[]> {
  return Promise.all(
    trialNames.map(
      async (name) => JSON.parse(await readFile(jobFiles.trialResult(jobDir, name), 'utf8')) as TrialResult
    )
  );
}

describe('orchestration on the local environment', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await stopWorkers();
    await connection.close();
  });

  it('continues-as-new before the Job history grows large, and runs every trial exactly once', async () => {
    const name = `can-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({ name, attempts: 300, concurrency: 24 });
    await startWorkers(`can-${name}`, 24);
    const { handle, plan } = await submitJob(client, jobFile, { maxHistoryEvents: 600 });
    const final = await handle.result();
    await stopWorkers();
    // The last run: it started from state carried over by continue-as-new.
    await recordHistory(client, plan.jobWorkflowId, 'job-continued-as-new');

    assert.equal(final.finished, 300);
    assert.equal(final.completed, 300, JSON.stringify(final.errorsByType));
    assert.equal(final.meanReward, 1);
    assert.ok(final.continuedAsNew >= 2, `continued-as-new ${final.continuedAsNew} times`);
    const lengths = await runHistoryLengths(client, plan.jobWorkflowId);
    assert.ok(Math.max(...lengths) < 1200, `history lengths ${lengths.join(', ')}`);

    const results = await trialResults(
      plan.jobDir,
      plan.trials.map((t) => t.spec.trialName)
    );
    assert.ok(results.every((r) => r.rewards?.reward === 1 && r.restarts === 0));

    // Every activity of a Trial and of the Job has a heartbeat timeout of at most 10 s: a completion lost on its way
    // (the server down at that moment) is retried within seconds, never after a start-to-close timeout of minutes.
    for (const workflowId of [plan.jobWorkflowId, results[0]!.workflow_id]) {
      const history = await client.workflow.getHandle(workflowId).fetchHistory();
      const scheduled = (history.events ?? []).flatMap((event) =>
        event.activityTaskScheduledEventAttributes ? [event.activityTaskScheduledEventAttributes] : []
      );
      assert.ok(scheduled.length > 0, workflowId);
      for (const activity of scheduled) {
        const seconds = Number(activity.heartbeatTimeout?.seconds ?? 0);
        assert.ok(seconds > 0 && seconds <= 10, `${activity.activityType?.name}: heartbeat timeout ${seconds} s`);
      }
    }
    // The workflow worker was the trials' host: their steps ran in it as local activities, but for the claim and the
    // agent's own step, which stay activity tasks.
    const trialHistory = await client.workflow.getHandle(results[0]!.workflow_id).fetchHistory();
    const activityTasks = (trialHistory.events ?? []).flatMap(
      (event) => event.activityTaskScheduledEventAttributes?.activityType?.name ?? []
    );
    assert.deepEqual(activityTasks, ['claimHost', 'executeAgent']);
    const localSteps = (trialHistory.events ?? []).filter(
      (event) => event.markerRecordedEventAttributes?.markerName === 'core_local_activity'
    );
    assert.equal(localSteps.length, 7, 'build, start, verify, collect, stop, cleanup, result');
    await recordHistory(client, results[0]!.workflow_id, 'trial-local-steps');
    const executions = await client.workflow.count(`RolloutJob = "${name}" AND WorkflowType = "trialWorkflow"`);
    assert.equal(executions.count, 300, 'one Trial workflow execution per trial');

    // Paced housekeeping, in every run of the Job: one reconcile timer per run (not one per wait), and result.json
    // written at most once a second of workflow time while trials finish.
    let writes = 0;
    for await (const run of client.workflow.list({ query: `WorkflowId = "${plan.jobWorkflowId}"` })) {
      const events = (await client.workflow.getHandle(plan.jobWorkflowId, run.runId).fetchHistory()).events ?? [];
      const reconcileTimers = events.filter(
        (event) => Number(event.timerStartedEventAttributes?.startToFireTimeout?.seconds ?? 0) === 120
      );
      // One more for each interval the run lasted (CI may be slow), never one per trial's end.
      const intervals = Math.floor(((run.closeTime ?? new Date()).getTime() - run.startTime.getTime()) / 120_000);
      assert.ok(
        reconcileTimers.length >= 1 && reconcileTimers.length <= 1 + intervals,
        `run ${run.runId}: ${reconcileTimers.length} reconcile timers`
      );
      const writeTimes = events
        .filter((event) => event.activityTaskScheduledEventAttributes?.activityType?.name === 'writeJobResult')
        .map((event) => Number(event.eventTime!.seconds) * 1000 + Math.floor((event.eventTime!.nanos ?? 0) / 1e6));
      writes += writeTimes.length;
      // A run's last write is at once: the final one, or the one before it continues-as-new.
      const paced = writeTimes.slice(0, -1);
      for (let i = 1; i < paced.length; i++) {
        assert.ok(paced[i]! - paced[i - 1]! >= 1000, `run ${run.runId}: writes ${paced[i]! - paced[i - 1]!} ms apart`);
      }
    }
    assert.ok(writes < 300, `${writes} result writes for 300 trials`);
  });

  it('shares one job between two workers with separate host identities', async () => {
    const name = `hosts-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({ name, attempts: 24, concurrency: 8 });
    await startWorkers(`alpha-${name}`, 4, true);
    await startWorkers(`beta-${name}`, 4, false);
    const { handle, plan } = await submitJob(client, jobFile);
    const final = await handle.result();
    await stopWorkers();

    assert.equal(final.completed, 24);
    const hosts = new Set(
      (
        await trialResults(
          plan.jobDir,
          plan.trials.map((t) => t.spec.trialName)
        )
      ).map((r) => r.host)
    );
    assert.deepEqual([...hosts].sort(), [`rollout-local@alpha-${name}`, `rollout-local@beta-${name}`]);
  });

  it('restarts a trial on another host when its host dies, after a bounded wait', async () => {
    const name = `lost-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({
      name,
      attempts: 4,
      concurrency: 4,
      execute: 'sleep 6 && echo ok > answer.txt',
    });
    await startWorkers(`alpha-${name}`, 2, true);
    const beta = startCli(
      ['worker', '--env', 'local', '--host-id', `beta-${name}`, '--no-workflows', '--max-trials', '2'],
      {
        cwd: REPO_ROOT,
      }
    );
    const { handle, plan } = await submitJob(client, jobFile, { hostLostTimeoutSec: 3 });
    const betaQueue = `rollout-local@beta-${name}`;
    await waitFor('a trial executing on beta', async () => {
      for (const { spec } of plan.trials) {
        const state = await client.workflow
          .getHandle(spec.trialId)
          .query(trialStateQuery)
          .catch(() => undefined);
        if (state?.hostQueue === betaQueue && state.step === 'execute') return true;
      }
      return false;
    });
    beta.kill('SIGKILL');
    await beta.output;
    const final = await handle.result();
    await stopWorkers();

    assert.equal(final.completed, 4, JSON.stringify(final.errorsByType));
    const results = await trialResults(
      plan.jobDir,
      plan.trials.map((t) => t.spec.trialName)
    );
    assert.ok(
      results.every((r) => r.host === `rollout-local@alpha-${name}`),
      'every trial finished on alpha'
    );
    assert.ok(
      results.some((r) => r.restarts > 0),
      'the trials of the dead host restarted'
    );
    const restarted = results.find((r) => r.restarts > 0);
    if (restarted) await recordHistory(client, restarted.workflow_id, 'trial-restarted-on-another-host');
  });

  it('attaches to a running job instead of starting a duplicate', async () => {
    const name = `attach-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({ name, attempts: 4, concurrency: 2 });
    const first = await submitJob(client, jobFile);
    const second = await submitJob(client, jobFile);
    assert.equal(second.handle.firstExecutionRunId, first.handle.firstExecutionRunId);
    await startWorkers(`attach-${name}`, 2);
    assert.equal((await second.handle.result()).completed, 4);
    await stopWorkers();
    const runs = await client.workflow.count(`WorkflowId = "${first.plan.jobWorkflowId}"`);
    assert.equal(runs.count, 1);
  });

  it('finishes a job whose trial never reports back (terminated), counting it as an error', async () => {
    const name = `silent-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({
      name,
      attempts: 2,
      concurrency: 2,
      execute: 'sleep 4 && echo ok > answer.txt',
    });
    await startWorkers(`silent-${name}`, 2);
    const { handle, plan } = await submitJob(client, jobFile, { reconcileIntervalSec: 2 });
    const victim = plan.trials[0]!.spec;
    await waitFor('the first trial to execute', async () => {
      const state = await client.workflow
        .getHandle(victim.trialId)
        .query(trialStateQuery)
        .catch(() => undefined);
      return state?.step === 'execute';
    });
    await client.workflow.getHandle(victim.trialId).terminate('terminated from the UI');
    const final = await within(60_000, 'the job to finish', handle.result());
    await stopWorkers();
    await recordHistory(client, plan.jobWorkflowId, 'job-trial-terminated');

    assert.equal(final.status, 'completed');
    assert.equal(final.finished, 2);
    assert.equal(final.completed, 1);
    assert.deepEqual(final.errorsByType, { InfrastructureError: 1 });
  });

  it('gives each step the timeout the README promises: limits × timeout_multiplier, verifier override and ceiling', async () => {
    const name = `timeouts-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({
      name,
      attempts: 1,
      concurrency: 1,
      execute: 'sleep 5; echo ok > answer.txt',
    });
    // task.toml: agent 30 s, verifier 30 s. The agent gets 30 × 0.1 = 3 s; the verifier 70 s (override), capped at 50, × 0.1 = 5 s.
    await appendFile(
      jobFile,
      'timeout_multiplier: 0.1\nverifier:\n  override_timeout_sec: 70\n  max_timeout_sec: 50\n'
    );
    // Workflows on one worker, the trial on another: every step is an activity task on the host's queue.
    await startWorkers(`timeouts-wf-${name}`, 1, true, false);
    await startWorkers(`timeouts-${name}`, 1, false);
    const { handle, plan } = await submitJob(client, jobFile);
    const final = await within(120_000, 'the job to finish', handle.result());
    await stopWorkers();

    assert.deepEqual(final.errorsByType, { AgentTimeoutError: 1 }, 'the agent was stopped at 3 s, not 30');
    const [result] = await trialResults(plan.jobDir, [plan.trials[0]!.spec.trialName]);
    assert.match(result?.error?.message ?? '', /agent exceeded 3 s/);
    const timeouts = new Map<string, number>();
    const history = await client.workflow.getHandle(plan.trials[0]!.spec.trialId).fetchHistory();
    for (const event of history.events ?? []) {
      const scheduled = event.activityTaskScheduledEventAttributes;
      if (scheduled?.activityType?.name) {
        timeouts.set(scheduled.activityType.name, Number(scheduled.startToCloseTimeout?.seconds ?? 0));
      }
    }
    // Temporal's own timeout is the limit enforced inside the step plus a fixed grace of 60 s.
    assert.equal(timeouts.get('executeAgent'), 3 + 60);
    assert.equal(timeouts.get('runVerifier'), 5 + 60);
    assert.equal(timeouts.get('cleanupEnvironment'), 30 + 60, 'housekeeping 300 s × 0.1');
  });

  it('never runs more trials at once than n_concurrent_trials, nor more on a worker than --max-trials', async () => {
    const name = `bounds-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({
      name,
      attempts: 8,
      concurrency: 3,
      execute: 'sleep 1; echo ok > answer.txt',
    });
    await startWorkers(`bound-a-${name}`, 2);
    await startWorkers(`bound-b-${name}`, 4, false);
    const { handle, plan } = await submitJob(client, jobFile);
    const final = await within(180_000, 'the job to finish', handle.result());
    await stopWorkers();

    assert.equal(final.completed, 8);
    const results = await trialResults(
      plan.jobDir,
      plan.trials.map((t) => t.spec.trialName)
    );
    // A trial holds its slot from its claim (before build) until its cleanup releases it (after cleanup started). The
    // workflow records cleanup's end only after that release, when the next trial may already be building, so count
    // overlaps of [build start, cleanup start]: always inside the held span, an overlap there is a real one.
    const held = (of: typeof results) =>
      maxOverlap(of.map((r) => [Date.parse(r.steps.build!.started_at), Date.parse(r.steps.cleanup!.started_at)]));
    assert.ok(held(results) <= 3, `${held(results)} trials at once`);
    const onA = results.filter((r) => r.host === `rollout-local@bound-a-${name}`);
    assert.ok(held(onA) <= 2, `${held(onA)} trials at once on a worker with --max-trials 2`);
  });

  it('resume --retry-errored <types> re-runs only trials that ended in one of the named error types', async () => {
    const name = `retry-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({ name, attempts: 3, concurrency: 3 });
    await startWorkers(`retry-${name}`, 3);
    const { handle, plan } = await submitJob(client, jobFile);
    await within(120_000, 'the job to finish', handle.result());
    await stopWorkers();
    const [timedOut, noReward, fine] = plan.trials.map((t) => t.spec.trialName) as [string, string, string];
    const mark = async (trial: string, type: string) => {
      const file = jobFiles.trialResult(plan.jobDir, trial);
      const result = JSON.parse(await readFile(file, 'utf8')) as TrialResult;
      await writeFile(
        file,
        JSON.stringify({ ...result, rewards: null, error: { type, message: 'marked', step: 'execute' } })
      );
    };
    await mark(timedOut, 'AgentTimeoutError');
    await mark(noReward, 'RewardFileNotFoundError');
    const before = await readFile(jobFiles.trialResult(plan.jobDir, fine), 'utf8');

    const run = await runCli(['resume', plan.jobDir, '--retry-errored', 'AgentTimeoutError', 'CancelledError'], {
      cwd: REPO_ROOT,
      env: { ROLLOUT_HOST_ID: `retry-cli-${name}` },
      timeoutMs: 180_000,
    });
    assert.equal(run.code, 0, run.stderr);
    const [retried, kept] = await trialResults(plan.jobDir, [timedOut, noReward]);
    assert.equal(retried?.error, null, 'the AgentTimeoutError trial ran again');
    assert.equal(kept?.error?.type, 'RewardFileNotFoundError', 'other error types are kept');
    assert.equal(await readFile(jobFiles.trialResult(plan.jobDir, fine), 'utf8'), before);
    const executions = await client.workflow.count(`RolloutJob = "${name}" AND WorkflowType = "trialWorkflow"`);
    assert.equal(executions.count, 4);
  });
});

/** The largest number of [start, end] intervals that overlap at one moment. */
function maxOverlap(intervals: [number, number][]): number {
  const edges = intervals.flatMap(([start, end]) => [
    [start, 1],
    [end, -1],
  ]);
  // Ends before starts at the same moment: touching intervals do not overlap.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let current = 0;
  let most = 0;
  for (const [, delta] of edges) {
    current += delta!;
    most = Math.max(most, current);
  }
  return most;
}
