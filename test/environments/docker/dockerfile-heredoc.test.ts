/**
 * Dockerfile heredocs on the host's Docker 20.10, whose own Dockerfile frontend lacks them: builds use Rollout's
 * frontend image (BuildKit's Dockerfile frontend 1.4.3, built from the Go module proxy when a Dockerfile first needs
 * it; scripts/setup-tests.sh builds it ahead of the tests), which also stands in for a `# syntax=` line that would
 * need a registry. With it turned off, the failure is one error naming the Dockerfile line.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';

import { DockerEnvironment } from '../../../src/environments/docker';
import { DEFAULT_DOCKERFILE_FRONTEND, frontendNeed } from '../../../src/environments/image-builder/dockerfile-frontend';
import type { BuildRequest } from '../../../src/contracts/environment';
import { TaskEnvironmentError } from '../../../src/contracts/environment';
import { environmentKey } from '../../../src/environments/env-key';
import { TEST_HOST_ID } from '../../support/temporal';

const docker = new Docker();
const marker = randomBytes(4).toString('hex');
const jobName = `heredoc-${marker}`;
const environment = new DockerEnvironment({ hostId: `heredoc-${TEST_HOST_ID}`, deployment: `heredoc-${marker}` });
const FRONTEND = DEFAULT_DOCKERFILE_FRONTEND;
let dir: string;
const built: string[] = [];

async function request(name: string, dockerfile: string, onOutput?: (line: string) => void): Promise<BuildRequest> {
  const contextDir = path.join(dir, name);
  await mkdir(contextDir, { recursive: true });
  await writeFile(path.join(contextDir, 'Dockerfile'), dockerfile);
  return {
    contextDir,
    envKey: await environmentKey(contextDir, null),
    dockerImage: null,
    force: false,
    jobName,
    timeoutMs: 300_000,
    ...(onOutput ? { onOutput } : {}),
  };
}

/** What `cat` prints in a container of the image. */
async function catIn(image: string, ...files: string[]): Promise<string> {
  // A terminal: the log is the plain output (no stream headers), with \r\n line ends.
  const container = await docker.createContainer({ Image: image, Cmd: ['cat', ...files], Tty: true });
  try {
    await container.start();
    await container.wait();
    const logs = await container.logs({ stdout: true, stderr: true });
    return logs.toString('utf8').replace(/\r\n/g, '\n');
  } finally {
    await container.remove({ force: true });
  }
}

const HEREDOCS = [
  'FROM debian:bookworm-slim',
  'RUN <<EOF',
  `echo one-${marker} > /x`,
  'echo two >> /x',
  'EOF',
  'COPY <<EOF /greeting',
  'hello heredoc',
  'EOF',
  '',
].join('\n');

