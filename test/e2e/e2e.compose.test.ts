/**
 * Harbor's multi-container tasks (environment/docker-compose.yaml) through the real Docker Compose v2 CLI: the agent
 * and the verifier in `main`, a sidecar built from the task and healthy before the agent starts, one project per
 * trial, everything labelled for the janitor and removed at cleanup. And Harbor's separate verifier environments:
 * collect hooks, artifacts (from main and from a sidecar), tests in an environment of their own built from tests/.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { execFileSync } from 'node:child_process';

import Docker from 'dockerode';

import { DockerEnvironment } from '../../src/environments/docker';
import { LABEL_COMPOSE_PROJECT } from '../../src/environments/docker/compose';
import { refuseForeignSidecarTags } from '../../src/environments/docker/images';
import { imageTag } from '../../src/environments/image-builder/builder';
import { DockerEngine } from '../../src/environments/docker/engine';
import {
  LABEL_DEPLOYMENT,
  LABEL_ENV_KEY,
  LABEL_HOST,
  LABEL_JOB,
  LABEL_PART_OF,
  LABEL_TRIAL,
} from '../../src/contracts/environment';
import { TaskEnvironmentError } from '../../src/contracts/environment';
import { environmentKey } from '../../src/environments/env-key';
import type { TrialResult } from '../../src/results/trial-result';
import { separateVerifierEnvironment, TaskConfigSchema } from '../../src/contracts/task-config';
import type { CliRun } from '../support/cli';
import { runCli, writeOracleJob } from '../support/cli';
import { containersOfJob, imagesOfJob, removeJobLeftovers } from '../support/docker';
import { REPO_ROOT, TEST_HOST_ID, testTemporal } from '../support/temporal';

const docker = new Docker();
const FIXTURES = path.join(REPO_ROOT, 'test', 'fixtures', 'harbor-tasks');
const FIXTURE = path.join(FIXTURES, 'compose-sidecar');
const jobName = `compose-${randomBytes(3).toString('hex')}`;
const ownedByJob = { filters: { label: [`${LABEL_JOB}=${jobName}`] } };
let dir: string;
let run: CliRun;

describe('docker-compose environments (Docker Compose v2 CLI)', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-compose-'));
    for (const task of ['compose-sidecar', 'separate-verifier', 'compose-infra', 'verifier-gpu']) {
      await cp(path.join(FIXTURES, task), path.join(dir, 'tasks', task), { recursive: true });
    }
    // Two attempts of each task, two trials at a time: two projects of one compose task run side by side.
    await writeOracleJob(dir, { name: jobName, n_concurrent_trials: 2, n_attempts: 2 });
    run = await runCli(['job.yaml'], { cwd: dir });
  });
  after(async () => {
    await removeJobLeftovers(jobName);
    await rm(dir, { recursive: true, force: true });
  });

  it('runs the agent and the verifier in main, which reach the sidecar (healthy before the agent)', async () => {
    assert.equal(run.code, 0, run.stderr);
    for (const attempt of [1, 2]) {
      const trialDir = path.join(dir, 'jobs', jobName, `compose-sidecar__oracle__${attempt}`);
      const result = JSON.parse(await readFile(path.join(trialDir, 'result.json'), 'utf8')) as TrialResult;
      assert.equal(result.error, null, JSON.stringify(result.error));
      assert.deepEqual(result.rewards, { reward: 1 });
      // [environment.env] reached main literally ($HOME not interpolated by compose), and only this trial's store.
      const output = await readFile(path.join(trialDir, 'verifier', 'test-stdout.txt'), 'utf8');
      assert.equal(output.trim(), 'store holds: from-main-$HOME');
      // /logs/artifacts is collected although the task declares no artifacts (Harbor's convention).
      assert.equal(
        await readFile(path.join(trialDir, 'artifacts', 'logs', 'artifacts', 'stored.txt'), 'utf8'),
        'stored\n'
      );
    }
  });

  it("sets Harbor's compose infra variables: the main image, limits, context and the artifacts folder mount", async () => {
    const trialDir = path.join(dir, 'jobs', jobName, 'compose-infra__oracle__1');
    const result = JSON.parse(await readFile(path.join(trialDir, 'result.json'), 'utf8')) as TrialResult;
    const output = await readFile(path.join(trialDir, 'verifier', 'test-stdout.txt'), 'utf8');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 }, output);
    const helper = path.join(dir, 'tasks', 'compose-infra', 'environment');
    assert.equal(output.trim(), `helper: cpus=1 memory=1024M context=${helper} into=/logs/artifacts`);
    // What the sidecar wrote there is main's, so it is collected with main's /logs/artifacts.
    const collected = await readFile(path.join(trialDir, 'artifacts', 'logs', 'artifacts', 'helper.txt'), 'utf8');
    assert.equal(collected, output.trim().replace(/^helper: /, '') + '\n');
  });

  it("checks a separate verifier environment's gpus as the main one's", async () => {
    const trialDir = path.join(dir, 'jobs', jobName, 'verifier-gpu__oracle__1');
    const result = JSON.parse(await readFile(path.join(trialDir, 'result.json'), 'utf8')) as TrialResult;
    assert.equal(result.error?.type, 'EnvironmentStartError');
    assert.equal(result.error?.step, 'verify');
    assert.match(
      result.error?.message ?? '',
      /^separate verifier environment: task.toml environment.gpus = 1, and this Docker host has no GPUs/
    );
  });

  it('verifies in a separate environment holding only the artifacts (from main, a sidecar, a collect hook)', async () => {
    const trialDir = path.join(dir, 'jobs', jobName, 'separate-verifier__oracle__1');
    const result = JSON.parse(await readFile(path.join(trialDir, 'result.json'), 'utf8')) as TrialResult;
    const testOutput = await readFile(path.join(trialDir, 'verifier', 'test-stdout.txt'), 'utf8');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 }, testOutput);
    assert.match(testOutput, /ok: \/data\/hook.txt/);
    // Harbor's order: main's hook ran while main was up; the sidecar's after main was stopped.
    assert.match(testOutput, /ok: \/tmp\/main-hook.txt/);
    assert.match(testOutput, /ok: \/data\/main-state.txt/);
    // The artifacts are in the trial folder too, mirroring their source paths.
    const artifact = (file: string) => readFile(path.join(trialDir, 'artifacts', file), 'utf8');
    assert.equal(await artifact('tmp/configured.txt'), 'configured\n');
    assert.equal(await artifact('logs/artifacts/answer.txt'), 'published\n');
    assert.equal(await artifact('data/kept'), 'from-main\n');
    await assert.rejects(artifact('tmp/agent-only.txt'), { code: 'ENOENT' });
    // An artifact's exclude patterns (tar's): neither the log nor the cache folder was copied.
    assert.equal(await artifact('app/out/keep.txt'), 'keep\n');
    await assert.rejects(artifact('app/out/debug.log'), { code: 'ENOENT' });
    await assert.rejects(artifact('app/out/cache'), { code: 'ENOENT' });
  });

  it("removes every container, network, volume and image (sidecars' and the verifier's too) of the job", async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
    assert.deepEqual(await docker.listNetworks(ownedByJob), []);
    assert.deepEqual((await docker.listVolumes(ownedByJob)).Volumes ?? [], []);
    assert.deepEqual(await imagesOfJob(jobName), []);
  });
});

describe('separate verifier settings (task.toml)', () => {
  it("resolves the mode as Harbor does, and refuses 'shared' with [verifier.environment]", () => {
    const parse = (verifier: Record<string, unknown>) => TaskConfigSchema.parse({ verifier });
    assert.equal(separateVerifierEnvironment(parse({})), null);
    assert.equal(separateVerifierEnvironment(parse({ environment_mode: 'shared' })), null);
    assert.equal(separateVerifierEnvironment(parse({ environment_mode: 'separate' }))?.cpus, '1');
    assert.equal(separateVerifierEnvironment(parse({ environment: { cpus: 2 } }))?.cpus, 2);
    const refused = TaskConfigSchema.safeParse({ verifier: { environment_mode: 'shared', environment: {} } });
    assert.equal(refused.success, false);
    assert.deepEqual(refused.error?.issues[0]?.path, ['verifier', 'environment_mode']);
  });
});

describe('docker-compose projects, at the environment level', () => {
  const envJob = `compose-env-${randomBytes(3).toString('hex')}`;
  const hostId = `compose-${TEST_HOST_ID}`;
  const deployment = `compose-test-${TEST_HOST_ID}`;
  const environment = new DockerEnvironment({ hostId, deployment });
  const contextDir = path.join(FIXTURE, 'environment');
  let image: string;
  let envKey: string;
  const start = (trial: string, environmentDir = contextDir) =>
    environment.start({
      image,
      jobName: envJob,
      trialId: `${envJob}/${trial}`,
      trialName: trial,
      workerId: `${hostId}~1`,
      resources: { cpus: 0.5, memoryBytes: 256 * 2 ** 20, storageBytes: 0, pidsLimit: 100 },
      env: {},
      environmentDir,
      envKey,
    });

  before(async () => {
    envKey = await environmentKey(contextDir, null);
    const built = await environment.build({
      contextDir,
      envKey,
      dockerImage: null,
      force: false,
      jobName: envJob,
      timeoutMs: 300_000,
    });
    image = built.image;
  });
  after(async () => {
    for (const trial of ['labels', 'orphans', 'unhealthy']) await environment.removeTrial(`${envJob}/${trial}`);
    await environment.removeImage(image);
    await removeJobLeftovers(envJob);
  });

  it('a sidecar build that re-tags an image Rollout did not choose fails, and the foreign tag is removed (H7)', async () => {
    const key = `h7-${randomBytes(4).toString('hex')}`;
    const mainTag = imageTag(key);
    const ours = `${mainTag}-svc-db`;
    const victim = `rollout-h7-victim-${randomBytes(3).toString('hex')}:latest`;
    // One image with Rollout's sidecar tag and a foreign one, as a build that got around the compose policy makes.
    const labels = [`${LABEL_PART_OF}=${key}`, `${LABEL_ENV_KEY}=${key}`, `${LABEL_JOB}=${envJob}`].flatMap((l) => [
      '--label',
      l,
    ]);
    execFileSync('docker', ['build', '-q', '-t', ours, '-t', victim, ...labels, '-'], {
      input: 'FROM debian:bookworm-slim\n',
    });
    const engine = new DockerEngine({ hostId, deployment });
    await assert.rejects(
      refuseForeignSidecarTags(engine, key, mainTag),
      (err: unknown) => err instanceof TaskEnvironmentError && err.message.includes(victim)
    );
    assert.equal(await engine.imageLabels(victim), undefined, 'the foreign tag is gone');
    assert.ok(await engine.imageLabels(ours), "Rollout's own tag stays");
    await refuseForeignSidecarTags(engine, key, mainTag);
    await docker.getImage(ours).remove();
  });

  it('labels every container, network and volume of the project with its owner, job and trial', async () => {
    const { handle } = await start('labels');
    const main = await docker.getContainer(handle.id).inspect();
    const project = main.Config.Labels[LABEL_COMPOSE_PROJECT];
    assert.ok(project, 'main is a compose container');
    const byProject = { filters: { label: [`${LABEL_COMPOSE_PROJECT}=${project}`] } };
    const containers = await docker.listContainers({ all: true, ...byProject });
    const networks = await docker.listNetworks(byProject);
    const volumes = (await docker.listVolumes(byProject)).Volumes ?? [];
    assert.equal(containers.length, 2, 'main and the store sidecar');
    assert.equal(networks.length, 1, 'one network per trial');
    assert.equal(volumes.length, 1, 'the store-data volume');
    const expected = {
      [LABEL_JOB]: envJob,
      [LABEL_TRIAL]: `${envJob}/labels`,
      [LABEL_HOST]: hostId,
      [LABEL_DEPLOYMENT]: deployment,
    };
    for (const labels of [...containers, ...networks, ...volumes].map((item) => item.Labels ?? {})) {
      for (const [key, value] of Object.entries(expected)) assert.equal(labels[key], value, key);
    }
    const held = await environment.heldEnvironments();
    assert.equal(held.filter((item) => item.trialId === `${envJob}/labels`).length, 2);
    // The janitor removes one held container: the whole project goes.
    await environment.remove({ id: containers.find((c) => c.Id !== handle.id)!.Id, workdir: '/' });
    assert.deepEqual(await docker.listContainers({ all: true, ...byProject }), []);
    assert.deepEqual(await docker.listNetworks(byProject), []);
    assert.deepEqual((await docker.listVolumes(byProject)).Volumes ?? [], []);
  });

  it("the janitor finds a trial's network and volume left without containers, and removes them", async () => {
    await start('orphans');
    const trial = { filters: { label: [`${LABEL_TRIAL}=${envJob}/orphans`] } };
    // A crash between the removal of the containers and of the rest.
    for (const container of await docker.listContainers({ all: true, ...trial })) {
      await docker.getContainer(container.Id).remove({ force: true });
    }
    assert.equal((await docker.listNetworks(trial)).length, 1);
    const held = (await environment.heldEnvironments()).filter((item) => item.trialId === `${envJob}/orphans`);
    assert.equal(held.length, 1);
    await environment.remove({ id: held[0]!.id, workdir: '/' });
    assert.deepEqual(await docker.listNetworks(trial), []);
    assert.deepEqual((await docker.listVolumes(trial)).Volumes ?? [], []);
  });

  it('a sidecar that never becomes healthy is a start error of the task, and nothing of it is left', async () => {
    const unhealthyDir = await mkdtemp(path.join(tmpdir(), 'rollout-compose-unhealthy-'));
    try {
      await writeFile(
        path.join(unhealthyDir, 'docker-compose.yaml'),
        [
          'services:',
          '  main:',
          '    depends_on:',
          '      never:',
          '        condition: service_healthy',
          '  never:',
          '    image: debian:bookworm-slim',
          '    command: ["sleep", "infinity"]',
          '    healthcheck:',
          '      test: ["CMD", "false"]',
          '      interval: 1s',
          '      retries: 2',
          '',
        ].join('\n')
      );
      await assert.rejects(start('unhealthy', unhealthyDir), (err: unknown) => {
        assert.ok(err instanceof TaskEnvironmentError, String(err));
        assert.equal(err.type, 'EnvironmentStartError');
        assert.match(err.message, /docker compose up: .*unhealthy/s);
        return true;
      });
      const trial = { filters: { label: [`${LABEL_TRIAL}=${envJob}/unhealthy`] } };
      assert.deepEqual(await docker.listContainers({ all: true, ...trial }), []);
      assert.deepEqual(await docker.listNetworks(trial), []);
    } finally {
      await rm(unhealthyDir, { recursive: true, force: true });
    }
  });
});
