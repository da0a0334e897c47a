/**
 * LocalEnvironment (host processes in a temporary root): path mapping, exec with environment and process-group kill on
 * timeout and abort, copies that skip links and never write through them, removal; and what each environment type
 * requires of a task's environment/ folder.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { environmentRequirement } from '../../../src/environments';
import { LocalEnvironment, mapContainerPath } from '../../../src/environments/local';
import { TaskConfigSchema } from '../../../src/contracts/task-config';
import type { StartRequest } from '../../../src/contracts/environment';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import { waitFor } from '../../support/wait';

const environment = new LocalEnvironment({ hostId: 'test', deployment: 'local-test' });
const runId = randomBytes(3).toString('hex');
const trialId = `local-test-${runId}/trial-1`;
const scratch: string[] = [];
let handle: EnvironmentHandle;

function startRequest(env: Record<string, string> = {}): StartRequest {
  const resources = { cpus: 1, memoryBytes: 2 ** 30, storageBytes: 2 ** 30, pidsLimit: 100 };
  return {
    image: 'local',
    jobName: `local-test-${runId}`,
    trialId,
    trialName: 'trial-1',
    workerId: 'test',
    resources,
    env,
  };
}

/** A `sleep` duration no other process on the host is likely to use, to find the command's processes by. */
function uniqueSleep(): string {
  return `sleep 300.${parseInt(randomBytes(3).toString('hex'), 16)}`;
}

async function scratchDir(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-local-test-'));
  scratch.push(dir);
  return dir;
}

/** Host processes whose command line contains `marker`. */
async function processesWith(marker: string): Promise<number> {
  let count = 0;
  for (const pid of (await readdir('/proc')).filter((name) => /^\d+$/.test(name))) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.split('\0').join(' ').includes(marker)) count++;
  }
  return count;
}

