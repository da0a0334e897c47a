/**
 * `rollout build` through the CLI on the real Docker engine: a dataset's environments built ahead of a job (tasks
 * with the same environment/ share one build), a second build finds them built, a job then uses those very images
 * and, with `delete: true`, leaves them in place; a Dockerfile that fails is one error line naming its task.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, writeOracleJob } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const docker = new Docker();
const marker = randomBytes(4).toString('hex');
const jobName = `prebuilt-${marker}`;
let dir: string;
let firstBuild: CliRun;
let secondBuild: CliRun;
let imageIds: Map<string, string>;
let job: CliRun;
let brokenBuild: CliRun;

async function writeTask(dataset: string, name: string, dockerfile: string): Promise<void> {
  const files: Record<string, string> = {
    'task.toml': '[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n',
    'instruction.md': 'Nothing to do.',
    'environment/Dockerfile': dockerfile,
    'solution/solve.sh': 'true\n',
    'tests/test.sh': 'cat /marker > /dev/null && echo 1 > /logs/verifier/reward.txt\n',
  };
  for (const [file, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(dir, dataset, name, file)), { recursive: true });
    await writeFile(path.join(dir, dataset, name, file), content);
  }
}

/** The images a build's progress lines name. */
const builtImages = (run: CliRun) => [...run.stderr.matchAll(/\] (rollout-env:[0-9a-f]+) \(/g)].map((m) => m[1]!);

describe('rollout build', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-build-'));
    const shared = `FROM debian:bookworm-slim\nRUN echo shared-${marker} > /marker\n`;
    await writeTask('tasks', 'a', shared);
    await writeTask('tasks', 'b', shared);
    await writeTask('tasks', 'c', `FROM debian:bookworm-slim\nRUN echo own-${marker} > /marker\n`);
    await writeTask('broken', 'fails', `FROM debian:bookworm-slim\nRUN echo ${marker} && exit 7\n`);
    await writeTask('broken', 'fine', `FROM debian:bookworm-slim\nRUN echo fine-${marker} > /marker\n`);

    firstBuild = await runCli(['build', 'tasks', '--parallel', '2'], { cwd: dir });
    secondBuild = await runCli(['build', 'tasks'], { cwd: dir });
    imageIds = new Map();
    for (const image of builtImages(firstBuild)) imageIds.set(image, (await docker.getImage(image).inspect()).Id);
    await writeOracleJob(dir, { name: jobName });
    job = await runCli(['job.yaml'], { cwd: dir });
    brokenBuild = await runCli(['build', 'broken'], { cwd: dir });
  });
  after(async () => {
    await removeJobLeftovers(jobName);
    for (const image of [...builtImages(firstBuild), ...builtImages(brokenBuild)]) {
      await docker
        .getImage(image)
        .remove()
        .catch(() => undefined);
    }
  });

  it('builds each distinct environment once, the tasks that share one together', () => {
    assert.equal(firstBuild.code, 0, firstBuild.stderr);
    assert.match(firstBuild.stderr, /2 environments for 3 tasks, 2 at once/);
    assert.equal(builtImages(firstBuild).length, 2);
    assert.match(firstBuild.stderr, /\((a|b) \+1\): built in /);
    assert.match(firstBuild.stderr, /\(c\): built in /);
    assert.match(firstBuild.stderr, /2 of 2 environments ready/);
  });

  it('a second build finds every environment built (content-keyed)', () => {
    assert.equal(secondBuild.code, 0, secondBuild.stderr);
    assert.deepEqual(builtImages(secondBuild).sort(), builtImages(firstBuild).sort());
    assert.equal(secondBuild.stderr.match(/already built/g)?.length, 2, secondBuild.stderr);
  });

  it('a job then runs on those very images, and delete: true leaves them', async () => {
    assert.equal(job.code, 0, job.stderr);
    for (const task of ['a', 'b', 'c']) {
      const result = JSON.parse(
        await readFile(path.join(dir, 'jobs', jobName, `${task}__oracle__1`, 'result.json'), 'utf8')
      ) as TrialResult;
      assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
      const prebuilt = [...imageIds.keys()].find((image) => result.image?.startsWith(`${image}-`));
      assert.ok(prebuilt, `${task} ran on ${result.image}, not on a prebuilt image`);
    }
    for (const [image, id] of imageIds) {
      assert.equal((await docker.getImage(image).inspect()).Id, id, `${image} was rebuilt or removed`);
    }
  });

  it('a Dockerfile that fails is one error line naming its task; the others still build (exit 1)', () => {
    assert.equal(brokenBuild.code, 1, brokenBuild.stderr);
    assert.match(brokenBuild.stderr, /^error: .*broken\/fails: EnvironmentBuildError: .*exit code: 7/m);
    assert.match(brokenBuild.stderr, /\(fine\): built in /);
    assert.match(brokenBuild.stderr, /1 of 2 environments ready, 1 failed/);
  });

  it("also builds a separate verifier's image (from tests/), as a part of the task's main image", async () => {
    await writeTask('separate', 'sv', `FROM debian:bookworm-slim\nRUN echo sv-${marker} > /marker\n`);
    const task = path.join(dir, 'separate', 'sv');
    await writeFile(path.join(task, 'task.toml'), '[verifier]\ntimeout_sec = 60.0\nenvironment_mode = "separate"\n');
    await writeFile(
      path.join(task, 'tests', 'Dockerfile'),
      `FROM debian:bookworm-slim\nRUN echo tests-${marker} > /t\n`
    );
    const build = await runCli(['build', 'separate'], { cwd: dir });
    const images = builtImages(build);
    try {
      assert.equal(build.code, 0, build.stderr);
      assert.match(build.stderr, /2 environments for 1 tasks/);
      assert.equal(images.length, 2);
      const labels = await Promise.all(
        images.map(async (image) => (await docker.getImage(image).inspect()).Config.Labels)
      );
      const main = images.findIndex((_, i) => !labels[i]?.['rollout.part-of']);
      const verifier = images.findIndex((_, i) => labels[i]?.['rollout.part-of']);
      assert.ok(main >= 0 && verifier >= 0, JSON.stringify(labels));
      assert.equal(labels[verifier]?.['rollout.part-of'], images[main]?.split(':')[1]);
    } finally {
      for (const image of images)
        await docker
          .getImage(image)
          .remove()
          .catch(() => undefined);
    }
  });
});
