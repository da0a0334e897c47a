/**
 * Harbor's multi-step tasks (task.toml `[[steps]]`), through the CLI on real Docker and a real Temporal server: each
 * step's execute and verify in the one environment, later steps building on earlier steps' files, per-step rewards
 * and logs, `min_reward` stopping early, both `multi_step_reward_strategy` values, and a failing step recorded.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, writeOracleJob } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { recordHistory } from '../support/histories';
import { REPO_ROOT, testTemporal } from '../support/temporal';

const FIXTURES = path.join(REPO_ROOT, 'test', 'fixtures', 'multi-step-tasks');
const jobName = `multi-step-${randomBytes(3).toString('hex')}`;
let dir: string;
let run: CliRun;

const trialDir = (task: string) => path.join(dir, 'jobs', jobName, `${task}__oracle__1`);
const result = async (task: string) =>
  JSON.parse(await readFile(path.join(trialDir(task), 'result.json'), 'utf8')) as TrialResult;
const stepFile = (task: string, ...parts: string[]) => readFile(path.join(trialDir(task), 'steps', ...parts), 'utf8');

describe('multi-step tasks ([[steps]])', () => {
  before(async () => {
    const { client, connection } = await testTemporal();
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-multi-step-'));
    await cp(FIXTURES, path.join(dir, 'tasks'), { recursive: true });
    await writeOracleJob(dir, { name: jobName, n_concurrent_trials: 2, timeout_multiplier: 2 });
    run = await runCli(['job.yaml'], { cwd: dir });
    // Replayed by replay.test.ts: the per-step loop, and a step that fails.
    await recordHistory(client, `${jobName}/two-step__oracle__1`, 'trial-multi-step');
    await recordHistory(client, `${jobName}/setup-fails__oracle__1`, 'trial-multi-step-setup-fails');
    await connection.close();
  });
  after(async () => {
    await removeJobLeftovers(jobName);
    await rm(dir, { recursive: true, force: true });
  });

  it('runs each step on what the previous one left, with its own instruction, workdir, setup, tests and env', async () => {
    assert.equal(run.code, 0, run.stderr);
    const trial = await result('two-step');
    const output = await stepFile('two-step', 'extend', 'verifier', 'test-stdout.txt').catch(() => '');
    assert.equal(trial.error, null, `${JSON.stringify(trial.error)} ${output}`);
    assert.deepEqual(
      trial.step_results?.map((step) => [step.name, step.rewards, step.error, step.agent_exit_code]),
      [
        ['create', { reward: 1 }, null, 0],
        ['extend', { reward: 1 }, null, 0],
      ],
      output
    );
    assert.deepEqual(trial.rewards, { reward: 1 });
    for (const step of trial.step_results ?? []) {
      assert.ok(step.execute?.finished_at && step.verify?.finished_at, `${step.name} timed`);
      assert.ok(step.execute.started_at <= step.verify.started_at);
    }
    const [create, extend] = trial.step_results ?? [];
    assert.ok(create!.verify!.finished_at! <= extend!.execute!.started_at, 'steps run one after the other');
    // The trial's execute step spans both steps'.
    assert.equal(trial.steps.execute?.started_at, create!.execute!.started_at);
  });

  it("keeps each step's logs and artifacts under steps/<name>/", async () => {
    assert.match(await stepFile('two-step', 'create', 'verifier', 'reward.txt'), /^1/);
    assert.match(await stepFile('two-step', 'extend', 'verifier', 'reward.txt'), /^1/);
    assert.deepEqual((await readdir(path.join(trialDir('two-step'), 'steps', 'extend', 'agent'))).sort(), [
      'oracle.txt',
    ]);
    // The task's artifacts, collected after each step: the file as each step left it.
    assert.equal(await stepFile('two-step', 'create', 'artifacts', 'app', 'notes.txt'), 'first\n');
    assert.equal(await stepFile('two-step', 'extend', 'artifacts', 'app', 'notes.txt'), 'first\nsecond\n');
    // Harbor's /logs/artifacts holds what each step published, and only that.
    assert.equal(await stepFile('two-step', 'create', 'artifacts', 'logs', 'artifacts', 'published.txt'), 'create\n');
    assert.equal(await stepFile('two-step', 'extend', 'artifacts', 'logs', 'artifacts', 'published.txt'), 'extend\n');
    const log = await readFile(path.join(trialDir('two-step'), 'trial.log'), 'utf8');
    assert.match(log, /step extend \(2 of 2\)/);
    // Each step's own limit (60 s for create, the task's 600 s for extend), times the job's timeout_multiplier.
    assert.match(log, /running agent oracle \(timeout 120 s\)[^]*running agent oracle \(timeout 1200 s\)/);
    assert.match(log, /steps\/extend\/workdir\/setup.sh: exit 0/);
    assert.match(log, /step extend: healthcheck passed/);
  });

  it('stops after a step below its min_reward; "final" takes that step\'s rewards', async () => {
    const trial = await result('gated');
    assert.equal(trial.error, null);
    assert.deepEqual(
      trial.step_results?.map((step) => step.name),
      ['low']
    );
    assert.equal(trial.step_results?.[0]?.below_min_reward, 'reward = 0.25 is below min_reward 0.5');
    assert.deepEqual(trial.rewards, { reward: 0.25 });
  });

  it('"mean" averages each key over the steps, a key a step lacks counting 0', async () => {
    const trial = await result('partial-mean');
    assert.deepEqual(
      trial.step_results?.map((step) => step.rewards),
      [{ reward: 1, style: 1 }, { reward: 0 }]
    );
    assert.deepEqual(trial.rewards, { reward: 0.5, style: 0.5 });
  });

  it('records a step whose setup.sh fails, runs no step after it, and scores the steps that ran', async () => {
    const trial = await result('setup-fails');
    const [a, b, ...rest] = trial.step_results ?? [];
    assert.deepEqual(rest, []);
    assert.deepEqual(a?.rewards, { reward: 1 });
    assert.equal(b?.rewards, null);
    assert.equal(b?.error?.type, 'StepSetupError');
    assert.match(b?.error?.message ?? '', /steps\/b\/workdir\/setup.sh: exit 3: the fixture is broken/);
    assert.equal(b?.verify, null, 'no verifier after a failed setup');
    assert.equal(trial.error?.type, 'StepSetupError');
    assert.match(trial.error?.message ?? '', /^step b: /);
    // Harbor's mean: over the steps that have rewards.
    assert.deepEqual(trial.rewards, { reward: 1 });
  });
});
