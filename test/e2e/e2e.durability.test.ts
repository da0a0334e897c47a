/**
 * Durability for real: SIGKILL the CLI (and its in-process worker) mid-job, restart the Temporal server (and, on
 * the PostgreSQL-backed cluster, PostgreSQL), restart the Docker daemon, cancel a job and resume it. Each time the
 * job must finish with every trial run exactly once to completion, finished trials untouched, and no container with
 * Rollout's labels left. Docker-wise the suite runs on a private daemon (support/private-dockerd.ts): crashing the
 * host's would take every other Rollout user's containers down with it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, startCli, workspace, writeOracleJob } from '../support/cli';
import { runningTrialSteps } from '../../src/cli/inspect';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { type PrivateDockerd, startPrivateDockerd } from '../support/private-dockerd';
import {
  TEST_SERVER,
  TEST_SERVER_KIND,
  startTestServer,
  stopTestServer,
  testCluster,
  testTemporal,
} from '../support/temporal';
import { waitFor } from '../support/wait';

let client: Client;
let connection: Connection;
let dockerd: PrivateDockerd;
const jobNames: string[] = [];

async function slowJob(attempts: number, concurrency: number): Promise<{ dir: string; name: string; jobDir: string }> {
  const name = `durable-${randomBytes(3).toString('hex')}`;
  jobNames.push(name);
  const dir = await workspace({ tasks: 'test/fixtures/slow-tasks' });
  await writeOracleJob(dir, { name, n_attempts: attempts, n_concurrent_trials: concurrency });
  return { dir, name, jobDir: path.join(dir, 'jobs', name) };
}

async function results(jobDir: string): Promise<Map<string, { text: string; result: TrialResult }>> {
  const found = new Map<string, { text: string; result: TrialResult }>();
  for (const entry of await readdir(jobDir, { withFileTypes: true }).catch(() => [])) {
    const file = path.join(jobDir, entry.name, 'result.json');
    if (entry.isDirectory() && existsSync(file)) {
      const text = await readFile(file, 'utf8');
      found.set(entry.name, { text, result: JSON.parse(text) as TrialResult });
    }
  }
  return found;
}

async function trialExecutions(name: string): Promise<number> {
  return (await client.workflow.count(`RolloutJob = "${name}" AND WorkflowType = "trialWorkflow"`)).count;
}

async function assertAllRewarded(
  jobDir: string,
  total: number
): Promise<Map<string, { text: string; result: TrialResult }>> {
  const all = await results(jobDir);
  assert.equal(all.size, total);
  for (const [trial, { result }] of all) {
    assert.deepEqual(result.rewards, { reward: 1 }, `${trial}: ${JSON.stringify(result.error)}`);
    assert.equal(result.error, null, trial);
  }
  return all;
}

describe('durability', () => {
  before(async () => {
    dockerd = await startPrivateDockerd(TEST_SERVER.port);
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
    for (const name of jobNames) await removeJobLeftovers(name);
    await dockerd.stop();
  });

  it('finishes a job after SIGKILL of the CLI: finished trials untouched, in-flight ones restarted cleanly', async () => {
    const { dir, name, jobDir } = await slowJob(6, 2);
    const first = startCli(['job.yaml'], { cwd: dir });
    await waitFor('two finished trials and one agent running', async () => {
      if ((await results(jobDir)).size < 2) return false;
      return (await runningTrialSteps(client, name)).some((trial) => trial.step === 'execute');
    });
    const before = await results(jobDir);
    first.kill('SIGKILL');
    await first.output;
    assert.ok((await containersOfJob(name)).length >= 1, 'the dead worker left its containers');

    const second = await runCli(['job.yaml'], { cwd: dir });
    assert.equal(second.code, 0, second.stderr);
    const after = await assertAllRewarded(jobDir, 6);
    for (const [trial, { text }] of before) assert.equal(after.get(trial)?.text, text, `${trial} was touched`);
    assert.ok(
      [...after.values()].some(({ result }) => result.restarts > 0),
      'an in-flight trial restarted'
    );
    assert.equal(await trialExecutions(name), 6, 'one Trial workflow execution per trial');
    assert.deepEqual(await containersOfJob(name), []);

    // Days later (Temporal may have forgotten the job): running it again skips what is on disk…
    const again = await runCli(['job.yaml'], { cwd: dir });
    assert.equal(again.code, 0, again.stderr);
    assert.equal(await trialExecutions(name), 6, 'nothing ran again');
    // …and runs only a trial whose result is gone.
    const lost = [...after.keys()][0]!;
    await rm(path.join(jobDir, lost, 'result.json'));
    const rerun = await runCli(['job.yaml'], { cwd: dir });
    assert.equal(rerun.code, 0, rerun.stderr);
    const final = await assertAllRewarded(jobDir, 6);
    for (const [trial, { text }] of after) if (trial !== lost) assert.equal(final.get(trial)?.text, text);
    assert.equal(await trialExecutions(name), 7);
  });

  it(`continues a job from its history across a restart of the Temporal server (${TEST_SERVER_KIND})`, async () => {
    const { dir, name, jobDir } = await slowJob(4, 2);
    const cli = startCli(['job.yaml'], { cwd: dir });
    await waitFor('a finished trial', async () => (await results(jobDir)).size >= 1);
    assert.ok(await stopTestServer());
    await new Promise((resolve) => setTimeout(resolve, 2000));
    await startTestServer();
    const run = await cli.output;
    assert.equal(run.code, 0, run.stderr);
    await assertAllRewarded(jobDir, 4);
    assert.deepEqual(await containersOfJob(name), []);
    ({ client, connection } = await testTemporal());
    assert.equal(await trialExecutions(name), 4, 'one Trial workflow execution per trial');
  });

  it(
    'completes a job across a restart of PostgreSQL under the Temporal server: nothing lost, nothing run twice',
    { skip: TEST_SERVER_KIND !== 'cluster' && 'the dev server has no PostgreSQL (ROLLOUT_TEST_SERVER=cluster)' },
    async () => {
      const { dir, name, jobDir } = await slowJob(4, 2);
      const cli = startCli(['job.yaml'], { cwd: dir });
      await waitFor('a finished trial and an agent running', async () => {
        if ((await results(jobDir)).size < 1) return false;
        return (await runningTrialSteps(client, name)).some((trial) => trial.step === 'execute');
      });
      const finished = await results(jobDir);
      await testCluster('stop', 'postgres');
      // Long enough for the server's persistence calls, the workers' polls and heartbeats to fail and retry.
      await new Promise((resolve) => setTimeout(resolve, 5000));
      await testCluster('up');
      const run = await cli.output;
      assert.equal(run.code, 0, run.stderr);
      const all = await assertAllRewarded(jobDir, 4);
      for (const [trial, { text }] of finished) assert.equal(all.get(trial)?.text, text, `${trial} was touched`);
      assert.equal(await trialExecutions(name), 4, 'one Trial workflow execution per trial');
      assert.deepEqual(await containersOfJob(name), []);
    }
  );

  it('completes a job across a restart of the Docker daemon: affected steps retry as infrastructure errors', async () => {
    const { dir, name, jobDir } = await slowJob(4, 2);
    const cli = startCli(['job.yaml'], { cwd: dir });
    await waitFor('a running agent', async () =>
      (await runningTrialSteps(client, name)).some((trial) => trial.step === 'execute')
    );
    await dockerd.crashAndRestart();
    const run = await cli.output;
    assert.equal(run.code, 0, run.stderr);
    const all = await assertAllRewarded(jobDir, 4);
    assert.ok(
      [...all.values()].some(({ result }) => result.restarts > 0),
      'a trial restarted after the daemon died'
    );
    assert.deepEqual(await containersOfJob(name), []);
  });

  it('cancels a job (CancelledError, containers removed, partial results kept), then resumes it', async () => {
    const { dir, name, jobDir } = await slowJob(6, 2);
    const cli = startCli(['job.yaml'], { cwd: dir });
    await waitFor('a finished trial and two running', async () => {
      return (
        (await results(jobDir)).size >= 1 &&
        (await containersOfJob(name)).filter((c) => c.State === 'running').length === 2
      );
    });
    const cancel = await runCli(['cancel', name, '--no-worker'], { cwd: dir });
    assert.equal(cancel.code, 0, cancel.stderr);
    const run = await cli.output;
    assert.equal(run.code, 1, 'a cancelled job is not a completed one');
    const partial = await results(jobDir);
    const cancelled = [...partial.values()].filter(({ result }) => result.error?.type === 'CancelledError');
    assert.ok(cancelled.length >= 1, 'running trials were cancelled');
    const job = JSON.parse(await readFile(path.join(jobDir, 'result.json'), 'utf8')) as JobResult;
    assert.equal(job.status, 'cancelled');
    assert.deepEqual(await containersOfJob(name), []);

    const resumed = await runCli(['resume', name], { cwd: dir });
    assert.equal(resumed.code, 0, resumed.stderr);
    await assertAllRewarded(jobDir, 6);
  });

  it('resume --retry-errored re-runs only trials that ended in an infrastructure error', async () => {
    const { dir, name, jobDir } = await slowJob(3, 3);
    assert.equal((await runCli(['job.yaml'], { cwd: dir })).code, 0);
    const done = await results(jobDir);
    const [victim, { result }] = [...done.entries()][0]!;
    const marked = {
      ...result,
      rewards: null,
      error: { type: 'InfrastructureError', message: 'lost host', step: 'execute' },
    };
    await writeFile(path.join(jobDir, victim, 'result.json'), JSON.stringify(marked));
    const executions = await trialExecutions(name);

    const plain = await runCli(['resume', name], { cwd: dir });
    assert.equal(plain.code, 0, plain.stderr);
    assert.equal(await trialExecutions(name), executions, 'without --retry-errored nothing runs');

    const retried = await runCli(['resume', name, '--retry-errored'], { cwd: dir });
    assert.equal(retried.code, 0, retried.stderr);
    assert.equal(await trialExecutions(name), executions + 1);
    const after = await assertAllRewarded(jobDir, 3);
    for (const [trial, { text }] of done) if (trial !== victim) assert.equal(after.get(trial)?.text, text);
  });
});
