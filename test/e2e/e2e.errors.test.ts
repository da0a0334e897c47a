/**
 * Task-level outcomes through the real stack: an agent timeout that kills every process the agent started (and
 * still verifies), missing and unparsable reward files, a Dockerfile that fails to build, an oracle without a
 * solution, and an agent that pre-writes its own reward.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { PAYLOAD_TEXT_MAX } from '../../src/contracts/errors';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace, writeOracleJob } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { recordHistory } from '../support/histories';
import { testTemporal } from '../support/temporal';

const jobName = `edge-${randomBytes(3).toString('hex')}`;
let dir: string;
let run: CliRun;
const trial = async (task: string) =>
  JSON.parse(
    await readFile(path.join(dir, 'jobs', jobName, `${task}__oracle__1`, 'result.json'), 'utf8')
  ) as TrialResult;

describe('trial outcomes', () => {
  before(async () => {
    const { client, connection } = await testTemporal();
    dir = await workspace({ tasks: 'test/fixtures/edge-tasks' });
    await writeOracleJob(dir, { name: jobName, n_concurrent_trials: 3 });
    run = await runCli(['job.yaml'], { cwd: dir });
    await recordHistory(client, `rollout-job/${jobName}`, 'job-edge-cases');
    await recordHistory(client, `${jobName}/agent-timeout__oracle__1`, 'trial-agent-timeout');
    await recordHistory(client, `${jobName}/bad-dockerfile__oracle__1`, 'trial-build-error');
    await connection.close();
  });
  after(() => removeJobLeftovers(jobName));

  it('completes the job (exit 0) whatever the trial outcomes', () => {
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /no solution\/solve\.sh/);
  });

  it('kills every agent process at the agent timeout, records AgentTimeoutError and still verifies', async () => {
    const result = await trial('agent-timeout');
    assert.equal(result.error?.type, 'AgentTimeoutError');
    assert.equal(result.error?.step, 'execute');
    assert.deepEqual(result.rewards, { reward: 1 }, 'the verifier found a process of the agent still running');
  });

  it('records RewardFileNotFoundError and RewardFileParseError with no reward', async () => {
    const missing = await trial('no-reward');
    assert.equal(missing.error?.type, 'RewardFileNotFoundError');
    assert.equal(missing.rewards, null);
    const unparsable = await trial('bad-reward');
    assert.equal(unparsable.error?.type, 'RewardFileParseError');
    assert.match(unparsable.error?.message ?? '', /not a number/);
  });

  it('records a failing Dockerfile as EnvironmentBuildError with the build output, capped for Temporal', async () => {
    const result = await trial('bad-dockerfile');
    assert.equal(result.error?.type, 'EnvironmentBuildError');
    assert.equal(result.error?.step, 'build');
    assert.equal(result.restarts, 0);
    // The build printed one line of 3 MB: the message keeps its start and end within PAYLOAD_TEXT_MAX.
    assert.match(result.error?.message ?? '', /this build step fails|exit/);
    assert.match(result.error?.message ?? '', /characters cut/);
    assert.ok((result.error?.message.length ?? 0) <= PAYLOAD_TEXT_MAX, `${result.error?.message.length}`);
  });

  it('records SolutionNotFoundError for the oracle on a task without solution/', async () => {
    assert.equal((await trial('no-solution')).error?.type, 'SolutionNotFoundError');
  });

  it('wipes /logs/verifier before verifying, so an agent cannot write its own reward', async () => {
    assert.deepEqual((await trial('agent-writes-verifier')).rewards, { reward: 0.25 });
  });

  it("runs a Harbor schema 1.4 task whose solution refers to /solution, Harbor's oracle path", async () => {
    assert.deepEqual((await trial('harbor-solution')).rewards, { reward: 1 });
  });

  it('records a variable the task may not read as MissingEnvironmentVariableError before it builds', async () => {
    const result = await trial('verifier-env');
    assert.equal(result.error?.type, 'MissingEnvironmentVariableError');
    assert.equal(result.error?.step, 'build');
    assert.match(result.error?.message ?? '', /verifier\.env\.JUDGE_KEY/);
    assert.match(result.error?.message ?? '', /ROLLOUT_UNSET_JUDGE_KEY/);
    assert.equal(result.restarts, 0);
  });

  it('counts task errors as reward 0 in metrics and by type in the job result', async () => {
    const result = JSON.parse(await readFile(path.join(dir, 'jobs', jobName, 'result.json'), 'utf8')) as JobResult;
    assert.equal(result.n_total_trials, 8);
    assert.equal(result.n_errored_trials, 6);
    assert.equal(result.n_completed_trials, 2);
    assert.equal(result.n_infrastructure_errors, 0);
    assert.deepEqual(result.errors_by_type, {
      AgentTimeoutError: 1,
      EnvironmentBuildError: 1,
      MissingEnvironmentVariableError: 1,
      RewardFileNotFoundError: 1,
      RewardFileParseError: 1,
      SolutionNotFoundError: 1,
    });
    // Rewards: agent-timeout 1, agent-writes-verifier 0.25, harbor-solution 1; five errors without reward count 0.
    const { ci95, ...reward } = result.evals['oracle__tasks']!.metrics.reward!;
    assert.deepEqual(reward, { n: 8, mean: 2.25 / 8 });
    // 0.25 makes it a reward other than 0/1: a task bootstrap, which needs 10 tasks (docs/results.md); 8 are too few.
    assert.equal(ci95, null);
  });

  it('leaves no containers behind', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
  });
});
