/**
 * Issue 31, "nothing leaks": what a dead worker left is found by label and removed by the reaper (the janitor of any
 * live `rollout worker` of the deployment) once its trial is finished, cancelled or its job gone, within a bounded
 * time; what a running trial holds stays. On Docker (a host id whose worker never came back, sharing the daemon) and
 * on the E2B stand-in (the unmodified e2b SDK), each with a real `rollout worker` process and real Temporal.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';
import Docker from 'dockerode';

import { LABEL_DEPLOYMENT, LABEL_HOST, LABEL_JOB, LABEL_TRIAL, LABEL_WORKER } from '../../src/contracts/environment';
import type { StartRequest } from '../../src/contracts/environment';
import { E2BEnvironment } from '../../src/environments/e2b';
import { deploymentId } from '../../src/temporal/deployment';
import type { E2BStandIn } from '../environments/e2b/e2b-stand-in';
import { startE2BStandIn } from '../environments/e2b/e2b-stand-in';
import { startCli } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { TEST_ADDRESS, testTemporal } from '../support/temporal';
import { waitFor, within } from '../support/wait';

const run = randomBytes(3).toString('hex');
const deployment = deploymentId(TEST_ADDRESS, 'default');
/** The janitor's period (workers/create-workers.ts) and some slack: the longest a leak may outlive its trial. */
const LEAK_BOUND_MS = 60_000 + 45_000;
let client: Client;
let connection: Connection;

/** A real worker process of this deployment, on a host id of its own; stopped (SIGTERM, it holds no trial) after. */
async function withWorker<T>(
  env: string,
  extra: Record<string, string>,
  work: (stderr: () => string) => Promise<T>
): Promise<T> {
  const cwd = await mkdtemp(path.join(tmpdir(), 'rollout-reaper-'));
  const leases = { ROLLOUT_LEASE_DIR: await mkdtemp(path.join(tmpdir(), 'leases-')) };
  const worker = startCli(['worker', '--env', env, '--no-workflows', '--host-id', `live-${run}`], {
    cwd,
    env: { ...leases, ...extra },
    timeoutMs: 10 * 60_000,
  });
  let stderr = '';
  worker.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  try {
    return await work(() => stderr);
  } finally {
    worker.kill('SIGTERM');
    const { stderr } = await within(60_000, 'the worker to stop', worker.output);
    assert.doesNotMatch(stderr, /warning: janitor/, stderr);
    await rm(cwd, { recursive: true, force: true });
  }
}

/** A Trial workflow that stays running (nobody polls its queue): a trial a live host still works on. */
async function runningTrial(trialId: string): Promise<void> {
  await client.workflow.start('trialWorkflow', { workflowId: trialId, taskQueue: `nobody-polls-${run}`, args: [] });
}

async function finishedTrial(trialId: string): Promise<void> {
  await runningTrial(trialId);
  await client.workflow.getHandle(trialId).terminate('cancelled by the test');
}

