/**
 * Issue 31, "nothing leaks, nothing runs twice", at the bad moments: the worker process (the CLI with its in-process
 * worker) is killed with SIGKILL while the start step holds a container it has not yet returned to Temporal: once
 * right after the container exists, once after the trial folder recorded its id. The rerun must remove exactly that
 * container, finish the trial once, and leave no container of the job.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { appendFile, mkdtemp, readFile, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { TrialResult } from '../../src/results/trial-result';
import { recordedSandboxes } from '../../src/results/sandbox-record';
import { runCli, startCli, workspace, writeOracleJob } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

let client: Client;
let connection: Connection;
const jobNames: string[] = [];

/** One trial whose start step lasts a few seconds after its container exists (a healthcheck that takes its time). */
async function slowStartJob(): Promise<{ dir: string; name: string; jobDir: string; env: Record<string, string> }> {
  const name = `orphan-${randomBytes(3).toString('hex')}`;
  jobNames.push(name);
  const dir = await workspace({ tasks: 'test/fixtures/slow-tasks' });
  await appendFile(
    path.join(dir, 'tasks', 'slow', 'task.toml'),
    '\n[environment.healthcheck]\ncommand = "sleep 4"\ntimeout_sec = 30\n'
  );
  await writeOracleJob(dir, { name, n_attempts: 1, n_concurrent_trials: 1 });
  // A host and lease folder of this test's own: no other test's process shares its queue.
  const env = {
    ROLLOUT_HOST_ID: `${name}-host`,
    ROLLOUT_LEASE_DIR: await mkdtemp(path.join(tmpdir(), 'leases-')),
    SLOW_SECONDS: '1',
  };
  return { dir, name, jobDir: path.join(dir, 'jobs', name), env };
}

async function trialDirs(jobDir: string): Promise<string[]> {
  const entries = await readdir(jobDir, { withFileTypes: true }).catch(() => []);
  return entries
    .filter((entry) => entry.isDirectory() && existsSync(path.join(jobDir, entry.name, 'trial.log')))
    .map((entry) => entry.name);
}

async function results(jobDir: string): Promise<TrialResult[]> {
  const found: TrialResult[] = [];
  for (const trial of await trialDirs(jobDir)) {
    const file = path.join(jobDir, trial, 'result.json');
    if (existsSync(file)) found.push(JSON.parse(await readFile(file, 'utf8')) as TrialResult);
  }
  return found;
}

async function trialExecutions(name: string): Promise<number> {
  return (await client.workflow.count(`RolloutJob = "${name}" AND WorkflowType = "trialWorkflow"`)).count;
}

/** Kills the CLI once `moment` holds, returns the id of the container the killed attempt had made. */
async function killAt(
  job: Awaited<ReturnType<typeof slowStartJob>>,
  moment: string,
  check: () => Promise<boolean>
): Promise<string> {
  const first = startCli(['job.yaml'], { cwd: job.dir, env: job.env });
  await waitFor(moment, check);
  first.kill('SIGKILL');
  await first.output;
  const left = await containersOfJob(job.name);
  assert.equal(left.length, 1, 'the killed attempt left its container');
  assert.equal((await results(job.jobDir)).length, 0, 'killed during start: no trial had finished');
  return left[0]!.Id;
}

async function assertFinishedOnce(job: Awaited<ReturnType<typeof slowStartJob>>, killed: string): Promise<string> {
  const rerun = await runCli(['job.yaml'], { cwd: job.dir, env: job.env });
  assert.equal(rerun.code, 0, rerun.stderr);
  const finished = await results(job.jobDir);
  assert.equal(finished.length, 1);
  assert.deepEqual(finished[0]!.rewards, { reward: 1 }, JSON.stringify(finished[0]!.error));
  assert.equal(await trialExecutions(job.name), 1, 'one Trial workflow execution');
  const left = await containersOfJob(job.name);
  assert.deepEqual(
    left.map((container) => container.Id),
    [],
    `the killed attempt's ${killed.slice(0, 12)} or another container was left`
  );
  const [trial] = await trialDirs(job.jobDir);
  assert.deepEqual(await recordedSandboxes(job.jobDir, trial!), [], 'every recorded sandbox is recorded as removed');
  return readFile(path.join(job.jobDir, trial!, 'trial.log'), 'utf8');
}

describe('no orphan after a worker killed in the start step (docker)', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
    for (const name of jobNames) await removeJobLeftovers(name);
  });

  it('killed as soon as the container exists: the rerun finds it by its labels, removes it, runs the trial once', async () => {
    const job = await slowStartJob();
    const killed = await killAt(job, 'the trial container to exist', async () => {
      return (await containersOfJob(job.name)).length > 0;
    });
    const log = await assertFinishedOnce(job, killed);
    assert.equal((log.match(/\[start\] environment \w+ started/g) ?? []).length, 1, log);
  });

  it('killed after the trial folder recorded the container: the rerun removes it by its recorded id', async () => {
    const job = await slowStartJob();
    const killed = await killAt(job, 'the container recorded in the trial folder', async () => {
      const [trial] = await trialDirs(job.jobDir);
      return trial !== undefined && (await recordedSandboxes(job.jobDir, trial)).length > 0;
    });
    const log = await assertFinishedOnce(job, killed);
    assert.match(log, new RegExp(`\\[start\\] environment ${killed.slice(0, 12)} left by an attempt on \\S+: removed`));
  });
});
