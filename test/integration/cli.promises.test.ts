/**
 * What the README promises of the CLI, on a real Temporal server with the `local` environment (no containers):
 * usage errors exit 2; `rollout status <job>` after the CLI was killed still shows counts and metrics; a trial
 * cancelled during execute says so; after a cancel the table's errors agree with the summary; `rollout jobs` has a
 * header and tells a cancelled job from a completed one.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import { runningTrialSteps } from '../../src/cli/inspect';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, startCli } from '../support/cli';
import { writeLocalJob } from '../support/local-job';
import { REPO_ROOT, testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

describe('CLI usage errors', () => {
  it('exit 2 (invalid input) for an unknown option, a mistyped command and a missing argument; --help exits 0', async () => {
    const cwd = path.resolve('.');
    for (const args of [['--bogus'], ['agents', 'lsit'], ['status'], ['jobs', '--nope']]) {
      const run = await runCli(args, { cwd });
      assert.equal(run.code, 2, `rollout ${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stderr, /^error: /);
    }
    assert.equal((await runCli(['--help'], { cwd })).code, 0);
  });
});

/** A local job of two trials, one at a time: the first finishes at once, the second runs until it is cancelled. */
async function twoTrialJob(name: string): Promise<{ jobFile: string; cwd: string; jobDir: string }> {
  const marker = path.join(tmpdir(), `${name}-first-done`);
  const jobFile = await writeLocalJob({
    name,
    attempts: 2,
    concurrency: 1,
    execute: `'if [ -e ${marker} ]; then sleep 120; else touch ${marker}; fi; echo ok > answer.txt'`,
  });
  const cwd = path.dirname(jobFile);
  return { jobFile, cwd, jobDir: path.join(cwd, 'jobs', name) };
}

describe('a job cancelled, or left without its CLI', () => {
  let client: Client;
  let connection: Connection;
  before(async () => ({ client, connection } = await testTemporal()));
  after(() => connection.close());

  const secondInExecute = (name: string, jobDir: string) =>
    waitFor('one trial finished and the other in execute', async () => {
      const steps = await runningTrialSteps(client, name);
      const result = JSON.parse(await readFile(path.join(jobDir, 'result.json'), 'utf8').catch(() => '{}')) as {
        n_finished_trials?: number;
      };
      return result.n_finished_trials === 1 && steps.some((s) => s.step === 'execute');
    });

  it('records the step a cancelled trial was in, and the errors column agrees with the summary', async () => {
    const name = `cancelled-${randomBytes(3).toString('hex')}`;
    const { jobFile, cwd, jobDir } = await twoTrialJob(name);
    const cli = startCli([jobFile], { cwd });
    await secondInExecute(name, jobDir);
    const cancel = await runCli(['cancel', name, '--no-worker'], { cwd });
    assert.equal(cancel.code, 0, cancel.stderr);
    const run = await cli.output;
    assert.equal(run.code, 1, run.stderr);
    // n 1, trials 2, errors 0 (a cancellation is not an error), mean 1.
    assert.match(run.stdout, /^echo\s+tasks\s+reward\s+1\s+2\s+0\s+1\s/m);
    assert.match(run.stdout, /trials: 2 total, 1 completed, 0 errored, 0 infrastructure errors, 1 cancelled/);
    const cancelled = JSON.parse(
      await readFile(path.join(jobDir, 'trivial__echo__2', 'result.json'), 'utf8')
    ) as TrialResult;
    assert.equal(cancelled.error?.type, 'CancelledError');
    assert.equal(cancelled.error?.step, 'execute');
    const job = JSON.parse(await readFile(path.join(jobDir, 'result.json'), 'utf8')) as JobResult;
    assert.equal(job.evals['echo__tasks']?.n_errors, 0);
    // Every key of both result files is documented.
    const documented = await readFile(path.join(REPO_ROOT, 'docs', 'results.md'), 'utf8');
    const trialKeys = Object.keys(
      JSON.parse(await readFile(path.join(jobDir, 'trivial__echo__1', 'result.json'), 'utf8')) as object
    );
    for (const key of [...Object.keys(job), ...trialKeys])
      assert.ok(documented.includes(`\`${key}\``), `${key} is not in docs/results.md`);
    // A trial that ran once, with no model calls, has no earlier runs to keep; its sandbox record names its container
    // and its verifier record the one scored run (docs/results.md).
    assert.deepEqual((await readdir(path.join(jobDir, 'trivial__echo__1'))).sort(), [
      'agent',
      'result.json',
      'sandboxes.jsonl',
      'trial.log',
      'verifier',
      'verifier-runs.jsonl',
    ]);

    const jobs = await runCli(['jobs'], { cwd });
    assert.equal(jobs.code, 0, jobs.stderr);
    assert.match(jobs.stdout, /^job\s+status\s+started\s+took\n─/);
    assert.match(jobs.stdout, new RegExp(`^${name}\\s+cancelled\\s`, 'm'));
  });

  it('`rollout status <job>` after the CLI was killed shows the counts and metrics so far', async () => {
    const name = `orphaned-${randomBytes(3).toString('hex')}`;
    const { jobFile, cwd, jobDir } = await twoTrialJob(name);
    const cli = startCli([jobFile], { cwd });
    await secondInExecute(name, jobDir);
    cli.kill('SIGKILL');
    await cli.output;

    const status = await runCli(['status', name], { cwd });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /no worker answered/);
    assert.match(status.stdout, new RegExp(`job ${name}: running · 1/2 finished`));
    assert.match(status.stdout, /^echo\s+tasks\s+reward\s+1\s+1\s+0\s+1\s/m);
    assert.match(status.stdout, /trials: 2 total, 1 completed, 0 errored/);
    assert.match(status.stdout, new RegExp(`^  ${name}/trivial__echo__2  `, 'm'));
    assert.equal((await runCli(['cancel', name], { cwd })).code, 0);
  });
});
