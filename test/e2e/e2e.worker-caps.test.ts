/**
 * A worker re-checks each trial against its own caps (worker.yaml `max_*`) before it starts an environment, whatever
 * the client that planned the job allowed: a job submitted with `--no-worker` from elsewhere, over this worker's
 * memory cap, starts no container here and ends unscored (an infrastructure error naming the cap), never as the
 * agent's failure. Real `rollout worker` process, Docker, Temporal.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Connection } from '@temporalio/client';

import { LABEL_JOB } from '../../src/contracts/environment';
import type { TrialResult } from '../../src/results/trial-result';
import { startCli, workspace } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';
import { within } from '../support/wait';

const run = randomBytes(3).toString('hex');
const name = `worker-caps-${run}`;
const started: ReturnType<typeof startCli>[] = [];
let connection: Connection;

describe("rollout worker: its caps hold whatever the job's planner allowed", () => {
  // The test's Temporal server (started on first use), which the CLI processes reach through TEMPORAL_ADDRESS.
  before(async () => {
    connection = (await testTemporal()).connection;
  });
  after(async () => {
    await connection.close();
    for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
    await removeJobLeftovers(name);
  });

  it('refuses a trial over its max_memory before any container starts; the trial is not scored', async () => {
    const since = new Date().toISOString();
    const dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    // hello-world asks for 512Mi; the job raises its own cap, which binds only where it was planned.
    const job = ['environment:', '  type: docker', '  max_memory: 64Gi', 'agents:', '  - name: oracle', 'datasets:'];
    await writeFile(path.join(dir, 'job.yaml'), [`name: ${name}`, ...job, '  - path: tasks', ''].join('\n'));
    const workerYaml = path.join(dir, 'worker.yaml');
    await writeFile(workerYaml, 'max_memory: 256Mi\n');
    const worker = startCli(['worker', '--host-id', `caps-${run}`, '--max-trials', '1', '--config', workerYaml], {
      cwd: dir,
    });
    started.push(worker);
    const submitted = startCli(['job.yaml', '--no-worker'], { cwd: dir });
    started.push(submitted);
    const jobRun = await within(240_000, 'the job', submitted.output).catch(async (err: unknown) => {
      submitted.kill('SIGKILL');
      throw new Error(`${(err as Error).message}; its output: ${(await submitted.output).stderr.slice(-3000)}`);
    });
    const jobDir = path.join(dir, 'jobs', name);
    const trials = (await readdir(jobDir, { withFileTypes: true })).filter((entry) => entry.isDirectory());
    assert.equal(trials.length, 1, jobRun.stderr);
    const result = JSON.parse(await readFile(path.join(jobDir, trials[0]!.name, 'result.json'), 'utf8')) as TrialResult;
    assert.equal(result.error?.type, 'InfrastructureError', JSON.stringify(result.error));
    assert.equal(result.error?.step, 'start');
    assert.match(
      result.error?.message ?? '',
      new RegExp(
        `this worker refuses the trial: environment\\.memory: 512 MiB of memory is over this worker's cap \\(${workerYaml.replace(/[.]/g, '\\.')} max_memory = 256 MiB\\)`
      )
    );
    assert.equal(result.rewards, null, 'not scored');
    // Docker's own record: no container of this job was ever created (a start refused after creating one would show).
    const created = execFileSync(
      'docker',
      ['events', '--since', since, '--until', new Date().toISOString(), '--filter', 'type=container'],
      { encoding: 'utf8', timeout: 30_000 }
    );
    assert.equal(created.includes(`${LABEL_JOB}=${name}`), false, created);
    assert.deepEqual(await containersOfJob(name), []);
    worker.kill('SIGTERM');
    assert.equal((await within(60_000, 'the worker to exit', worker.output)).code, 0);
  });
});
