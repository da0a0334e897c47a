/**
 * What a job leaves on its Docker host: failed clean-up steps are reported, not swallowed; images go only when the
 * job that built them is done with them and no other job uses them. Real Docker, real Temporal, the real CLI.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { appendFile, readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client } from '@temporalio/client';

import { runningTrialSteps } from '../../src/cli/inspect';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, startCli, workspace, writeOracleJob } from '../support/cli';
import { containersOfJob, imagesOfJob, removeJobLeftovers } from '../support/docker';
import { faultyDocker } from '../support/docker-proxy';
import { recordHistory } from '../support/histories';
import { testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

const jobNames: string[] = [];
let client: Client;

/** hello-world then slow, each with an image of its own (nothing else on the host shares it). */
async function twoEnvironments(name: string, keep: boolean): Promise<string> {
  const dir = await workspace({
    'tasks/hello-world': 'examples/tasks/hello-world',
    'tasks/slow': 'test/fixtures/slow-tasks/slow',
  });
  for (const task of ['hello-world', 'slow']) {
    await appendFile(path.join(dir, 'tasks', task, 'environment', 'Dockerfile'), `LABEL test="${name} ${task}"\n`);
  }
  await writeOracleJob(dir, { name, n_concurrent_trials: 1, environment: `{ type: docker, delete: ${!keep} }` });
  return dir;
}

function newJobName(prefix: string): string {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  jobNames.push(name);
  return name;
}

async function trialResult(dir: string, job: string, trial: string): Promise<TrialResult> {
  return JSON.parse(await readFile(path.join(dir, 'jobs', job, trial, 'result.json'), 'utf8')) as TrialResult;
}

describe('a job on its Docker host', () => {
  before(async () => {
    ({ client } = await testTemporal());
  });
  after(async () => {
    await client.connection.close();
    for (const name of jobNames) await removeJobLeftovers(name);
  });

  it('records a failed collect in cleanup_errors and trial.log, keeps the grade, and runs the agent once (faulty-daemon stand-in)', async () => {
    const name = newJobName('collect-fails');
    const dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    await writeOracleJob(dir, { name });
    // Copying the agent's logs out of the container fails, as it would from a daemon in trouble: the one archive of
    // /logs collect asks for, and /logs/agent alone.
    const daemon = await faultyDocker((request) =>
      /^GET \S*\/containers\/[^/]+\/archive\?path=%2Flogs(%2Fagent)?(&|$)/.test(request)
    );
    try {
      const run = await runCli(['job.yaml'], { cwd: dir, env: { DOCKER_HOST: daemon.dockerHost } });
      assert.equal(run.code, 0, run.stderr);
    } finally {
      await daemon.close();
    }
    assert.ok(daemon.failed.length > 0, 'the collect step reached the daemon');
    const result = await trialResult(dir, name, 'hello-world__oracle__1');
    assert.deepEqual(result.rewards, { reward: 1 });
    assert.equal(result.error, null);
    assert.equal(result.restarts, 0);
    assert.deepEqual(
      result.cleanup_errors?.map((error) => [error.step, error.type]),
      [['collect', 'InfrastructureError']]
    );
    const log = await readFile(path.join(dir, 'jobs', name, 'hello-world__oracle__1', 'trial.log'), 'utf8');
    assert.match(log, /\[collect\] failed on rollout-docker@\S+: InfrastructureError: .*injected daemon fault/);
    assert.deepEqual(await containersOfJob(name), []);
  });

  it('removes an image as soon as the job no longer needs it (delete: true), mid-job', async () => {
    const name = newJobName('release');
    const dir = await twoEnvironments(name, false);
    const cli = startCli(['job.yaml'], { cwd: dir });
    await waitFor('the second environment executing', async () =>
      (await runningTrialSteps(client, name)).some(
        (trial) => trial.trialId.includes('/slow__') && trial.step === 'execute'
      )
    );
    const midJob = (await imagesOfJob(name)).map((image) => image.Labels.test);
    const run = await cli.output;
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(midJob, [`${name} slow`], 'the first environment released while the second runs');
    assert.deepEqual(await imagesOfJob(name), []);
  });

  it('keeps every image with delete: false', async () => {
    const name = newJobName('keep');
    const dir = await twoEnvironments(name, true);
    const run = await runCli(['job.yaml'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    const kept = (await imagesOfJob(name)).map((image) => image.Labels.test).sort();
    assert.deepEqual(kept, [`${name} hello-world`, `${name} slow`]);
  });

  it('releases the images of a cancelled job', async () => {
    const name = newJobName('cancel-release');
    const dir = await twoEnvironments(name, false);
    const cli = startCli(['job.yaml'], { cwd: dir });
    let exited = false;
    void cli.output.then(() => (exited = true));
    await waitFor('a trial executing', async () => {
      if (exited) assert.fail(`the job ended before it could be cancelled: ${(await cli.output).stderr}`);
      return (await runningTrialSteps(client, name)).some((trial) => trial.step === 'execute');
    });
    const cancel = await runCli(['cancel', name, '--no-worker'], { cwd: dir });
    assert.equal(cancel.code, 0, cancel.stderr);
    assert.equal((await cli.output).code, 1);
    await recordHistory(client, `rollout-job/${name}`, 'job-cancelled');
    await recordHistory(client, `${name}/hello-world__oracle__1`, 'trial-cancelled');
    assert.deepEqual(await containersOfJob(name), []);
    assert.deepEqual(await imagesOfJob(name), []);
  });
});
