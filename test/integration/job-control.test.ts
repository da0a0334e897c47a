/**
 * Live control (`rollout ctl`) of a running job: pause, resume and concurrency N through the real CLI, observed on a
 * job whose trials wait for a gate file (local environment, real Temporal, real workers in this process). The
 * control outlives the workers (replayed from the Job's history by new ones) and shows in `rollout status`, the
 * job's result.json and the workflow's memo (the Temporal UI). Bad input is one line, exit 2.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection, WorkflowHandle } from '@temporalio/client';
import type { NativeConnection, Worker } from '@temporalio/worker';

import { jobFiles } from '../../src/results/files';
import type { JobResult } from '../../src/results/job-result';
import type { JobProgress } from '../../workflows/messages';
import { jobProgressQuery } from '../../workflows/messages';
import { runCli } from '../support/cli';
import { recordHistory } from '../support/histories';
import { localWorkers, submitJob, writeLocalJob } from '../support/local-job';
import { testTemporal } from '../support/temporal';
import { waitFor, within } from '../support/wait';

const TRIALS = 6;

describe('live control of a running job (rollout ctl)', () => {
  let client: Client;
  let connection: Connection;
  let gates: string;
  let workerSet: { connection: NativeConnection; workers: Worker[]; running: Promise<unknown> } | undefined;

  async function startWorkers(hostId: string): Promise<void> {
    const set = await localWorkers({ hostId, maxTrials: TRIALS });
    workerSet = { ...set, running: Promise.all(set.workers.map((w) => w.run())) };
  }
  async function stopWorkers(): Promise<void> {
    if (!workerSet) return;
    for (const worker of workerSet.workers) if (worker.getState() === 'RUNNING') worker.shutdown();
    await workerSet.running;
    await workerSet.connection.close();
    workerSet = undefined;
  }

  before(async () => {
    ({ client, connection } = await testTemporal());
    gates = await mkdtemp(path.join(tmpdir(), 'rollout-ctl-gates-'));
  });
  after(async () => {
    await stopWorkers();
    await connection.close();
    await rm(gates, { recursive: true, force: true });
  });

  const ctl = (name: string, ...args: string[]) => runCli(['ctl', name, ...args], { cwd: gates, timeoutMs: 60_000 });
  const progress = (handle: WorkflowHandle) => handle.query(jobProgressQuery);
  const until = async (handle: WorkflowHandle, what: string, check: (p: JobProgress) => boolean) => {
    let last: JobProgress | undefined;
    await waitFor(`${what} (last: ${JSON.stringify(last && { ...last, evals: undefined })})`, async () =>
      check((last = await progress(handle)))
    );
    return last!;
  };

  it('pause lets running trials finish and starts none; concurrency N and resume apply live; all kept across a worker restart', async () => {
    const name = `ctl-${randomBytes(3).toString('hex')}`;
    const go = path.join(gates, 'go');
    // Each trial holds its slot until the gate file exists.
    const jobFile = await writeLocalJob({
      name,
      attempts: TRIALS,
      concurrency: 2,
      execute: `while [ ! -f ${go} ]; do sleep 0.1; done; echo ok > answer.txt`,
    });
    await startWorkers(`ctl-a-${name}`);
    const { handle, plan } = await submitJob(client, jobFile);
    await until(handle, 'two trials running', (p) => p.running === 2);

    const paused = await ctl(name, 'pause');
    assert.equal(paused.code, 0, paused.stderr);
    assert.match(paused.stdout, /paused/);
    await writeFile(go, '');
    // The window starts the next trial in the workflow task that counts a finished one: had the pause not held,
    // a trial would be running by the time both are counted.
    const drained = await until(handle, 'both running trials finished', (p) => p.finished === 2);
    assert.equal(drained.running, 0);
    assert.deepEqual(drained.control, { paused: true, concurrency: 2 });
    await rm(go);

    // New workers replay the job from its history: the control is there.
    await stopWorkers();
    await startWorkers(`ctl-b-${name}`);
    assert.deepEqual((await progress(handle)).control, { paused: true, concurrency: 2 });
    const { memo } = await handle.describe();
    assert.deepEqual(memo?.control, { paused: true, concurrency: 2 });
    const status = await runCli(['status', name], { cwd: gates, timeoutMs: 60_000 });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /paused .*concurrency 2/);
    await waitFor('result.json showing the pause', async () => {
      const result = JSON.parse(await readFile(jobFiles.result(plan.jobDir), 'utf8')) as JobResult;
      return result.control?.paused === true;
    });

    const raised = await ctl(name, 'concurrency', '3');
    assert.equal(raised.code, 0, raised.stderr);
    assert.match(raised.stdout, /concurrency 3/);
    assert.equal((await progress(handle)).running, 0, 'still paused: concurrency started nothing');

    const resumed = await ctl(name, 'resume');
    assert.equal(resumed.code, 0, resumed.stderr);
    const wide = await until(handle, 'three trials running after resume', (p) => p.running === 3);
    assert.equal(wide.finished, 2);

    const lowered = await ctl(name, 'concurrency', '1');
    assert.equal(lowered.code, 0, lowered.stderr);
    await writeFile(go, '');
    const final = await within(120_000, 'the job to complete', handle.result());
    await recordHistory(client, handle.workflowId, 'job-controlled');
    assert.equal(final.completed, TRIALS);
    assert.equal(final.meanReward, 1);
    assert.deepEqual(final.control, { paused: false, concurrency: 1 });
    const result = JSON.parse(await readFile(jobFiles.result(plan.jobDir), 'utf8')) as JobResult;
    assert.deepEqual(result.control, { paused: false, n_concurrent_trials: 1 });

    // A finished job takes no more control.
    const late = await ctl(name, 'pause');
    assert.equal(late.code, 2);
    assert.match(late.stderr.trim(), /^error: .*not running \(completed\)$/);
  });

  it('bad input is one line, exit 2, before anything is sent: a bad N, an unknown action, no such job', async () => {
    const cases: [string[], RegExp][] = [
      [['concurrency', '0'], /concurrency must be a whole number from 1 to 10000, not 0$/],
      [['concurrency', 'many'], /concurrency must be a whole number from 1 to 10000, not NaN$/],
      [['concurrency'], /takes one number: concurrency <n>$/],
      [['pause', 'now'], /pause: takes no arguments \(got now\)$/],
      [['policy-version', '-1'], /policy-version must be a whole number from 0, not -1$/],
      [['policy-version', '1.5'], /policy-version must be a whole number from 0, not 1\.5$/],
      [
        ['frobnicate'],
        /frobnicate: unknown action \(one of: pause, resume, concurrency, policy-version, budget\b[^)]*\)$/,
      ],
    ];
    // The unknown action's list is the help's: every action `ctl --help` lists (budget too) is named.
    const help = await ctl('--help');
    const listed = [...help.stdout.split('\nActions:\n')[1]!.matchAll(/^ {2}(\S+)/gm)].map((match) => match[1]!);
    assert.ok(listed.includes('budget'), help.stdout);
    const unknown = await ctl('no-such-job', 'frobnicate');
    for (const action of listed) assert.match(unknown.stderr, new RegExp(`[(, ]${action}[,)]`), action);
    for (const [args, message] of cases) {
      const run = await ctl('no-such-job', ...args);
      assert.equal(run.code, 2, run.stderr);
      const lines = run.stderr.trim().split('\n');
      assert.equal(lines.length, 1, run.stderr);
      assert.match(lines[0]!, message);
    }
    const missing = await ctl(`no-such-job-${randomBytes(3).toString('hex')}`, 'pause');
    assert.equal(missing.code, 2);
    assert.match(missing.stderr.trim(), /^error: no-such-job-\w+: no such job on this Temporal server$/);
  });
});
