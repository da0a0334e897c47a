/**
 * A trial's result is written once; a verifier never scores the same attempt twice. The worker process (`rollout
 * worker`, workflows and the local environment's steps in one process) is killed with SIGKILL after the verifier
 * scored, while the trial's later steps run and before Temporal recorded the verify step's end: its rerun on the
 * same host replays the trial and retries the step, which must keep the recorded score, not run tests/test.sh again
 * (the test's test.sh appends a line to a counter file on the host each time it runs). Real Temporal and CLI; the
 * local environment's sandboxes are host folders.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import { writeTrialResult } from '../../activities/results';
import { jobFiles } from '../../src/results/files';
import type { TrialResult } from '../../src/results/trial-result';
import { trialLayout } from '../../src/contracts/paths';
import { startCli } from '../support/cli';
import { submitJob, writeLocalJob } from '../support/local-job';
import { REPO_ROOT, testTemporal } from '../support/temporal';
import { within } from '../support/wait';

let client: Client;
let connection: Connection;
const workers: ReturnType<typeof startCli>[] = [];
/** Scratch folders (the padding is 200 MB): removed at the end. */
const scratchDirs: string[] = [];

function startWorker(hostId: string, leaseDir: string) {
  const worker = startCli(['worker', '--env', 'local', '--host-id', hostId, '--max-trials', '2'], {
    cwd: REPO_ROOT,
    env: { ROLLOUT_LEASE_DIR: leaseDir },
  });
  workers.push(worker);
  return worker;
}

async function textOf(file: string): Promise<string> {
  return readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return '';
    throw err;
  });
}

describe('score once, write once (worker killed with SIGKILL)', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    for (const worker of workers) if (worker.exitCode === null) worker.kill('SIGKILL');
    await connection.close();
    for (const dir of scratchDirs) await rm(dir, { recursive: true, force: true });
  });

  it('a worker killed after the verifier scored: the rerun keeps the score, test.sh ran once', async () => {
    const name = `once-${randomBytes(3).toString('hex')}`;
    const scratch = await mkdtemp(path.join(tmpdir(), 'score-once-'));
    const counter = path.join(scratch, 'verifier-runs.txt');
    // The padding makes collect (the step after verify, in the same workflow task) take a while: the kill lands
    // after the score was recorded and before Temporal learnt the verify step ended.
    const jobFile = await writeLocalJob({
      name,
      attempts: 1,
      concurrency: 1,
      test: [
        `echo "$PWD" >> ${counter}`,
        'head -c 200000000 /dev/zero > "$ROLLOUT_LOGS_DIR/verifier/padding.bin"',
        'echo 1 > "$ROLLOUT_LOGS_DIR/verifier/reward.txt"',
        '',
      ].join('\n'),
    });
    scratchDirs.push(scratch, path.dirname(jobFile));
    const hostId = `${name}-host`;
    const leaseDir = await mkdtemp(path.join(tmpdir(), 'leases-'));
    const first = startWorker(hostId, leaseDir);
    const { handle, plan } = await submitJob(client, jobFile, { hostLostTimeoutSec: 600 });
    const trialDir = jobFiles.trialDir(plan.jobDir, plan.trials[0]!.spec.trialName);
    const runs = trialLayout(trialDir).verifierRuns;
    // Polled often: the window between the recorded score and the end of the trial is the collect of the padding.
    const deadline = Date.now() + 120_000;
    while (!(await textOf(runs)).includes('"scored"')) {
      assert.ok(Date.now() < deadline, 'the verifier scored within 120 s');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    first.kill('SIGKILL');
    await first.output;
    assert.equal((await textOf(trialLayout(trialDir).result)) === '', true, 'killed before result.json');

    startWorker(hostId, leaseDir);
    const final = await within(180_000, 'the job to finish after the rerun', handle.result());
    assert.equal(final.completed, 1, JSON.stringify(final.errorsByType));

    const lines = (await textOf(counter)).split('\n').filter(Boolean);
    assert.equal(lines.length, 1, `test.sh ran ${lines.length} times: ${lines.join(', ')}`);
    const result = JSON.parse(await textOf(trialLayout(trialDir).result)) as TrialResult;
    assert.deepEqual(result.rewards, { reward: 1 });
    assert.equal(result.restarts, 0, 'the same sandbox, not a restart');
    const log = await textOf(trialLayout(trialDir).log);
    assert.match(log, /already scored .*kept, not run again/, log);
    const records = (await textOf(runs)).split('\n').filter(Boolean);
    assert.equal(records.filter((line) => line.includes('"started"')).length, 1, records.join('\n'));

    // result.json is written once per run: the result step retried after a worker died past its write (here: called
    // again with another outcome) keeps the first; another run of the trial (a later start) writes its own.
    const spec = plan.trials[0]!.spec;
    const late = { ...result, rewards: null, error: { type: 'InfrastructureError', message: 'late', step: 'verify' } };
    await writeTrialResult({ spec, result: late as TrialResult });
    const kept = JSON.parse(await textOf(trialLayout(trialDir).result)) as TrialResult;
    assert.deepEqual([kept.rewards, kept.error], [{ reward: 1 }, null]);
    assert.match(await textOf(trialLayout(trialDir).log), /already written for this run: kept/);
    await writeTrialResult({ spec, result: { ...late, started_at: new Date().toISOString() } as TrialResult });
    const replaced = JSON.parse(await textOf(trialLayout(trialDir).result)) as TrialResult;
    assert.equal(replaced.error?.message, 'late');
  });
});
