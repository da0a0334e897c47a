/**
 * The modal environment, Modal's unmodified JS SDK talking gRPC to the stand-in of Modal's API
 * (test/environments/modal/modal-stand-in.ts: local Docker containers behind its sandboxes, local builds behind its images),
 * pointed at through the SDK's own MODAL_SERVER_URL. Not Modal itself: `npm run test:cloud` runs against the real
 * service when credentials are set.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, cp, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';
import { ModalClient } from 'modal';

import type { StartRequest } from '../../../src/contracts/environment';
import { TaskEnvironmentError } from '../../../src/contracts/environment';
import { ModalEnvironment } from '../../../src/environments/modal';
import { modalProvider } from '../../../src/environments/modal/provider';
import { ProviderConfigError } from '../../../src/contracts/provider';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import { removeAbandonedEnvironments } from '../../../workers/janitor';
import type { ModalStandIn } from './modal-stand-in';
import { MODAL_QUOTA_MESSAGE, MODAL_STAND_IN_LABEL, startModalStandIn } from './modal-stand-in';
import { runCli } from '../../support/cli';
import { REPO_ROOT, testTemporal } from '../../support/temporal';
import { ModalSettingsSchema } from '../../../src/environments/modal/settings';
import { environmentRequirement } from '../../../src/environments/index';
import { TaskConfigSchema } from '../../../src/contracts/task-config';

const run = randomBytes(3).toString('hex');
const docker = new Docker();
let dir: string;
let standIn: ModalStandIn;
let environment: ModalEnvironment;
let image: string;
const saved: Record<string, string | undefined> = {};

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (err: unknown) => err
  );

function startRequest(name: string, overrides: Partial<StartRequest> = {}): StartRequest {
  return {
    image,
    jobName: `modal-${run}`,
    trialId: `modal-${run}/${name}`,
    trialName: name,
    workerId: 'h-modal',
    resources: { cpus: 0.5, memoryBytes: 256 * 2 ** 20, storageBytes: 0, pidsLimit: 256 },
    env: { GREETING: 'hello from the sandbox' },
    settings: { app: `rollout-test-${run}` },
    budgetSec: 120,
    ...overrides,
  };
}

async function taskEnvironment(name: string, dockerfile: string, files: Record<string, string> = {}): Promise<string> {
  const contextDir = path.join(dir, name);
  await mkdir(contextDir, { recursive: true });
  await writeFile(path.join(contextDir, 'Dockerfile'), dockerfile);
  for (const [file, text] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(contextDir, file)), { recursive: true });
    await writeFile(path.join(contextDir, file), text);
  }
  return contextDir;
}

const build = (contextDir: string, envKey: string) =>
  environment.build({
    contextDir,
    envKey,
    dockerImage: null,
    force: false,
    jobName: `modal-${run}`,
    timeoutMs: 120_000,
    settings: { app: `rollout-test-${run}` },
  });

/** Containers of this stand-in instance on the Docker engine. */
const standInContainers = () =>
  docker.listContainers({ all: true, filters: { label: [`${MODAL_STAND_IN_LABEL}=${standIn.instance}`] } });

