/**
 * Dockerfile heredocs on the host's Docker 20.10, whose own Dockerfile frontend lacks them: builds use Rollout's
 * frontend image (BuildKit's Dockerfile frontend 1.4.3, built from the Go module proxy by scripts/setup.sh), which
 * also stands in for a `# syntax=` line that would need a registry. Without it, the failure is one error naming the
 * Dockerfile line.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';

import { DockerEnvironment } from '../src/environments/docker';
import type { BuildRequest } from '../src/environments/environment';
import { TaskEnvironmentError } from '../src/environments/environment';
import { environmentKey } from '../src/environments/env-key';
import { TEST_HOST_ID } from './support/temporal';

const docker = new Docker();
const marker = randomBytes(4).toString('hex');
const jobName = `heredoc-${marker}`;
const environment = new DockerEnvironment({ hostId: `heredoc-${TEST_HOST_ID}`, deployment: `heredoc-${marker}` });
const FRONTEND = 'rollout-dockerfile-frontend:1.4.3';
let dir: string;
const built: string[] = [];

async function request(name: string, dockerfile: string): Promise<BuildRequest> {
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
      .catch(() => assert.fail(`${FRONTEND} is missing: scripts/setup.sh builds it`));
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

  it('without the frontend image, a heredoc is one build error naming the Dockerfile line', async () => {
    process.env.ROLLOUT_DOCKERFILE_FRONTEND = `rollout-no-such-frontend:${marker}`;
    try {
      const failing = await request('no-frontend', HEREDOCS.replace('one-', 'plain-'));
      await assert.rejects(environment.build(failing), (err: unknown) => {
        assert.ok(err instanceof TaskEnvironmentError, String(err));
        assert.equal(err.type, 'EnvironmentBuildError');
        const dockerfile = path.join(failing.contextDir, 'Dockerfile');
        assert.equal(
          err.message,
          `${dockerfile}:2: a heredoc (RUN <<EOF) needs BuildKit's Dockerfile 1.4 syntax; this Docker host lacks ` +
            `Rollout's Dockerfile frontend (${FRONTEND}): run scripts/setup.sh, which builds it`
        );
        return true;
      });
    } finally {
      delete process.env.ROLLOUT_DOCKERFILE_FRONTEND;
    }
  });
});