describe('the reaper: bounded removal of what dead workers left', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
  });

  it("docker: a gone host's containers go once their trial is finished, cancelled or its job gone; a running one's stay", async () => {
    const docker = new Docker();
    const jobName = `reaper-${run}`;
    const deadHost = `dead-${run}`;
    // What a worker killed for good on host `dead-…` left on the daemon this host shares.
    const leftover = async (trial: string) => {
      const container = await docker.createContainer({
        Image: 'debian:bookworm-slim',
        Entrypoint: ['sleep', 'infinity'],
        Labels: {
          [LABEL_JOB]: jobName,
          [LABEL_TRIAL]: `${jobName}/${trial}`,
          [LABEL_HOST]: deadHost,
          [LABEL_WORKER]: deadHost,
          [LABEL_DEPLOYMENT]: deployment,
        },
      });
      await container.start();
    };
    const kept = async () => (await containersOfJob(jobName)).map((c) => c.Labels[LABEL_TRIAL]!.split('/')[1]).sort();
    try {
      await runningTrial(`${jobName}/running`);
      await finishedTrial(`${jobName}/cancelled`);
      for (const trial of ['gone', 'cancelled', 'running']) await leftover(trial);
      assert.deepEqual(await kept(), ['cancelled', 'gone', 'running']);

      await withWorker('docker', {}, async (stderr) => {
        // Its first pass, as it starts: 3 held (here), the 2 of ended trials removed.
        await waitFor('the first janitor pass', () =>
          /janitor \(docker\): \d+ environment\(s\) held, [1-9]\d* of/.test(stderr())
        );
        assert.deepEqual(await kept(), ['running']);
        // The running trial ends (its host never comes back): its container goes within the janitor's period.
        await client.workflow.getHandle(`${jobName}/running`).terminate('test: the trial ended');
        await waitFor("the ended trial's container to go", async () => (await kept()).length === 0, LEAK_BOUND_MS);
      });
    } finally {
      await client.workflow
        .getHandle(`${jobName}/running`)
        .terminate('test over')
        .catch(() => undefined);
      await removeJobLeftovers(jobName);
    }
  });

  describe('e2b stand-in', () => {
    let standIn: E2BStandIn;
    const saved: Record<string, string | undefined> = {};

    before(async () => {
      standIn = await startE2BStandIn();
      for (const [key, value] of Object.entries(standIn.env)) {
        saved[key] = process.env[key];
        process.env[key] = value;
      }
    });
    after(async () => {
      await standIn.stop();
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    });

    it("a dead worker's sandboxes go once their trial is finished or its job gone; a running trial's stay", async () => {
      const jobName = `reaper-e2b-${run}`;
      // The dead worker's own provider, as it made them: labels (E2B metadata) set in the create call.
      const environment = new E2BEnvironment({ hostId: `dead-${run}`, deployment });
      const context = path.join(await mkdtemp(path.join(tmpdir(), 'reaper-e2b-')), 'env');
      await mkdir(context, { recursive: true });
      await writeFile(path.join(context, 'Dockerfile'), 'FROM debian:bookworm-slim\nWORKDIR /app\n');
      const { image } = await environment.build({
        contextDir: context,
        envKey: `reaper${run}`,
        dockerImage: null,
        force: false,
        jobName,
        timeoutMs: 300_000,
      });
      const start = (trial: string): StartRequest => ({
        image,
        jobName,
        trialId: `${jobName}/${trial}`,
        trialName: trial,
        workerId: `dead-${run}`,
        resources: { cpus: 1, memoryBytes: 256 * 2 ** 20, storageBytes: 0, pidsLimit: 256 },
        env: {},
        settings: {},
        budgetSec: 600,
      });
      const trialsHeld = async () => (await environment.heldEnvironments()).map((h) => h.trialId.split('/')[1]).sort();
      try {
        await runningTrial(`${jobName}/running`);
        await finishedTrial(`${jobName}/finished`);
        for (const trial of ['gone', 'finished', 'running']) await environment.start(start(trial));
        assert.deepEqual(await trialsHeld(), ['finished', 'gone', 'running']);

        await withWorker('e2b', standIn.env, async (stderr) => {
          await waitFor('the first janitor pass', () =>
            /janitor \(e2b\): 3 environment\(s\) held, [1-9]\d* of/.test(stderr())
          );
          assert.deepEqual(await trialsHeld(), ['running']);
          await client.workflow.getHandle(`${jobName}/running`).terminate('test: the trial ended');
          await waitFor(
            "the ended trial's sandbox to go",
            async () => (await standIn.sandboxes()).length === 0,
            LEAK_BOUND_MS
          );
        });
      } finally {
        await client.workflow
          .getHandle(`${jobName}/running`)
          .terminate('test over')
          .catch(() => undefined);
        await rm(path.dirname(context), { recursive: true, force: true });
      }
    });
  });
});