describe('modal environment (the SDK against the stand-in of Modal’s API)', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-modal-'));
    standIn = await startModalStandIn();
    for (const [key, value] of Object.entries(standIn.env)) {
      saved[key] = process.env[key];
      process.env[key] = value;
    }
    environment = new ModalEnvironment({
      hostId: 'h-modal',
      deployment: `test-${run}`,
      quotaWaitMs: 5000,
    });
    const contextDir = await taskEnvironment(
      'task',
      [
        'FROM debian:bookworm-slim',
        '# a comment, and a continued line',
        'WORKDIR /app',
        'ENV MARK=from-the-dockerfile',
        'COPY data/ ./data/',
        'COPY run.sh /usr/local/bin/run-it',
        'RUN chmod +x /usr/local/bin/run-it && \\',
        '    echo built > /app/built.txt',
      ].join('\n'),
      { 'data/a.txt': 'alpha\n', 'data/sub/b.txt': 'beta\n', 'run.sh': '#!/bin/sh\necho ran "$@"\n' }
    );
    const built = await build(contextDir, `k${run}`);
    assert.equal(built.built, true);
    image = built.image;
  });
  after(async () => {
    await standIn.stop();
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    await rm(dir, { recursive: true, force: true });
    assert.deepEqual(await standInContainers(), [], 'no sandbox container is left');
  });

  it('checks credentials before a job: one line naming the variables, or the profile of ~/.modal.toml', async () => {
    const keys = ['MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET', 'MODAL_CONFIG_PATH', 'MODAL_PROFILE'] as const;
    const before = Object.fromEntries(keys.map((key) => [key, process.env[key]]));
    try {
      for (const key of keys) delete process.env[key];
      process.env.MODAL_CONFIG_PATH = path.join(dir, 'absent.toml');
      const missing = await failure(modalProvider.check!({}));
      assert.ok(missing instanceof ProviderConfigError && missing.kind === 'input');
      assert.match(missing.message, /^modal: no credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/);
      process.env.MODAL_TOKEN_ID = 'ak-x';
      assert.match(String(await failure(modalProvider.check!({}))), /MODAL_TOKEN_SECRET is not set/);
      delete process.env.MODAL_TOKEN_ID;
      const toml = path.join(dir, 'modal.toml');
      await writeFile(toml, '[work]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\nactive = true\n');
      process.env.MODAL_CONFIG_PATH = toml;
      await modalProvider.check!({});
      await writeFile(toml, '[work]\ntoken_id = "ak-1"\n');
      assert.match(String(await failure(modalProvider.check!({}))), /no active profile/);
    } finally {
      for (const key of keys) {
        if (before[key] === undefined) delete process.env[key];
        else process.env[key] = before[key];
      }
    }
  });

  it('builds a Dockerfile (COPY included) once: the same environment is Modal’s cached image', async () => {
    assert.match(image, /^im-/);
    const joins = standIn.calls.get('ImageJoinStreaming');
    const again = await build(path.join(dir, 'task'), `k${run}`);
    assert.deepEqual(again, { image, built: false }, 'found built: not this build’s to release');
    assert.equal(standIn.calls.get('ImageJoinStreaming'), joins, 'no second build');
  });

  it('rollout build prebuilds a modal job’s environments on Modal; a job then finds them built', async () => {
    const tasks = path.join(dir, 'cli', 'tasks');
    await cp(path.join(REPO_ROOT, 'examples', 'tasks', 'word-count'), path.join(tasks, 'word-count'), {
      recursive: true,
    });
    await writeFile(
      path.join(dir, 'cli', 'job.yaml'),
      `environment:\n  type: modal\n  app: rollout-test-${run}\nagents:\n  - name: oracle\ndatasets:\n  - path: tasks\n`
    );
    const first = await runCli(['build', 'job.yaml'], { cwd: path.join(dir, 'cli'), env: standIn.env });
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stderr, /\] (im-\w+) \(word-count\): built in/);
    const second = await runCli(['build', 'job.yaml'], { cwd: path.join(dir, 'cli'), env: standIn.env });
    assert.match(second.stderr, /\] (im-\w+) \(word-count\): already built/);
    const prebuilt = /\] (im-\w+) /.exec(first.stderr)![1]!;
    const job = await build(path.join(tasks, 'word-count', 'environment'), 'word-count');
    assert.deepEqual(job, { image: prebuilt, built: false }, 'a prebuilt image is no job’s to release');
    const denied = await runCli(['build', 'job.yaml'], {
      cwd: path.join(dir, 'cli'),
      env: { MODAL_TOKEN_ID: '', MODAL_TOKEN_SECRET: '', MODAL_CONFIG_PATH: path.join(dir, 'none.toml') },
    });
    assert.equal(denied.code, 2);
    assert.match(denied.stderr, /modal: no credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/);
  });

  it('a Dockerfile that fails to build, or has two stages, is the task’s EnvironmentBuildError', async () => {
    const broken = await taskEnvironment('broken', 'FROM debian:bookworm-slim\nRUN echo doomed && exit 3\n');
    const failed = await failure(build(broken, `b${run}`));
    assert.ok(failed instanceof TaskEnvironmentError, String(failed));
    assert.equal(failed.type, 'EnvironmentBuildError');
    const staged = await taskEnvironment('staged', 'FROM debian:bookworm-slim AS a\nFROM debian:bookworm-slim\n');
    const refused = await failure(build(staged, `s${run}`));
    assert.ok(refused instanceof TaskEnvironmentError);
    assert.match(refused.message, /multi-stage/);
  });

  it('GPU sandboxes take the SDK’s V1 path (SandboxCreate, scheduling, TaskGetCommandRouterAccess, an ephemeral secret for env)', async () => {
    // A trial id with "/", "_" and more than 63 characters: written as tags within Modal's rule, read back whole.
    const trialId = `modal-${run}/${'gpu_trial__agent.x__'.repeat(5)}1`;
    const created = standIn.calls.get('SandboxCreate') ?? 0;
    const settings = { app: `rollout-test-${run}`, gpu: 'l4' };
    const { handle } = await environment.start(startRequest('gpu', { trialId, gpus: 2, settings }));
    try {
      assert.match(handle.id, /^sb-[0-9A-Za-z]{22}$/, 'a V1 sandbox id');
      assert.equal(standIn.calls.get('SandboxCreate'), created + 1);
      assert.ok((standIn.calls.get('TaskGetCommandRouterAccess') ?? 0) > 0);
      assert.ok((standIn.calls.get('SecretGetOrCreate') ?? 0) > 0);
      const seen = await environment.exec(handle, { command: 'echo "$GREETING"' });
      assert.equal(seen.stdout, 'hello from the sandbox\n');
      const held = await environment.heldEnvironments();
      assert.ok(
        held.some((one) => one.id === handle.id && one.trialId === trialId),
        JSON.stringify(held)
      );
      assert.equal(await environment.removeTrial(trialId, settings), 1);
      assert.equal(await environment.isRunning(handle), false);
    } finally {
      await environment.remove(handle);
    }
  });

  it('refuses a GPU type Modal lacks and a GPU task with none named, before the job; the stand-in refuses `any` and raw tags', async () => {
    assert.equal(ModalSettingsSchema.safeParse({ gpu: 'any' }).success, false);
    assert.equal(ModalSettingsSchema.safeParse({ gpu: 'h100!' }).success, true);
    const taskDir = path.dirname(
      await taskEnvironment(path.join('gpu-task', 'environment'), 'FROM debian:bookworm-slim\n')
    );
    const task = { dir: taskDir, config: TaskConfigSchema.parse({ environment: { gpus: 2 } }) };
    const [unnamed] = await environmentRequirement({ type: 'modal' })(task);
    assert.equal(unnamed?.field, 'environment.gpus');
    assert.match(unnamed.message, /set environment\.gpu in job\.yaml to one of Modal's types \(T4, L4/);
    const tooMany = { ...task, config: TaskConfigSchema.parse({ environment: { gpus: 5 } }) };
    assert.match((await environmentRequirement({ type: 'modal', gpu: 'A10' })(tooMany))[0]!.message, /at most 4 A10/);
    assert.deepEqual(await environmentRequirement({ type: 'modal', gpu: 'A10' })(task), []);
    // The SDK itself, unmodified, against the stand-in's rules.
    const client = new ModalClient({ logger: { debug() {}, info() {}, warn() {}, error() {} } });
    const app = await client.apps.fromName(`rollout-test-${run}`, { createIfMissing: true });
    const built = await client.images.fromId(image);
    const anyGpu = await failure(client.sandboxes.create(app, built, { gpu: 'any:1' }));
    assert.match(String(anyGpu), /Unknown GPU type: 'ANY'/);
    const rawTag = await failure(client.sandboxes.create(app, built, { tags: { 'rollout.trial': 'job/trial' } }));
    assert.match(String(rawTag), /tags may only contain alphanumeric characters/);
    assert.deepEqual(await standIn.sandboxes(), [], 'nothing was left running');
  });

  it('the janitor lists every Modal Environment of the workspace, not only the default one', async () => {
    const staging = `staging-${run}`;
    standIn.addEnvironment(staging);
    const settings = { app: `rollout-test-${run}`, environment: staging };
    const request = startRequest('staged', { settings });
    const { handle } = await environment.start(request);
    try {
      const held = await environment.heldEnvironments();
      assert.deepEqual(held, [{ id: handle.id, trialId: request.trialId, workerId: null }]);
    } finally {
      await environment.remove(handle);
    }
    const elsewhere = await failure(
      environment.start(startRequest('nowhere', { settings: { ...settings, environment: `absent-${run}` } }))
    );
    // The stand-in's NOT_FOUND, as the SDK words it.
    assert.match(String(elsewhere), /NotFoundError: App 'rollout-test-[0-9a-f]+' not found/);
  });

  describe('with a running sandbox', () => {
    let handle: EnvironmentHandle;
    let unenforced: string[];
    before(async () => {
      ({ handle, unenforced } = await environment.start(
        startRequest('exec', { files: [{ containerPath: '/rollout/instruction.md', text: 'do it\n' }] })
      ));
    });
    after(() => environment.remove(handle));

    it('starts as the request asks: the image’s workdir, files, env, CPU and memory limits, tags', async () => {
      assert.equal(handle.workdir, '/app');
      assert.deepEqual(unenforced, ['pids']);
      const seen = await environment.exec(handle, {
        command: 'echo "$GREETING/$MARK"; cat built.txt data/a.txt data/sub/b.txt /rollout/instruction.md; run-it x',
      });
      assert.equal(seen.stdout, 'hello from the sandbox/from-the-dockerfile\nbuilt\nalpha\nbeta\ndo it\nran x\n');
      const [container] = await standInContainers();
      const info = await docker.getContainer(container!.Id).inspect();
      assert.equal(info.HostConfig.NanoCpus, 0.5e9);
      assert.equal(info.HostConfig.Memory, 256 * 2 ** 20);
      assert.deepEqual(info.Config.Cmd, ['sleep', 'infinity']);
      const held = await environment.heldEnvironments();
      assert.deepEqual(held, [{ id: handle.id, trialId: `modal-${run}/exec`, workerId: null }]);
    });

    it('execs with exit codes, env, cwd and another user (through su)', async () => {
      const ok = await environment.exec(handle, { command: 'echo "$EXTRA"; pwd', cwd: '/tmp', env: { EXTRA: 'x y' } });
      assert.deepEqual([ok.exitCode, ok.stdout], [0, 'x y\n/tmp\n']);
      const failed = await environment.exec(handle, { command: 'echo oops >&2; exit 7' });
      assert.deepEqual([failed.exitCode, failed.stderr], [7, 'oops\n']);
      const other = await environment.exec(handle, {
        command: 'id -un; echo "$EXTRA"',
        user: 'nobody',
        env: { EXTRA: 'e' },
      });
      assert.equal(other.stdout, 'nobody\ne\n');
    });

    it('kills every process the command started when its timeout passes, daemons included; killAll likewise', async () => {
      const result = await environment.exec(handle, {
        command: 'nohup sleep 311 >/dev/null 2>&1 & setsid sleep 312 >/dev/null 2>&1 & sleep 313',
        timeoutMs: 1_500,
      });
      assert.deepEqual([result.timedOut, result.exitCode], [true, null]);
      const processes = 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "';
      assert.doesNotMatch((await environment.exec(handle, { command: processes })).stdout, /sleep 31[123]/);
      await environment.exec(handle, { command: 'setsid nohup sleep 314 >/dev/null 2>&1 &' });
      assert.match((await environment.exec(handle, { command: processes })).stdout, /sleep 314/);
      await environment.killAll(handle);
      assert.doesNotMatch((await environment.exec(handle, { command: processes })).stdout, /sleep 314/);
      assert.equal(await environment.isRunning(handle), true, 'the sandbox is still up');
    });

    it('uploads by tar over exec stdin and downloads only files and folders, never through links', async () => {
      const source = path.join(dir, 'upload');
      await mkdir(path.join(source, 'sub'), { recursive: true });
      await writeFile(path.join(source, 'sub', 'a.txt'), 'alpha\n');
      await writeFile(path.join(source, 'big.bin'), randomBytes(3 * 1024 * 1024));
      await chmod(path.join(source, 'sub', 'a.txt'), 0o755);
      await environment.upload(handle, source, ['/data/in', '/data/copy']);
      const read = await environment.exec(handle, {
        command: 'cat /data/in/sub/a.txt /data/copy/sub/a.txt; stat -c %s /data/in/big.bin',
      });
      assert.equal(read.stdout, `alpha\nalpha\n${3 * 1024 * 1024}\n`);
      await environment.exec(handle, {
        command:
          'mkdir -p /logs/agent/deep && echo log > /logs/agent/deep/run.txt && ln -s /etc/passwd /logs/agent/link',
      });
      const target = path.join(dir, 'collected');
      await mkdir(target);
      await environment.download(handle, '/logs/agent', target);
      assert.equal(await readFile(path.join(target, 'deep', 'run.txt'), 'utf8'), 'log\n');
      assert.deepEqual(await readdir(target), ['deep']);
      await environment.download(handle, '/logs/none', target); // nothing there: no error
      await environment.download(handle, '/data/in', path.join(dir, 'back'));
      assert.deepEqual(await readFile(path.join(dir, 'back', 'big.bin')), await readFile(path.join(source, 'big.bin')));
    });

    it('opens a process with stdin and stdout streamed both ways (the gateway relay’s channel)', async () => {
      let out = '';
      const process = await environment.openProcess(handle, {
        command: 'while read -r line; do echo "got $line $SIDE"; done',
        env: { SIDE: 'in' },
        onStdout: (chunk) => (out += chunk),
      });
      await process.write('one\n');
      await process.write('two\n');
      const deadline = Date.now() + 30_000;
      while (!out.includes('got two in') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.equal(out, 'got one in\ngot two in\n');
      await process.kill();
      assert.equal(await process.exited, 0, 'closing its stdin ended it');
    });

    it('cuts the sandbox off and connects it again through Modal’s network policy', async () => {
      const networks = async () => {
        const [container] = await standInContainers();
        return Object.keys((await docker.getContainer(container!.Id).inspect()).NetworkSettings.Networks);
      };
      await environment.setNetwork(handle, 'none');
      assert.deepEqual(await networks(), []);
      await environment.setNetwork(handle, 'public');
      assert.deepEqual(await networks(), ['bridge']);
    });

    it('takes an install snapshot (a filesystem snapshot) any worker finds, and a sandbox starts from it', async () => {
      await environment.exec(handle, { command: 'echo installed > /opt/agent.txt' });
      const snapshot = await environment.snapshots.take(handle, 'key-1', 'agent@1');
      assert.match(snapshot, /^im-/);
      assert.equal(await environment.snapshots.find(image, 'key-1'), snapshot);
      assert.equal(await environment.snapshots.find(image, 'key-2'), null);
      const other = new ModalEnvironment({ hostId: 'h-other', deployment: `test-${run}` });
      assert.equal(await other.snapshots.find(image, 'key-1'), snapshot, 'found by another worker');
      const started = await environment.start(startRequest('from-snapshot', { image: snapshot }));
      try {
        const seen = await environment.exec(started.handle, { command: 'cat /opt/agent.txt built.txt' });
        assert.equal(seen.stdout, 'installed\nbuilt\n');
        assert.equal(started.handle.workdir, '/app');
      } finally {
        await environment.remove(started.handle);
      }
    });

    it('keeps the image while a sandbox runs from it; releases it after', async () => {
      assert.equal(await environment.removeImage(image), false);
    });
  });

  it('waits on Modal’s quota reply, then fails as infrastructure with Modal’s message', async () => {
    standIn.failNextCreates(2);
    const { handle } = await environment.start(startRequest('quota'));
    await environment.remove(handle);
    standIn.failNextCreates(5);
    const refused = await failure(environment.start(startRequest('quota')));
    standIn.failNextCreates(0);
    assert.ok(refused instanceof Error && !(refused instanceof TaskEnvironmentError), String(refused));
    assert.ok(refused.message.includes(MODAL_QUOTA_MESSAGE), refused.message);
  });

  it('removeTrial removes what an earlier attempt left; the janitor removes a sandbox whose trial is not running', async () => {
    const first = await environment.start(startRequest('again'));
    await environment.start(startRequest('again'));
    assert.ok(!(await standIn.sandboxes()).includes(first.handle.id), 'the second start removed the first');
    assert.equal(await environment.removeTrial(`modal-${run}/again`), 1);
    assert.deepEqual(await standIn.sandboxes(), []);
    const orphan = await environment.start(startRequest('orphan'));
    const { client, connection } = await testTemporal();
    try {
      const removed = await removeAbandonedEnvironments(client, environment, {
        type: 'modal',
        checkRunningTrials: true,
      });
      assert.equal(removed, 1);
    } finally {
      await connection.close();
    }
    assert.equal(await environment.isRunning(orphan.handle), false);
    assert.deepEqual(await environment.heldEnvironments(), []);
  });

  it('releases the image once no sandbox runs from it', async () => {
    const tag = standIn.localImage(image);
    assert.ok(tag);
    assert.equal(await environment.removeImage(image), true);
    assert.equal(standIn.localImage(image), null);
    assert.equal(
      await docker
        .getImage(tag)
        .inspect()
        .catch(() => null),
      null,
      'the local image went with it'
    );
  });
});
