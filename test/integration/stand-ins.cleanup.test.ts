/**
 * The cloud stand-ins' clean-up of containers a killed test run left (test/support/stand-in-owner.ts, used by the Fly
 * stand-in): on start, the containers of a stand-in kind whose owning process is gone go, those of a live run stay;
 * on exit, a process removes what it still holds. Real Docker; the containers are created, never started.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { after, describe, it } from 'node:test';

import Docker from 'dockerode';

import { STAND_IN_OWNER_LABEL, ownerLabel, removeOnExit, removeOrphanedContainers } from '../support/stand-in-owner';

const docker = new Docker();
const kind = `rollout.stand-in-cleanup-test-${randomBytes(3).toString('hex')}`;
const made: string[] = [];

async function container(labels: Record<string, string>): Promise<string> {
  const created = await docker.createContainer({ Image: 'debian:bookworm-slim', Cmd: ['true'], Labels: labels });
  made.push(created.id);
  return created.id;
}

const exists = (id: string) =>
  docker
    .getContainer(id)
    .inspect()
    .then(
      () => true,
      () => false
    );

describe('stand-ins: containers of killed runs cleaned up by owner label', () => {
  after(async () => {
    for (const id of made)
      await docker
        .getContainer(id)
        .remove({ force: true })
        .catch(() => undefined);
  });

  it('on start removes only the containers whose owning process is gone (a reused pid included)', async () => {
    const live = await container({ [kind]: 'a', ...ownerLabel() });
    const [pid] = ownerLabel()[STAND_IN_OWNER_LABEL]!.split(':');
    const reusedPid = await container({ [kind]: 'b', [STAND_IN_OWNER_LABEL]: `${pid}:1` });
    const deadPid = await container({ [kind]: 'c', [STAND_IN_OWNER_LABEL]: '4194999:12345' });
    const otherKind = await container({ 'rollout.other-kind': 'x', [STAND_IN_OWNER_LABEL]: '4194999:12345' });
    assert.equal(await removeOrphanedContainers(docker, kind), 2);
    assert.deepEqual(await Promise.all([live, reusedPid, deadPid, otherKind].map(exists)), [true, false, false, true]);
  });

  it('on exit removes the containers the process still holds, not another instance’s', async () => {
    const instance = randomBytes(3).toString('hex');
    const other = await container({ [kind]: 'other', ...ownerLabel() });
    const module = path.join(__dirname, '..', 'support', 'stand-in-owner.js');
    const script = [
      `const { execFileSync } = require('node:child_process');`,
      `const { removeOnExit } = require(${JSON.stringify(module)});`,
      `execFileSync('docker', ['create', '--label', ${JSON.stringify(`${kind}=${instance}`)}, 'debian:bookworm-slim', 'true']);`,
      `removeOnExit(${JSON.stringify(kind)}, ${JSON.stringify(instance)});`,
      'process.exit(3);',
    ].join('\n');
    assert.throws(() => execFileSync(process.execPath, ['-e', script], { stdio: 'ignore' }), { status: 3 });
    const left = execFileSync('docker', ['ps', '-aq', '--filter', `label=${kind}=${instance}`], { encoding: 'utf8' });
    assert.equal(left.trim(), '', 'the exiting process removed its container');
    assert.equal(await exists(other), true);
    const stop = removeOnExit(kind, 'never-made');
    stop();
  });
});