describe('LocalEnvironment', () => {
  before(async () => {
    const started = await environment.start(startRequest({ ROLLOUT_TASK_INSTRUCTION: 'say "hi"' }));
    handle = started.handle;
    assert.deepEqual(started.unenforced, ['cpus', 'memory', 'storage', 'pids']);
  });
  after(async () => {
    await environment.removeTrial(trialId);
    await Promise.all(scratch.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it('builds nothing and starts in a fresh root with logs and app folders', async () => {
    assert.deepEqual(await environment.build(), { image: 'local', built: false });
    assert.equal(handle.workdir, path.join(handle.id, 'app'));
    for (const dir of ['logs/agent', 'logs/verifier', 'app']) {
      assert.ok((await stat(path.join(handle.id, dir))).isDirectory(), dir);
    }
  });

  it('maps the container paths Rollout uses into the root, and no others', () => {
    const root = '/tmp/root';
    assert.equal(mapContainerPath(root, '/logs/agent'), '/tmp/root/logs/agent');
    assert.equal(mapContainerPath(root, '/installed-agent'), '/tmp/root/installed-agent');
    assert.equal(mapContainerPath(root, '/app/src/../main.py'), '/tmp/root/app/main.py');
    assert.equal(mapContainerPath(root, '/logs/../etc/passwd'), '/logs/../etc/passwd', 'not under /logs');
    assert.equal(mapContainerPath(root, '/application'), '/application');
    assert.equal(mapContainerPath(root, '/tmp/x'), '/tmp/x');
  });

  it('runs commands with the start, Rollout and request variables, in the mapped folder', async () => {
    const result = await environment.exec(handle, {
      command: 'echo "$ROLLOUT_TASK_INSTRUCTION|$GREETING|$ROLLOUT_LOGS_DIR|$(pwd)"; echo oops >&2; exit 3',
      env: { GREETING: 'hello' },
    });
    assert.deepEqual(result, {
      exitCode: 3,
      stdout: `say "hi"|hello|${handle.id}/logs|${handle.id}/app\n`,
      stderr: 'oops\n',
      timedOut: false,
    });
    const inLogs = await environment.exec(handle, { command: 'pwd', cwd: '/logs/agent' });
    assert.equal(inLogs.stdout, `${handle.id}/logs/agent\n`);
  });

  it("gives commands only the variables they were given, not the worker's own environment", async () => {
    process.env.ROLLOUT_TEST_WORKER_CREDENTIAL = 'worker-only-value';
    try {
      const result = await environment.exec(handle, {
        command: 'echo "[$ROLLOUT_TEST_WORKER_CREDENTIAL]"; env | cut -d= -f1 | sort | tr "\\n" " "',
        env: { GIVEN: '1' },
      });
      assert.match(result.stdout, /^\[\]\n/);
      const names = result.stdout.split('\n')[1]!.trim().split(' ');
      assert.ok(names.includes('GIVEN') && names.includes('PATH') && names.includes('ROLLOUT_ROOT'), names.join());
      assert.ok(!names.includes('ROLLOUT_TEST_WORKER_CREDENTIAL'));
    } finally {
      delete process.env.ROLLOUT_TEST_WORKER_CREDENTIAL;
    }
  });

  it('kills every process commands started, also those that left their process group', async () => {
    const sleep = uniqueSleep();
    const result = await environment.exec(handle, { command: `setsid ${sleep} >/dev/null 2>&1 & echo started` });
    assert.equal(result.stdout, 'started\n');
    // setsid may not have exec'd the sleep yet when the command returns: wait for it, bounded.
    await waitFor(
      'the detached process running after the command ended',
      async () => (await processesWith(sleep)) === 1,
      10_000
    );
    await environment.killAll(handle);
    await waitFor('the detached process killed', async () => (await processesWith(sleep)) === 0, 10_000);
  });

  it('kills the whole process group when the timeout passes', async () => {
    const sleep = uniqueSleep();
    const result = await environment.exec(handle, {
      command: `${sleep} & (${sleep} &) ; echo started; ${sleep}`,
      timeoutMs: 1000,
    });
    assert.equal(result.timedOut, true);
    assert.equal(result.exitCode, null);
    assert.equal(result.stdout, 'started\n');
    assert.equal(await processesWith(sleep), 0, 'no process of the command survived');
  });

  it('kills the process group and rejects with the reason when aborted', async () => {
    const sleep = uniqueSleep();
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('trial cancelled')), 500);
    await assert.rejects(
      environment.exec(handle, { command: `${sleep} & ${sleep}`, signal: controller.signal }),
      /trial cancelled/
    );
    assert.equal(await processesWith(sleep), 0);
  });

  it('does not wait for a background process that keeps its output open', async () => {
    const sleep = uniqueSleep();
    const result = await environment.exec(handle, { command: `${sleep} & echo done` });
    assert.deepEqual(result, { exitCode: 0, stdout: 'done\n', stderr: '', timedOut: false });
    assert.equal(await processesWith(sleep), 1, 'returned while the background process still ran');
    await environment.killAll(handle);
    await waitFor('the background process killed', async () => (await processesWith(sleep)) === 0, 10_000);
  });

  it('uploads a folder into the path and a file as path/<name>, without links', async () => {
    const source = await scratchDir();
    await mkdir(path.join(source, 'nested'));
    await writeFile(path.join(source, 'nested', 'a.txt'), 'A');
    await writeFile(path.join(source, 'run.sh'), 'echo run');
    await chmod(path.join(source, 'run.sh'), 0o755);
    await symlink('/etc/passwd', path.join(source, 'passwd-link'));
    await environment.upload(handle, source, '/tests');
    await environment.upload(handle, path.join(source, 'run.sh'), '/installed-agent');
    const tests = path.join(handle.id, 'tests');
    assert.deepEqual((await readdir(tests)).sort(), ['nested', 'run.sh']);
    assert.equal(await readFile(path.join(tests, 'nested', 'a.txt'), 'utf8'), 'A');
    const script = path.join(handle.id, 'installed-agent', 'run.sh');
    assert.equal((await stat(script)).mode & 0o777, 0o755, 'mode kept');
  });

  it('downloads regular files only, replacing links on the host instead of writing through them', async () => {
    const logs = path.join(handle.id, 'logs');
    await writeFile(path.join(logs, 'agent', 'trace.txt'), 'trace');
    await symlink('/etc/passwd', path.join(logs, 'agent', 'passwd-link'));
    await symlink('/etc', path.join(logs, 'etc-link'));
    await writeFile(path.join(logs, 'agent', 'victim.txt'), 'attack');
    const target = await scratchDir();
    const outside = path.join(await scratchDir(), 'victim.txt');
    await writeFile(outside, 'untouched');
    await mkdir(path.join(target, 'agent'));
    await symlink(outside, path.join(target, 'agent', 'victim.txt'));

    await environment.download(handle, '/logs', target);
    assert.deepEqual((await readdir(path.join(target, 'agent'))).sort(), ['trace.txt', 'victim.txt']);
    assert.deepEqual((await readdir(target)).sort(), ['agent', 'verifier']);
    assert.equal(await readFile(outside, 'utf8'), 'untouched');
    assert.equal((await lstat(path.join(target, 'agent', 'victim.txt'))).isFile(), true);
    assert.equal(await readFile(path.join(target, 'agent', 'victim.txt'), 'utf8'), 'attack');

    const missing = path.join(await scratchDir(), 'not-created');
    await environment.download(handle, '/logs/nothing-here', missing);
    assert.equal(existsSync(missing), false);
  });

  it('removes its root, and every root of a trial', async () => {
    const second = await environment.start(startRequest());
    await environment.remove(second.handle);
    assert.equal(existsSync(second.handle.id), false);
    await environment.remove(second.handle);
    await environment.start(startRequest());
    assert.equal(await environment.removeTrial(trialId), 2, 'the first root and the one just started');
    assert.equal(existsSync(handle.id), false);
    assert.equal(await environment.removeTrial(trialId), 0);
    assert.equal(await environment.removeImage(), true);
  });
});

describe('environmentRequirement', () => {
  async function taskWith(files: Record<string, string>) {
    const dir = await scratchDir();
    await mkdir(path.join(dir, 'environment'));
    for (const [name, text] of Object.entries(files)) await writeFile(path.join(dir, 'environment', name), text);
    return dir;
  }
  const config = (environment: Record<string, unknown> = {}) => TaskConfigSchema.parse({ version: '1.0', environment });
  after(() => Promise.all(scratch.map((dir) => rm(dir, { recursive: true, force: true }))));

  it('docker needs environment/Dockerfile or a docker_image', async () => {
    const docker = environmentRequirement({ type: 'docker' });
    const empty = await taskWith({});
    assert.deepEqual(await docker({ dir: empty, config: config() }), [
      {
        file: path.join(empty, 'environment', 'Dockerfile'),
        message:
          'missing (the docker environment builds environment/Dockerfile, or set environment.docker_image in task.toml)',
      },
    ]);
    assert.deepEqual(await docker({ dir: empty, config: config({ docker_image: 'debian:bookworm-slim' }) }), []);
    assert.deepEqual(await docker({ dir: await taskWith({ Dockerfile: 'FROM scratch' }), config: config() }), []);
  });

  it('docker takes a docker-compose file beside the Dockerfile, and still needs the Dockerfile for main', async () => {
    const compose = { 'docker-compose.yml': 'services: {}' };
    const withDockerfile = await taskWith({ ...compose, Dockerfile: 'FROM scratch' });
    assert.deepEqual(await environmentRequirement({ type: 'docker' })({ dir: withDockerfile, config: config() }), []);
    const dir = await taskWith(compose);
    const [problem, ...rest] = await environmentRequirement({ type: 'docker' })({ dir, config: config() });
    assert.deepEqual(rest, []);
    assert.equal(problem?.file, path.join(dir, 'environment', 'Dockerfile'));
  });

  it('kubernetes needs an image_registry for a Dockerfile, and refuses docker-compose', async () => {
    const dir = await taskWith({ Dockerfile: 'FROM scratch' });
    const [problem, ...rest] = await environmentRequirement({ type: 'kubernetes', namespace: 'evals' })({
      dir,
      config: config(),
    });
    assert.deepEqual(rest, []);
    assert.match(problem?.message ?? '', /set environment\.image_registry in job\.yaml/);
    // A docker_image beside a Dockerfile: the Dockerfile is built all the same, so the registry is needed too.
    const both = config({ docker_image: 'debian:bookworm-slim' });
    const [bothProblem] = await environmentRequirement({ type: 'kubernetes', namespace: 'evals' })({
      dir,
      config: both,
    });
    assert.equal(bothProblem?.field, 'environment.image_registry');
    assert.match(bothProblem?.message ?? '', /built even though task\.toml sets environment\.docker_image/);
    const withRegistry = environmentRequirement({
      type: 'kubernetes',
      namespace: 'evals',
      image_registry: 'registry.example/team',
    });
    assert.deepEqual(await withRegistry({ dir, config: config() }), []);
    const compose = await taskWith({ Dockerfile: 'FROM scratch', 'docker-compose.yaml': 'services: {}' });
    const [composeProblem] = await withRegistry({ dir: compose, config: config() });
    assert.equal(composeProblem?.file, path.join(compose, 'environment', 'docker-compose.yaml'));
  });

  it('local needs nothing', async () => {
    assert.deepEqual(
      await environmentRequirement({ type: 'local' })({ dir: await taskWith({}), config: config() }),
      []
    );
  });
});
