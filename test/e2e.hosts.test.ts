/**
 * What a job leaves on its Docker host: failed clean-up steps are reported, not swallowed; images go only when the
 * job that built them is done with them and no other job uses them. Real Docker, real Temporal, the real CLI.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../src/results/trial-result';
import { runCli, workspace, writeOracleJob } from './support/cli';
import { containersOfJob, removeJobLeftovers } from './support/docker';
import { faultyDocker } from './support/docker-proxy';
import { testTemporal } from './support/temporal';

const jobNames: string[] = [];

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
    await (await testTemporal()).connection.close();
  });
  after(async () => {
    for (const name of jobNames) await removeJobLeftovers(name);
  });

  it('records a failed collect in cleanup_errors and trial.log, keeps the grade, and runs the agent once (faulty-daemon stand-in)', async () => {
    const name = newJobName('collect-fails');
    const dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    await writeOracleJob(dir, { name });
    // Every copy out of a container fails, as it would from a daemon in trouble.
    const daemon = await faultyDocker((request) => /^GET \S*\/containers\/[^/]+\/archive/.test(request));
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
});
