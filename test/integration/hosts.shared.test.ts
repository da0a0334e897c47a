/**
 * Several Rollouts on one Docker host: processes sharing a host id, and Rollouts on other Temporal servers, coexist.
 * Each process leases a queue of its own; a janitor removes only what its own deployment owns and no trial still
 * uses (another host's of the deployment only once its trial no longer runs). Real Docker, real Temporal, the real CLI.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import Docker from 'dockerode';

import { DockerEnvironment } from '../../src/environments/docker';
import { LABEL_DEPLOYMENT, LABEL_HOST, LABEL_JOB, LABEL_TRIAL, LABEL_WORKER } from '../../src/contracts/environment';
import { jobFiles } from '../../src/results/files';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import { deploymentId } from '../../src/temporal/deployment';
import { hostQueue } from '../../src/contracts/queues';
import type { TrialSpec } from '../../src/contracts/trial';
import { leaseWorkerId } from '../../workers/host-lease';
import { removeAbandonedEnvironments } from '../../workers/janitor';
import { trialStateQuery } from '../../workflows/messages';
import { runCli, startCli } from '../support/cli';
import { runningTrialSteps } from '../../src/cli/inspect';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { writeLocalJob } from '../support/local-job';
import { TEST_ADDRESS, testTemporal } from '../support/temporal';
import { waitFor, within } from '../support/wait';

const docker = new Docker();
const run = randomBytes(3).toString('hex');
const jobName = `hosts-${run}`;
const hostId = `hosts-host-${run}`;
const deployment = deploymentId(TEST_ADDRESS, 'default');
let client: Client;
let connection: Connection;

async function leftover(
  trialId: string,
  labels: { host?: string; deployment?: string | null; worker?: string } = {}
): Promise<void> {
  const container = await docker.createContainer({
    Image: 'debian:bookworm-slim',
    Entrypoint: ['sleep', 'infinity'],
    Labels: {
      [LABEL_JOB]: jobName,
      [LABEL_TRIAL]: trialId,
      [LABEL_HOST]: labels.host ?? hostId,
      ...(labels.deployment === null ? {} : { [LABEL_DEPLOYMENT]: labels.deployment ?? deployment }),
      ...(labels.worker ? { [LABEL_WORKER]: labels.worker } : {}),
    },
  });
  await container.start();
}

async function keptTrials(): Promise<string[]> {
  return (await containersOfJob(jobName)).map((c) => c.Labels[LABEL_TRIAL] ?? '').sort();
}

describe('several Rollouts on one host', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
    await removeJobLeftovers(jobName);
  });

  it('two `rollout job.yaml` processes started at once with one host id both finish', async () => {
    const names = [`shared-a-${run}`, `shared-b-${run}`];
    const files = await Promise.all(
      names.map((name) =>
        writeLocalJob({ name, attempts: 6, concurrency: 2, execute: 'sleep 0.5; echo ok > answer.txt' })
      )
    );
    const env = { ROLLOUT_HOST_ID: `shared-${run}` };
    const runs = await Promise.all(
      files.map((file) => runCli([path.basename(file)], { cwd: path.dirname(file), env, timeoutMs: 180_000 }))
    );
    for (const result of runs) assert.equal(result.code, 0, result.stderr);
    const queues = new Set<string>();
    for (const [index, file] of files.entries()) {
      const jobDir = path.join(path.dirname(file), 'jobs', names[index]!);
      const job = JSON.parse(await readFile(jobFiles.result(jobDir), 'utf8')) as JobResult;
      assert.equal(job.n_completed_trials, 6);
      for (let attempt = 1; attempt <= 6; attempt++) {
        const trial = JSON.parse(
          await readFile(jobFiles.trialResult(jobDir, `trivial__echo__${attempt}`), 'utf8')
        ) as TrialResult;
        queues.add(trial.host ?? '');
      }
    }
    for (const queue of queues) {
      assert.ok([`rollout-local@shared-${run}`, `rollout-local@shared-${run}~2`].includes(queue), queue);
    }
  });

  it('a CLI whose job is done stays until the trials of another job its worker runs have ended', async () => {
    const [first, second] = [`drain-a-${run}`, `drain-b-${run}`];
    const firstFile = await writeLocalJob({
      name: first,
      attempts: 1,
      concurrency: 1,
      execute: 'sleep 4; echo ok > answer.txt',
    });
    const secondFile = await writeLocalJob({
      name: second,
      attempts: 2,
      concurrency: 2,
      execute: 'sleep 12; echo ok > answer.txt',
    });
    const env = { ROLLOUT_HOST_ID: `drain-${run}` };
    const firstCli = startCli([path.basename(firstFile), '--max-trials', '4'], { cwd: path.dirname(firstFile), env });
    await waitFor('the first job running its agent', async () =>
      (await runningTrialSteps(client, first)).some((trial) => trial.step === 'execute')
    );
    // The second job brings no worker: its trials can only run on the first CLI's.
    const secondCli = startCli([path.basename(secondFile), '--no-worker'], { cwd: path.dirname(secondFile), env });
    await waitFor('both trials of the second job running their agent', async () => {
      const steps = await runningTrialSteps(client, second);
      return steps.length === 2 && steps.every((trial) => trial.step === 'execute');
    });
    const firstRun = await within(120_000, 'the first CLI', firstCli.output);
    assert.equal(firstRun.code, 0, firstRun.stderr);
    assert.match(firstRun.stderr, /waiting for 2 trial\(s\) of other jobs/);
    // Its worker ran the second job's trials, but a job's CLI prints only its own job's trial lines.
    assert.match(firstRun.stderr, new RegExp(`trial .*\\(workflow ${first}/`));
    assert.doesNotMatch(firstRun.stderr, new RegExp(`\\(workflow ${second}/`));
    const secondRun = await within(120_000, 'the second CLI', secondCli.output);
    assert.equal(secondRun.code, 0, secondRun.stderr);
    const jobDir = path.join(path.dirname(secondFile), 'jobs', second);
    for (const attempt of [1, 2]) {
      const trial = JSON.parse(
        await readFile(jobFiles.trialResult(jobDir, `trivial__echo__${attempt}`), 'utf8')
      ) as TrialResult;
      assert.deepEqual(trial.rewards, { reward: 1 });
      assert.equal(trial.restarts, 0, 'ran to the end on the worker that started it');
    }
  });

  it('leases each live process its own worker id, and takes over the lease of a dead one', async () => {
    process.env.ROLLOUT_LEASE_DIR = await mkdtemp(path.join(tmpdir(), 'rollout-leases-'));
    try {
      const first = await leaseWorkerId('lease-host', 'dep');
      const second = await leaseWorkerId('lease-host', 'dep');
      const otherServer = await leaseWorkerId('lease-host', 'other-dep');
      assert.deepEqual(
        [first.workerId, second.workerId, otherServer.workerId],
        ['lease-host', 'lease-host~2', 'lease-host']
      );
      await first.release();
      assert.equal((await leaseWorkerId('lease-host', 'dep')).workerId, 'lease-host');
      // A crashed process's lease: its pid no longer runs.
      const child = execFile(process.execPath, ['-e', '0']);
      await new Promise((resolve) => child.once('exit', resolve));
      const dead = path.join(process.env.ROLLOUT_LEASE_DIR, `dep-${encodeURIComponent('lease-host~3')}.pid`);
      await writeFile(dead, `${child.pid}\n`);
      assert.equal((await leaseWorkerId('lease-host', 'dep')).workerId, 'lease-host~3');
      await second.release();
      await otherServer.release();
    } finally {
      delete process.env.ROLLOUT_LEASE_DIR;
    }
  });

  it("removes only its own deployment's containers of trials that are gone", async () => {
    const running = `${jobName}/running`;
    await client.workflow.start('trialWorkflow', {
      workflowId: running,
      taskQueue: `nobody-polls-${jobName}`,
      args: [],
    });
    await leftover(`${jobName}/gone`);
    await leftover(running);
    // Another host of this deployment sharing the daemon (gone for good): its trial gone, and its trial running.
    await leftover(`${jobName}/elsewhere`, { host: 'another-host' });
    await leftover(running, { host: 'another-host' });
    // A Rollout on another Temporal server (which knows none of our trials) on this host, with this host id.
    await leftover(`${jobName}/foreign`, { deployment: 'another-server' });
    await leftover(`${jobName}/unowned`, { deployment: null });

    const environment = new DockerEnvironment({ hostId, deployment });
    const removed = await removeAbandonedEnvironments(client, environment, {
      type: 'docker',
      checkRunningTrials: false,
    });
    assert.equal(removed, 2);
    assert.deepEqual(await keptTrials(), [`${jobName}/foreign`, running, running, `${jobName}/unowned`]);
    await client.workflow.getHandle(running).terminate('test over');
    await removeJobLeftovers(jobName);
  });

  it('removes the container a lost worker left for a trial that restarted elsewhere (stand-in claim)', async () => {
    const trialId = `${jobName}/moved`;
    const movedTo = `moved-to-${run}`;
    const nativeConnection = await NativeConnection.connect({ address: TEST_ADDRESS });
    const claimQueue = `rollout-docker`;
    const taskQueue = `hosts-workflows-${run}`;
    // Real Trial workflow code; the claim is a stand-in that sends the trial to a worker that never answers.
    const worker = await Worker.create({
      connection: nativeConnection,
      taskQueue,
      workflowsPath: require.resolve('../../workflows'),
    });
    const claimer = await Worker.create({
      connection: nativeConnection,
      taskQueue: claimQueue,
      activities: { claimHost: () => Promise.resolve({ hostQueue: hostQueue('docker', movedTo), hostId: movedTo }) },
    });
    const running = Promise.all([worker.run(), claimer.run()]);
    try {
      await client.workflow.start('trialWorkflow', {
        workflowId: trialId,
        taskQueue,
        args: [standInSpec(trialId)],
      });
      await waitFor('the trial to claim its stand-in host', async () => {
        const state = await client.workflow.getHandle(trialId).query(trialStateQuery);
        return state.hostQueue === hostQueue('docker', movedTo);
      });
      claimer.shutdown();
      await leftover(trialId, { worker: `lost-${run}` });
      await leftover(trialId, { worker: movedTo });

      const environment = new DockerEnvironment({ hostId, deployment });
      const removed = await removeAbandonedEnvironments(client, environment, {
        type: 'docker',
        checkRunningTrials: true,
      });
      assert.equal(removed, 1);
      const kept = await containersOfJob(jobName);
      assert.deepEqual(
        kept.map((c) => c.Labels[LABEL_WORKER]),
        [movedTo]
      );
    } finally {
      await client.workflow
        .getHandle(trialId)
        .terminate('test over')
        .catch(() => undefined);
      if (claimer.getState() === 'RUNNING') claimer.shutdown();
      worker.shutdown();
      await running;
      await nativeConnection.close();
      await removeJobLeftovers(jobName);
    }
  });
});

function standInSpec(trialId: string): TrialSpec {
  const hour = 3600;
  return {
    jobName,
    jobDir: path.join(tmpdir(), jobName),
    jobWorkflowId: `rollout-job/${jobName}`,
    trialId,
    trialName: 'moved',
    taskName: 'moved',
    taskDir: tmpdir(),
    datasetName: 'none',
    agentName: 'oracle',
    attempt: 1,
    environmentType: 'docker',
    envKey: 'none',
    timeouts: {
      build: hour,
      start: hour,
      install: hour,
      execute: hour,
      verify: hour,
      collect: hour,
      stop: hour,
      cleanup: hour,
    },
    resources: { cpus: 1, memoryBytes: 2 ** 30, storageBytes: 0, pidsLimit: 100 },
    collectLimits: { maxBytes: 2 ** 30, maxFiles: 1000 },
    forceBuild: false,
    verify: true,
    hostLostTimeoutSec: hour,
  };
}
