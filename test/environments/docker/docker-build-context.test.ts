/**
 * Build contexts on this host's BuildKit (docker buildx): two tasks whose `environment/` folders hold a same-named file
 * of the same size and modification time (as tasks unpacked from one archive do) but other bytes each build from their
 * own file. buildx syncs a context into a folder keyed by the context folder's name and skips files whose size and
 * mtime match (docker/buildx#3232); Rollout builds through a link named after the content key.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

import Docker from 'dockerode';

import { DockerEnvironment } from '../../../src/environments/docker';
import { environmentKey } from '../../../src/environments/env-key';
import { TEST_HOST_ID } from '../../support/temporal';

const docker = new Docker();
const marker = randomBytes(4).toString('hex');
const jobName = `build-context-${marker}`;
const environment = new DockerEnvironment({ hostId: `context-${TEST_HOST_ID}`, deployment: `context-${marker}` });
const built: string[] = [];
let dir: string;

async function fileIn(image: string, file: string): Promise<string> {
  const container = await docker.createContainer({ Image: image, Cmd: ['cat', file], Tty: true });
  try {
    await container.start();
    await container.wait();
    return (await container.logs({ stdout: true, stderr: true })).toString('utf8');
  } finally {
    await container.remove({ force: true });
  }
}

describe('docker build contexts', () => {
  after(async () => {
    for (const image of built) await environment.removeImage(image);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('builds each environment/ from its own files, even where name, size and mtime match another one', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-build-context-'));
    const sameTime = new Date('2026-01-01T00:00:00Z');
    const images: Record<string, string> = {};
    // One after the other: the second build's sync folder would hold the first one's files.
    for (const task of ['one', 'two']) {
      const contextDir = path.join(dir, task, 'environment');
      await mkdir(contextDir, { recursive: true });
      await writeFile(path.join(contextDir, 'Dockerfile'), 'FROM debian:bookworm-slim\nCOPY marker /marker\n');
      await writeFile(path.join(contextDir, 'marker'), `${task}-${marker}`);
      for (const file of ['Dockerfile', 'marker']) await utimes(path.join(contextDir, file), sameTime, sameTime);
      const result = await environment.build({
        contextDir,
        envKey: await environmentKey(contextDir, null),
        dockerImage: null,
        force: false,
        jobName,
        timeoutMs: 300_000,
      });
      built.push(result.image);
      images[task] = result.image;
    }
    assert.equal(await fileIn(images.one!, '/marker'), `one-${marker}`);
    assert.equal(await fileIn(images.two!, '/marker'), `two-${marker}`);
  });
});
