/**
 * The library API (`import { Rollout } from 'rollout-agents'`) against the tests' real Temporal server, with real workers,
 * on the `local` environment so containers do not dominate: submit, stream, cancel, single trials, and a consumer
 * that restarts, or whose process is killed, and still gets every result.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

import { formatProblem, InputError, Rollout } from 'rollout-agents';
import type { JobConfig } from 'rollout-agents';

import { localWorkers, writeLocalJob } from '../support/local-job';
import { TEST_ADDRESS, TEST_HOST_ID } from '../support/temporal';
import { testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

const suffix = randomBytes(3).toString('hex');
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

async function localJob(name: string, attempts: number, execute?: string): Promise<JobConfig & { dir: string }> {
  const jobFile = await writeLocalJob({ name, attempts, concurrency: 4, ...(execute ? { execute } : {}) });
  const dir = path.dirname(jobFile);
  return {
    dir,
    name,
    jobs_dir: path.join(dir, 'jobs'),
    n_attempts: attempts,
    n_concurrent_trials: 4,
    environment: { type: 'local' },
    agents: [{ name: 'echo', execute: execute ?? 'echo ok > answer.txt' }],
    datasets: [{ path: path.join(dir, 'tasks') }],
  };
}

describe('library API', () => {
  let rollout: Rollout;
  before(async () => {
    const { connection } = await testTemporal();
    await connection.close();
    rollout = await Rollout.connect({
      address: TEST_ADDRESS,
      worker: { environmentTypes: ['local'], hostId: TEST_HOST_ID, maxTrials: 4 },
    });
  });
  after(() => rollout.close());

  it('submits a job from a config object and streams each result as it finishes', async () => {
    const { dir: _dir, ...config } = await localJob(`api-stream-${suffix}`, 6);
    const job = await rollout.submitJob(config);
    const seen: string[] = [];
    for await (const result of job.results()) {
      assert.deepEqual(result.rewards, { reward: 1 });
      seen.push(result.trial_name);
    }
    assert.equal(new Set(seen).size, 6);
    const final = await job.result();
    assert.equal(final.status, 'completed');
    assert.equal(final.n_completed_trials, 6);
  });

  it('rejects a bad config with the same one-line problems as job.yaml', async () => {
    const { dir: _dir, ...config } = await localJob(`api-bad-${suffix}`, 1);
    await assert.rejects(
      rollout.submitJob({ ...config, n_attempts: 0, agents: [{ name: 'nobody' }] }),
      (err: unknown) =>
        err instanceof InputError &&
        /n_attempts: Too small/.test(err.message) &&
        /agents\.0\.execute: unknown agent "nobody"/.test(err.message)
    );
  });

  it('throws InputError naming the field for a job without a name, and starts nothing', async () => {
    const { dir, ...config } = await localJob(`api-unnamed-${suffix}`, 1);
    const { name: _name, ...unnamed } = config;
    await assert.rejects(rollout.submitJob(unnamed as JobConfig), (err: unknown) => {
      assert.ok(err instanceof InputError);
      assert.deepEqual(err.problems, [
        { file: 'submitJob config', field: 'name', message: 'required (it names the job and its folder)' },
      ]);
      assert.equal(err.message, 'submitJob config: name: required (it names the job and its folder)');
      assert.equal(formatProblem(err.problems[0]!), err.message);
      return true;
    });
    assert.equal(existsSync(path.join(dir, 'jobs')), false);
  });

  it("runs the spec's `name: Job name`: the name kept everywhere, its folder derived without collisions", async () => {
    const { dir: _dir, ...config } = await localJob(`api-named-${suffix}`, 1);
    const name = `Job name ${suffix}`;
    const job = await rollout.submitJob({ ...config, name });
    const result = await job.result();
    assert.equal(result.status, 'completed');
    assert.equal(result.job_name, name);
    assert.equal(path.basename(job.dir), `Job_name_${suffix}~${sha256(name).slice(0, 8)}`);
    const saved = JSON.parse(await readFile(path.join(job.dir, 'config.json'), 'utf8')) as { name: string };
    assert.equal(saved.name, name);
    const trials = await rollout.client.workflow.count(`RolloutJob = "${name}" AND WorkflowType = "trialWorkflow"`);
    assert.equal(trials.count, 1);
    // The name its folder would have without the hash is another job, in another folder.
    const twin = await rollout.submitJob({ ...config, name: `Job_name_${suffix}` });
    await twin.result();
    assert.equal(path.basename(twin.dir), `Job_name_${suffix}`);
    assert.notEqual(twin.dir, job.dir);
  });

  it('cancels a running job and keeps what finished', async () => {
    const { dir: _dir, ...config } = await localJob(`api-cancel-${suffix}`, 3, 'sleep 30; echo ok > answer.txt');
    const job = await rollout.submitJob(config);
    for (let i = 0; i < 100 && (await job.progress()).running === 0; i++) await new Promise((r) => setTimeout(r, 100));
    // A trainer bumps the policy version mid-job (docs/rl.md): applied by the job, as `rollout ctl` would.
    assert.equal((await job.setPolicyVersion(7)).policy_version, 7);
    await assert.rejects(
      job.setPolicyVersion(-1),
      /setPolicyVersion: version: policy-version must be a whole number from 0, not -1/
    );
    const final = await job.cancel();
    assert.equal(final.status, 'cancelled');
    assert.equal(final.completed, 0);
  });

  it('runs a single trial, idempotent on its id', async () => {
    const { dir } = await localJob(`api-trial-${suffix}`, 1);
    const request = {
      task: path.join(dir, 'tasks', 'trivial'),
      agent: { name: 'echo', execute: 'echo ok > answer.txt' },
      job: `api-trials-${suffix}`,
      jobsDir: path.join(dir, 'jobs'),
      environment: 'local' as const,
      id: 'one',
    };
    const first = await rollout.submitTrial(request);
    const second = await rollout.submitTrial(request);
    assert.equal(first.spec.trialId, second.spec.trialId);
    const result = await second.result();
    assert.deepEqual(result.rewards, { reward: 1 });
    assert.equal(result.trial_name, 'trivial__one');
    const runs = await rollout.client.workflow.count(`WorkflowId = "${first.spec.trialId}"`);
    assert.equal(runs.count, 1);
  });
});

describe('library API across a consumer restart', () => {
  it('delivers the results of trials that finished while the consumer was down, each once', async () => {
    const workers = await localWorkers({ hostId: `${TEST_HOST_ID}-api`, maxTrials: 4 });
    const running = Promise.all(workers.workers.map((w) => w.run()));
    try {
      const { dir: _dir, ...config } = await localJob(`api-restart-${suffix}`, 8, 'sleep 0.3; echo ok > answer.txt');
      const first = await Rollout.connect({ address: TEST_ADDRESS, worker: false });
      const job = await first.submitJob(config);
      const taken: string[] = [];
      for await (const result of job.results({ consumer: 'trainer' })) {
        taken.push(result.trial_name);
        if (taken.length === 2) break;
      }
      await first.close();
      // Down while the job finishes.
      const { client, connection } = await testTemporal();
      await client.workflow.getHandle(job.workflowId).result();
      await connection.close();

      const second = await Rollout.connect({ address: TEST_ADDRESS, worker: false });
      const rest: string[] = [];
      for await (const result of (await second.job(config.name)).results({ consumer: 'trainer' })) {
        rest.push(result.trial_name);
      }
      await second.close();
      // The second one taken was not acknowledged (its loop broke before asking for the next): delivered again.
      assert.equal(rest.length, 7, rest.join(','));
      assert.ok(rest.includes(taken[1]!));
      assert.ok(!rest.includes(taken[0]!));
      assert.equal(new Set([...taken, ...rest]).size, 8);
      const delivered = (await readFile(path.join(job.dir, 'delivered', 'trainer.jsonl'), 'utf8')).trim().split('\n');
      assert.equal(delivered.length, 8);
    } finally {
      for (const worker of workers.workers) worker.shutdown();
      await running;
      await workers.connection.close();
    }
  });

  it("delivers, in the trainer's next process, the results of trials that finished after its last was killed", async () => {
    const workers = await localWorkers({ hostId: `${TEST_HOST_ID}-api`, maxTrials: 4 });
    const running = Promise.all(workers.workers.map((w) => w.run()));
    try {
      // Two waves of four trials: the consumer is killed during the first, the second finishes while none runs.
      const { dir: _dir, ...config } = await localJob(`api-kill-${suffix}`, 8, 'sleep 2; echo ok > answer.txt');
      const submitter = await Rollout.connect({ address: TEST_ADDRESS, worker: false });
      const job = await submitter.submitJob(config);
      await submitter.close();
      const consumerArgs = [
        path.join(__dirname, '..', 'support', 'results-consumer.js'),
        TEST_ADDRESS,
        config.name,
        'rl',
      ];
      const first = spawn(process.execPath, consumerArgs, { stdio: ['ignore', 'pipe', 'inherit'] });
      let printed = '';
      first.stdout.on('data', (chunk: Buffer) => (printed += chunk.toString()));
      const exited = new Promise((resolve) => first.once('exit', resolve));
      await waitFor('the first result in the consumer process', () => printed.includes('\n'), 120_000);
      first.kill('SIGKILL');
      await exited;
      const taken = printed.trim().split('\n');
      assert.ok(taken.length < 8, `the killed consumer had every result already: ${taken.join()}`);
      const { client, connection } = await testTemporal();
      await client.workflow.getHandle(job.workflowId).result();
      await connection.close();

      const { stdout } = await promisify(execFile)(process.execPath, consumerArgs, { timeout: 120_000 });
      const rest = stdout.trim().split('\n');
      // At least once: every result the killed process went past was acknowledged; only its last may come again.
      assert.equal(new Set(rest).size, rest.length, rest.join());
      assert.ok(
        taken.slice(0, -1).every((name) => !rest.includes(name)),
        `redelivered: ${taken.join()} / ${rest.join()}`
      );
      assert.equal(new Set([...taken, ...rest]).size, 8);
    } finally {
      for (const worker of workers.workers) worker.shutdown();
      await running;
      await workers.connection.close();
    }
  });
});
