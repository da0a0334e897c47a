/**
 * A worker that starts on a host removes what the host still holds for trials that no longer run (its predecessor
 * crashed before cleanup), and leaves environments of running trials alone. Real Docker, real Temporal.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';
import Docker from 'dockerode';

import { DockerEnvironment } from '../src/environments/docker';
import { LABEL_HOST, LABEL_JOB, LABEL_TRIAL } from '../src/environments/environment';
import { removeAbandonedEnvironments } from '../workers/janitor';
import { containersOfJob, removeJobLeftovers } from './support/docker';
import { testTemporal } from './support/temporal';

const docker = new Docker();
const jobName = `janitor-${randomBytes(3).toString('hex')}`;
const hostId = `janitor-host-${jobName}`;
let client: Client;
let connection: Connection;

async function leftover(trialId: string, host = hostId): Promise<void> {
  const container = await docker.createContainer({
    Image: 'debian:bookworm-slim',
    Entrypoint: ['sleep', 'infinity'],
    Labels: { [LABEL_JOB]: jobName, [LABEL_TRIAL]: trialId, [LABEL_HOST]: host },
  });
  await container.start();
}

describe('janitor', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
    await removeJobLeftovers(jobName);
  });

  it("removes this host's environments of trials that are gone, keeps running trials' and other hosts'", async () => {
    const running = `${jobName}/running`;
    await client.workflow.start('trialWorkflow', {
      workflowId: running,
      taskQueue: `nobody-polls-${jobName}`,
      args: [],
    });
    await leftover(`${jobName}/gone`);
    await leftover(running);
    await leftover(`${jobName}/elsewhere`, 'another-host');

    const removed = await removeAbandonedEnvironments(client, hostId, new DockerEnvironment({ hostId }));
    assert.equal(removed, 1);
    const kept = (await containersOfJob(jobName)).map((c) => c.Labels[LABEL_TRIAL]).sort();
    assert.deepEqual(kept, [`${jobName}/elsewhere`, running]);
    await client.workflow.getHandle(running).terminate('test over');
  });
});