describe('Dockerfile heredocs', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-heredoc-'));
    await docker
      .getImage(FRONTEND)
      .inspect()
      .catch(() => assert.fail(`${FRONTEND} is missing: scripts/setup-tests.sh builds it`));
  });
  after(async () => {
    for (const image of built) await environment.removeImage(image);
  });

  it('builds RUN <<EOF and COPY <<EOF with Rollout frontend', async () => {
    const result = await environment.build(await request('heredocs', HEREDOCS));
    built.push(result.image);
    assert.equal(await catIn(result.image, '/x', '/greeting'), `one-${marker}\ntwo\nhello heredoc\n`);
  });

  it("builds a Dockerfile whose # syntax= line names a frontend no registry can give (Rollout's stands in)", async () => {
    const result = await environment.build(
      await request('syntax', `# syntax=docker/dockerfile:1.4\n${HEREDOCS.replace('one-', 'syntax-')}`)
    );
    built.push(result.image);
    assert.match(await catIn(result.image, '/x'), new RegExp(`^syntax-${marker}\\n`));
  });

  it('with the frontend turned off (ROLLOUT_DOCKERFILE_FRONTEND empty), a heredoc is one build error naming the line', async () => {
    process.env.ROLLOUT_DOCKERFILE_FRONTEND = '';
    try {
      const failing = await request('no-frontend', HEREDOCS.replace('one-', 'plain-'));
      await assert.rejects(environment.build(failing), (err: unknown) => {
        assert.ok(err instanceof TaskEnvironmentError, String(err));
        assert.equal(err.type, 'EnvironmentBuildError');
        const dockerfile = path.join(failing.contextDir, 'Dockerfile');
        assert.equal(
          err.message,
          `${dockerfile}:2: a heredoc (RUN <<EOF) needs BuildKit's Dockerfile 1.4 syntax; Rollout's Dockerfile ` +
            'frontend is turned off (ROLLOUT_DOCKERFILE_FRONTEND is empty)'
        );
        return true;
      });
    } finally {
      delete process.env.ROLLOUT_DOCKERFILE_FRONTEND;
    }
  });

  it('a missing frontend is built when a Dockerfile first needs it: once for concurrent builds, with a progress line', async () => {
    const image = `rollout-dockerfile-frontend-test:${marker}`;
    process.env.ROLLOUT_DOCKERFILE_FRONTEND = image;
    const lines: string[] = [];
    try {
      const results = await Promise.all(
        ['first', 'second'].map(async (name) =>
          environment.build(
            await request(`on-demand-${name}`, HEREDOCS.replace('one-', `${name}-`), (line) => lines.push(line))
          )
        )
      );
      built.push(...results.map((result) => result.image));
      assert.match(await catIn(results[1]!.image, '/x'), new RegExp(`^second-${marker}\\n`));
      await docker.getImage(image).inspect();
      assert.ok(
        lines.some((line) => line.endsWith(`Dockerfile line 2: RUN <<EOF needs the Dockerfile frontend ${image}`)),
        lines.join('\n')
      );
      assert.equal(lines.filter((line) => line.startsWith(`Dockerfile frontend ${image} ready (`)).length, 1);
    } finally {
      delete process.env.ROLLOUT_DOCKERFILE_FRONTEND;
      await docker
        .getImage(image)
        .remove()
        .catch((err: Error) => console.error(`removing ${image}: ${err.message}`));
    }
  });

  it("a frontend that cannot be built is an infrastructure error (not the task's) saying why", async () => {
    const image = `rollout-dockerfile-frontend-test:unbuildable-${marker}`;
    const blocker = path.join(dir, 'a-file');
    await writeFile(blocker, '');
    process.env.ROLLOUT_DOCKERFILE_FRONTEND = image;
    process.env.ROLLOUT_CACHE_DIR = path.join(blocker, 'cache');
    try {
      await assert.rejects(
        environment.build(await request('unbuildable', HEREDOCS.replace('one-', 'unbuildable-'))),
        (err: unknown) => {
          assert.ok(!(err instanceof TaskEnvironmentError), String(err));
          assert.match(
            (err as Error).message,
            new RegExp(`^the Dockerfile frontend ${image} could not be built: ENOTDIR.*${blocker}`)
          );
          return true;
        }
      );
    } finally {
      delete process.env.ROLLOUT_DOCKERFILE_FRONTEND;
      delete process.env.ROLLOUT_CACHE_DIR;
      await rm(blocker);
    }
  });

  it('a Dockerfile needs the frontend for a # syntax= line on any engine, for a heredoc before Docker 23', () => {
    assert.equal(frontendNeed(HEREDOCS, '20.10.24+dfsg1'), 'line 2: RUN <<EOF');
    assert.equal(frontendNeed(HEREDOCS, '24.0.7'), null);
    assert.equal(
      frontendNeed('# syntax=docker/dockerfile:1.4\nFROM x\n', '27.1.0'),
      'line 1: # syntax=docker/dockerfile:1.4'
    );
    assert.equal(frontendNeed('FROM debian:bookworm-slim\nRUN echo plain > /x\n', '20.10.24'), null);
  });
});
