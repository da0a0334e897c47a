/**
 * DockerEnvironment against the real Docker engine (never skipped: an unreachable daemon fails the suite with the
 * reason): build once per content hash, build failures, resource limits, exec with a timeout that kills every process,
 * uploads, downloads that never follow links or leave the target folder, and removal by label.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';
import tarStream from 'tar-stream';

import { DockerEnvironment } from '../../../src/environments/docker';
import { environmentKey } from '../../../src/environments/env-key';
import type { BuildRequest, StartRequest } from '../../../src/contracts/environment';
import {
  LABEL_ENV_KEY,
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_WORKER,
  LABEL_JOB,
  LABEL_TRIAL,
  TaskEnvironmentError,
} from '../../../src/contracts/environment';
import { CollectBudget, extractArchive } from '../../../src/environments/host-files';
import { collectArtifacts } from '../../../src/trial/artifacts';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import { containersOfJob, removeJobLeftovers } from '../../support/docker';
import { TEST_HOST_ID } from '../../support/temporal';

const docker = new Docker();
const jobName = `env-test-${randomBytes(3).toString('hex')}`;
const hostId = `env-${TEST_HOST_ID}`;
const deployment = `env-test-${TEST_HOST_ID}`;
const environment = new DockerEnvironment({ hostId, deployment });
const scratch: string[] = [];
let image: string;
let handle: EnvironmentHandle;
/** What the first start reported as not enforced (the storage limit, on a daemon that cannot take it). */
let firstUnenforced: string[] = [];

async function scratchDir(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-docker-test-'));
  scratch.push(dir);
  return dir;
}

/** A build context holding just this Dockerfile, and the build request for it. */
async function contextWith(dockerfile: string, overrides: Partial<BuildRequest> = {}): Promise<BuildRequest> {
  const contextDir = await scratchDir();
  await writeFile(path.join(contextDir, 'Dockerfile'), dockerfile);
  const envKey = await environmentKey(contextDir, null);
  return { contextDir, envKey, dockerImage: null, force: false, jobName, timeoutMs: 120_000, ...overrides };
}

function startRequest(trial: string, overrides: Partial<StartRequest> = {}): StartRequest {
  return {
    image,
    jobName,
    trialId: `${jobName}/${trial}`,
    trialName: trial,
    workerId: `${hostId}~2`,
    resources: { cpus: 0.5, memoryBytes: 256 * 2 ** 20, storageBytes: 2 ** 30, pidsLimit: 100 },
    env: {},
    ...overrides,
  };
}

function isBuildError(pattern: RegExp) {
  return (err: unknown) => {
    assert.ok(err instanceof TaskEnvironmentError, `a TaskEnvironmentError, not ${String(err)}`);
    assert.equal(err.type, 'EnvironmentBuildError');
    assert.match(err.message, pattern);
    return true;
  };
}

/**
 * PID and name of every live process in the container, listed with shell builtins only (so only the shell itself
 * shows). Killed orphans stay as zombies: PID 1 (`sleep`) never reaps them.
 */
const LIST_PROCESSES =
  'for p in /proc/[0-9]*; do read -r pid name state rest < "$p/stat"; [ "$state" = Z ] || echo "$pid $name"; done';

describe('DockerEnvironment', () => {
  before(async () => {
    await environment.ping(); // fails the suite, with the reason, when the daemon is unreachable
  });
  after(async () => {
    await removeJobLeftovers(jobName);
    await Promise.all(scratch.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it('reports an unreachable daemon in one line with its address', async () => {
    const nowhere = new DockerEnvironment({
      hostId,
      deployment,
      docker: new Docker({ socketPath: '/nonexistent/docker.sock' }),
    });
    await assert.rejects(nowhere.ping(), /^Error: Docker daemon unreachable at \/nonexistent\/docker.sock: .*ENOENT/);
  });

  it('builds an environment once per content hash, labelled with the job and key', async () => {
    const request = await contextWith(`FROM debian:bookworm-slim\nWORKDIR /work\nRUN echo ${jobName} > /built.txt\n`);
    const lines: string[] = [];
    // Only the trial whose build runs sees its output (either one here); the other waits for that build.
    const onOutput = (line: string) => lines.push(line);
    const [first, concurrent] = await Promise.all([
      environment.build({ ...request, onOutput }),
      environment.build({ ...request, onOutput }),
    ]);
    image = first.image;
    assert.equal(first.built, true);
    assert.match(first.image, new RegExp(`^rollout-env:${request.envKey}-[0-9a-f]{12}$`), "the job's reference tag");
    assert.deepEqual(concurrent, first);
    assert.ok(
      lines.some((line) => line.includes('WORKDIR /work')),
      'build output passed on'
    );
    const built = await docker.getImage(image).inspect();
    assert.equal(built.Config.Labels[LABEL_JOB], jobName);
    assert.equal(built.Config.Labels[LABEL_ENV_KEY], request.envKey);

    const again: string[] = [];
    assert.deepEqual(await environment.build({ ...request, onOutput: (line) => again.push(line) }), first);
    assert.deepEqual(again, [], 'no second build');
    assert.equal((await docker.getImage(image).inspect()).Id, built.Id);
    await environment.build({ ...request, force: true });
    assert.equal((await docker.getImage(image).inspect()).Id, built.Id, 'force_build: built once per job only');
  });

  it('rebuilds under force_build when another job built the image', async () => {
    const otherJob = `${jobName}-other`;
    const request = await contextWith(`FROM debian:bookworm-slim\nRUN echo ${otherJob} > /other.txt\n`, {
      jobName: otherJob,
    });
    try {
      const { image: reference } = await environment.build(request);
      const tag = `rollout-env:${request.envKey}`;
      const before = await docker.getImage(tag).inspect();
      const rebuilt = await environment.build({ ...request, force: true, jobName });
      const after = await docker.getImage(tag).inspect();
      assert.notEqual(after.Id, before.Id);
      assert.equal(after.Config.Labels[LABEL_JOB], jobName);
      assert.equal((await docker.getImage(rebuilt.image).inspect()).Id, after.Id);
      assert.equal((await docker.getImage(reference).inspect()).Id, before.Id, 'the other job keeps its image');
    } finally {
      await removeJobLeftovers(otherJob);
    }
  });

  it('removes an image only for the job that built it, and only once no other job references it', async () => {
    const builder = `${jobName}-builder`;
    const keeper = `${jobName}-keeper`;
    const request = await contextWith(`FROM debian:bookworm-slim\nRUN echo ${builder} > /shared.txt\n`, {
      jobName: builder,
    });
    const base = `rollout-env:${request.envKey}`;
    try {
      const built = await environment.build(request);
      // Another job (delete: false, or still running) finds the same content-hashed image and uses it.
      const kept = await environment.build({ ...request, jobName: keeper });
      assert.notEqual(kept.image, built.image);
      assert.equal(await environment.removeImage(built.image), true);
      assert.ok(await docker.getImage(kept.image).inspect(), "the other job's image stays");
      assert.ok(await docker.getImage(base).inspect(), 'the image stays under its own name too');
      // The job that did not build it never removes it, even with delete: true.
      assert.equal(await environment.removeImage(kept.image), true);
      assert.ok(await docker.getImage(base).inspect(), 'only its builder removes an image');
      // The builder, once no one else references it, does.
      const again = await environment.build(request);
      assert.equal(await environment.removeImage(again.image), true);
      await assert.rejects(docker.getImage(base).inspect(), /no such image/i);
    } finally {
      await removeJobLeftovers(builder);
    }
  });

  it('reports a failing Dockerfile as EnvironmentBuildError with its output', async () => {
    const request = await contextWith('FROM debian:bookworm-slim\nRUN echo "going down" && exit 3\n');
    await assert.rejects(environment.build(request), isBuildError(/going down[\s\S]*exit code: 3/));
  });

  it('stops a build at its time limit with EnvironmentBuildError', async () => {
    const request = await contextWith(`FROM debian:bookworm-slim\nRUN sleep 60 && echo ${jobName}\n`, {
      timeoutMs: 1500,
    });
    await assert.rejects(environment.build(request), isBuildError(/^build exceeded 1.5 s/));
  });

  it('rejects with the reason when the build is cancelled', async () => {
    const controller = new AbortController();
    // Unique per run: an image of the same content built by any earlier run on this host would be used as it is.
    const request = await contextWith(`FROM debian:bookworm-slim\nRUN sleep 61 && echo ${jobName}\n`, {
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(new Error('trial cancelled')), 500);
    await assert.rejects(environment.build(request), /trial cancelled/);
  });

  it('uses a present docker_image, and fails clearly without an image or a Dockerfile', async () => {
    const empty = await scratchDir();
    const request = { contextDir: empty, envKey: 'unused', force: false, jobName, timeoutMs: 60_000 };
    assert.deepEqual(await environment.build({ ...request, dockerImage: 'debian:bookworm-slim' }), {
      image: 'debian:bookworm-slim',
      built: false,
    });
    await assert.rejects(
      environment.build({ ...request, dockerImage: 'localhost:1/rollout/absent:1' }),
      isBuildError(/^docker_image localhost:1\/rollout\/absent:1 is not on this host and could not be pulled: /)
    );
    await assert.rejects(environment.build({ ...request, dockerImage: null }), isBuildError(/Dockerfile: missing/));
  });

  it('starts a labelled container with the limits, environment and the image working directory', async () => {
    const caFile = path.join(await scratchDir(), 'bundle.crt');
    await writeFile(caFile, 'a bundle\n');
    const started = await environment.start(
      startRequest('trial-1', {
        env: { ROLLOUT_TASK_INSTRUCTION: 'do "it" now' },
        files: [
          { containerPath: '/rollout/instruction.md', text: 'do "it" now, ünïcode' },
          { containerPath: '/usr/local/share/rollout/ca.crt', hostPath: caFile },
        ],
        setup: 'cp /usr/local/share/rollout/ca.crt /ca-copy',
      })
    );
    handle = started.handle;
    firstUnenforced = started.unenforced;
    const info = await docker.getContainer(handle.id).inspect();
    assert.equal(info.HostConfig.NanoCpus, 5e8);
    assert.equal(info.HostConfig.Memory, 256 * 2 ** 20);
    assert.equal(info.HostConfig.MemorySwap, 256 * 2 ** 20);
    assert.equal(info.HostConfig.PidsLimit, 100);
    if (started.unenforced.includes('storage')) assert.ok(!info.HostConfig.StorageOpt);
    else assert.deepEqual(info.HostConfig.StorageOpt, { size: `${2 ** 30}` });
    assert.deepEqual(info.Config.Labels, {
      ...info.Config.Labels,
      [LABEL_JOB]: jobName,
      [LABEL_TRIAL]: `${jobName}/trial-1`,
      [LABEL_HOST]: hostId,
      [LABEL_WORKER]: `${hostId}~2`,
      [LABEL_DEPLOYMENT]: deployment,
    });
    assert.match(info.Name, /^\/rollout-trial-1-[0-9a-f]{8}$/);
    assert.equal(handle.workdir, '/work');
    const logs = await environment.exec(handle, { command: 'stat -c %a /logs/agent /logs/verifier', user: 'nobody' });
    assert.equal(logs.stdout, '777\n777\n');
    // The files are in place before the setup command runs, readable by any user.
    const files = await environment.exec(handle, {
      command: 'cat /rollout/instruction.md; echo; cat /ca-copy; stat -c %a /rollout/instruction.md',
      user: 'nobody',
    });
    assert.equal(files.stdout, 'do "it" now, ünïcode\na bundle\n644\n');
    // No archive to extract: the host file is bind-mounted read-only (not even root changes it), the text written by
    // the setup exec (a later step may write it again, as a multi-step task's next instruction).
    assert.deepEqual(
      info.HostConfig.Binds?.map((bind) => bind.replace(/^.*:(\/.*):ro$/, '$1')),
      ['/usr/local/share/rollout/ca.crt']
    );
    const readOnly = await environment.exec(handle, { command: 'echo x > /usr/local/share/rollout/ca.crt', user: '0' });
    assert.notEqual(readOnly.exitCode, 0);
    const writable = await environment.exec(handle, { command: 'echo next > /rollout/instruction.md', user: '0' });
    assert.equal(writable.exitCode, 0);
    const now = await environment.exec(handle, {
      command: 'cat /usr/local/share/rollout/ca.crt /rollout/instruction.md',
    });
    assert.equal(now.stdout, 'a bundle\nnext\n');
  });

  it('puts the files in with an archive when the daemon does not see the host files it was given to mount', async () => {
    // The daemon makes a missing bind source a folder: a folder where the copy should be stands for a daemon elsewhere.
    const cache = await scratchDir();
    const text = `bundle ${randomBytes(4).toString('hex')}`;
    const hostPath = path.join(cache, 'bundle.crt');
    await writeFile(hostPath, text);
    const digest = createHash('sha256').update(text).digest('hex');
    await mkdir(path.join(cache, 'container-files', digest), { recursive: true });
    const previous = process.env.ROLLOUT_CACHE_DIR;
    process.env.ROLLOUT_CACHE_DIR = cache;
    const elsewhere = new DockerEnvironment({ hostId, deployment });
    try {
      for (const trial of ['remote-1', 'remote-2']) {
        const { handle: started } = await elsewhere.start(
          startRequest(trial, {
            files: [
              { containerPath: '/usr/local/share/rollout/bundle.crt', hostPath },
              // Too long a text for the setup exec's environment: in the archive too.
              { containerPath: '/rollout/long.md', text: 'x'.repeat(100_000) },
            ],
          })
        );
        const read = await elsewhere.exec(started, {
          command: 'cat /usr/local/share/rollout/bundle.crt; echo; wc -c < /rollout/long.md',
          user: 'nobody',
        });
        assert.equal(read.stdout, `${text}\n100000\n`);
        const info = await docker.getContainer(started.id).inspect();
        assert.deepEqual(info.HostConfig.Binds ?? [], [], 'no bind mounts once the daemon did not see one');
        await elsewhere.stop(started);
      }
    } finally {
      if (previous === undefined) delete process.env.ROLLOUT_CACHE_DIR;
      else process.env.ROLLOUT_CACHE_DIR = previous;
    }
  });

  it('runs commands with output, exit code, variables, working directory and user', async () => {
    const result = await environment.exec(handle, {
      command: 'echo "$ROLLOUT_TASK_INSTRUCTION|$GREETING|$(pwd)|$(id -u)|$BASH_VERSION"; echo oops >&2; exit 3',
      env: { GREETING: 'hello world' },
    });
    assert.equal(result.exitCode, 3);
    assert.match(result.stdout, /^do "it" now\|hello world\|\/work\|0\|5\./);
    assert.equal(result.stderr, 'oops\n');
    assert.equal(result.timedOut, false);
    const elsewhere = await environment.exec(handle, { command: 'echo "$(pwd) $(id -u)"', cwd: '/tmp', user: '65534' });
    assert.equal(elsewhere.stdout, '/tmp 65534\n');
  });

  it('kills every process the command started when its timeout passes, and only those', async () => {
    const result = await environment.exec(handle, {
      command: 'sleep 300 & nohup sleep 301 >/dev/null 2>&1 & setsid sleep 302 & echo started; sleep 303',
      timeoutMs: 1500,
    });
    assert.equal(result.timedOut, true);
    assert.equal(result.exitCode, null);
    assert.equal(result.stdout, 'started\n');
    const processes = (await environment.exec(handle, { command: LIST_PROCESSES })).stdout.trim().split('\n');
    assert.equal(processes.length, 2, processes.join('; '));
    assert.equal(processes[0], '1 (sleep)');
    assert.match(processes[1] ?? '', / \(bash\)$/);
    assert.equal((await docker.getContainer(handle.id).inspect()).State.Running, true, 'the container lives on');
  });

  it('kills every process and rejects with the reason when aborted', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('trial cancelled')), 500);
    await assert.rejects(
      environment.exec(handle, { command: 'sleep 304 & sleep 305', signal: controller.signal }),
      /trial cancelled/
    );
    const processes = (await environment.exec(handle, { command: LIST_PROCESSES })).stdout.trim().split('\n');
    assert.equal(processes.length, 2, processes.join('; '));
  });

  it('uploads a folder into the path and a file as path/<name>', async () => {
    const source = await scratchDir();
    await mkdir(path.join(source, 'nested'));
    await writeFile(path.join(source, 'nested', 'a.txt'), 'A');
    await writeFile(path.join(source, 'test.sh'), 'echo tested');
    await chmod(path.join(source, 'test.sh'), 0o755);
    await environment.upload(handle, source, '/tests');
    await environment.upload(handle, path.join(source, 'nested', 'a.txt'), '/deep/new/folder');
    await environment.upload(handle, source, ['/copies/one', '/copies/two']);
    const listing = await environment.exec(handle, {
      command: 'cat /tests/nested/a.txt /deep/new/folder/a.txt; /tests/test.sh; ls /tests',
    });
    const copies = await environment.exec(handle, { command: 'ls /copies/one /copies/two; /copies/two/test.sh' });
    assert.equal(listing.stdout, 'AAtested\nnested\ntest.sh\n');
    assert.equal(copies.stdout, '/copies/one:\nnested\ntest.sh\n\n/copies/two:\nnested\ntest.sh\ntested\n');
  });

  it('downloads regular files only: links are skipped and host links are replaced, not written through', async () => {
    await environment.exec(handle, {
      command: [
        'mkdir -p /logs/agent/sub',
        'echo kept > /logs/agent/sub/kept.txt',
        'ln -s /etc/passwd /logs/agent/passwd-link',
        'ln -s / /logs/agent/root-link',
        'ln -s ../../../../../tmp /logs/agent/up-link',
        'mkfifo /logs/agent/fifo',
        'echo attack > /logs/agent/victim.txt',
      ].join(' && '),
    });
    const target = await scratchDir();
    const outside = path.join(await scratchDir(), 'victim.txt');
    await writeFile(outside, 'untouched');
    await mkdir(path.join(target, 'agent'));
    await symlink(outside, path.join(target, 'agent', 'victim.txt'));
    await symlink(await scratchDir(), path.join(target, 'verifier'));

    await environment.download(handle, '/logs', target);
    assert.deepEqual((await readdir(path.join(target, 'agent'))).sort(), ['sub', 'victim.txt']);
    assert.equal(await readFile(path.join(target, 'agent', 'sub', 'kept.txt'), 'utf8'), 'kept\n');
    assert.equal(await readFile(outside, 'utf8'), 'untouched');
    assert.equal((await lstat(path.join(target, 'agent', 'victim.txt'))).isFile(), true);
    assert.equal(await readFile(path.join(target, 'agent', 'victim.txt'), 'utf8'), 'attack\n');
    assert.equal((await lstat(path.join(target, 'verifier'))).isDirectory(), true, 'host link replaced by a folder');
  });

  it("keeps a file artifact with destination / or . inside artifacts/, never beside the trial's sandboxes.jsonl", async () => {
    // A hostile task: an artifact file named like the trial's own sandbox record, holding a forged "created" line that
    // would make the next cleanup remove another job's container by id.
    const forged = JSON.stringify({ event: 'created', host: 'elsewhere', id: 'victim-container', at: 'now' });
    await environment.exec(handle, { command: `mkdir -p /forge && echo '${forged}' > /forge/sandboxes.jsonl` });
    const trialDir = await scratchDir();
    const record = path.join(trialDir, 'sandboxes.jsonl');
    const genuine = `${JSON.stringify({ event: 'created', host: hostId, id: handle.id, at: 'now' })}\n`;
    await writeFile(record, genuine);
    const artifactsDir = path.join(trialDir, 'artifacts');
    const collected = await collectArtifacts(environment, handle, {
      hooks: [],
      entries: ['/', '.'].map((destination) => ({ source: '/forge/sandboxes.jsonl', destination, exclude: [] })),
      hostDir: artifactsDir,
      budget: new CollectBudget({ maxBytes: 2 ** 20, maxFiles: 100 }),
      signal: new AbortController().signal,
      report: () => Promise.resolve(),
    });
    assert.equal(await readFile(record, 'utf8'), genuine, 'the trial folder keeps its own record');
    assert.deepEqual((await readdir(trialDir)).sort(), ['artifacts', 'sandboxes.jsonl']);
    assert.equal(await readFile(path.join(artifactsDir, 'sandboxes.jsonl'), 'utf8'), `${forged}\n`);
    const inArtifacts = path.join(artifactsDir, 'sandboxes.jsonl');
    assert.deepEqual(
      collected.map((artifact) => artifact.hostPath),
      [inArtifacts, inArtifacts]
    );
  });

  it('downloads a lone file as hostDir/<name>, and nothing for a missing path', async () => {
    const target = path.join(await scratchDir(), 'created');
    await environment.download(handle, '/built.txt', target);
    assert.equal(await readFile(path.join(target, 'built.txt'), 'utf8'), `${jobName}\n`);
    const missing = path.join(await scratchDir(), 'not-created');
    await environment.download(handle, '/no/such/path', missing);
    assert.equal(existsSync(missing), false);
  });

  it('downloads chosen folders in one archive, and gives up (false) when too much else is beside them', async () => {
    await environment.exec(handle, {
      command: [
        'mkdir -p /picked/agent/sub /picked/verifier /picked/other',
        'echo a > /picked/agent/sub/a.txt',
        'echo v > /picked/verifier/reward.txt',
        'echo x > /picked/other/x.txt',
        'echo forged > /picked/trial.log',
      ].join(' && '),
    });
    const selection = { folders: ['agent', 'verifier'], maxSkippedBytes: 1024 };
    const target = await scratchDir();
    assert.equal(await environment.downloadFolders(handle, '/picked', selection, target), true);
    assert.deepEqual((await readdir(target)).sort(), ['agent', 'verifier']);
    assert.equal(await readFile(path.join(target, 'agent', 'sub', 'a.txt'), 'utf8'), 'a\n');
    assert.equal(await readFile(path.join(target, 'verifier', 'reward.txt'), 'utf8'), 'v\n');

    await environment.exec(handle, { command: 'head -c 4096 /dev/zero > /picked/other/big.bin' });
    assert.equal(await environment.downloadFolders(handle, '/picked', selection, await scratchDir()), false);
    assert.equal(await environment.downloadFolders(handle, '/nothing/here', selection, await scratchDir()), true);
  });

  it('falls back to sh in an image without bash', async () => {
    const { image: noBash } = await environment.build(
      await contextWith('FROM debian:bookworm-slim\nRUN rm /usr/bin/bash /bin/bash 2>/dev/null; ! test -e /bin/bash\n')
    );
    const { handle: shOnly, unenforced } = await environment.start(startRequest('no-bash', { image: noBash }));
    // A daemon that cannot take the storage limit is not asked again, and every later start still says so.
    assert.deepEqual(unenforced, firstUnenforced);
    const result = await environment.exec(shOnly, {
      command: 'echo "${BASH_VERSION:-no bash}"; sleep 306',
      timeoutMs: 800,
    });
    assert.deepEqual([result.stdout, result.timedOut], ['no bash\n', true]);
    const processes = (await environment.exec(shOnly, { command: LIST_PROCESSES })).stdout.trim().split('\n');
    assert.deepEqual(processes.length, 2, processes.join('; '));
    assert.match(processes[1] ?? '', / \(sh\)$/);
    await environment.stop(shOnly);
    // Stopping kills and removes the container in one call: cleanup (which always follows) finds nothing left.
    await assert.rejects(docker.getContainer(shOnly.id).inspect(), (err: { statusCode?: number }) => {
      assert.equal(err.statusCode, 404);
      return true;
    });
    await environment.stop(shOnly);
    await environment.remove(shOnly);
    await environment.remove(shOnly);
  });

  it('reports an image that cannot run sleep as EnvironmentStartError', async () => {
    const request = await contextWith('FROM scratch\nCOPY Dockerfile /\n');
    const { image: scratchImage } = await environment.build(request);
    await assert.rejects(environment.start(startRequest('no-sleep', { image: scratchImage })), (err: unknown) => {
      assert.ok(err instanceof TaskEnvironmentError);
      assert.equal(err.type, 'EnvironmentStartError');
      return true;
    });
    assert.deepEqual(await containersOfJob(jobName).then((list) => list.map((c) => c.Labels[LABEL_TRIAL])), [
      `${jobName}/trial-1`,
    ]);
  });

  it('replaces an earlier attempt of the trial, and caps CPUs at what the host has', async () => {
    const earlier = handle.id;
    const { handle: restarted } = await environment.start(
      startRequest('trial-1', { resources: { cpus: 4096, memoryBytes: 0, storageBytes: 0, pidsLimit: 100 } })
    );
    handle = restarted;
    assert.notEqual(handle.id, earlier);
    await assert.rejects(docker.getContainer(earlier).inspect(), /no such container/i);
    const info = await docker.getContainer(handle.id).inspect();
    const hostCpus = ((await docker.info()) as { NCPU: number }).NCPU;
    assert.equal(info.HostConfig.NanoCpus, hostCpus * 1e9);
  });

  it('removes a trial by label and an image only once no container uses it', async () => {
    assert.equal(await environment.removeImage(image), false, 'in use by the running container');
    assert.equal(await environment.removeTrial(`${jobName}/trial-1`), 1);
    assert.equal(await environment.removeTrial(`${jobName}/trial-1`), 0);
    assert.equal(await environment.removeImage(image), true);
    assert.equal(await environment.removeImage(image), true, 'idempotent');
    assert.deepEqual(await containersOfJob(jobName), [], 'no container of the job left');
  });
});

describe('extractArchive', () => {
  after(() => Promise.all(scratch.map((dir) => rm(dir, { recursive: true, force: true }))));

  /** A tar as a hostile container could hand back, entries named freely. */
  function archiveOf(entries: { name: string; type?: 'file' | 'directory' | 'symlink' | 'link'; text?: string }[]) {
    const pack = tarStream.pack();
    for (const { name, type = 'file', text = '' } of entries) {
      if (type === 'symlink' || type === 'link') pack.entry({ name, type, linkname: '/etc/passwd' });
      else if (type === 'directory') pack.entry({ name, type });
      else pack.entry({ name }, text);
    }
    pack.finalize();
    return pack.pipe(new PassThrough());
  }

  it('writes nothing outside the target folder, whatever the entry names', async () => {
    const parent = await scratchDir();
    const target = path.join(parent, 'target');
    await extractArchive(
      archiveOf([
        { name: 'logs', type: 'directory' },
        { name: 'logs/ok.txt', text: 'ok' },
        { name: 'logs/../escaped.txt', text: 'escaped' },
        { name: 'logs/../../escaped2.txt', text: 'escaped' },
        { name: '../../escaped3.txt', text: 'escaped' },
        { name: 'logs/a/../../../escaped4.txt', text: 'escaped' },
        { name: 'logs/hard', type: 'link' },
        { name: 'logs/soft', type: 'symlink' },
        { name: 'logs/dir/./deep.txt', text: 'deep' },
      ]),
      target
    );
    assert.deepEqual(await readdir(parent), ['target']);
    assert.deepEqual((await readdir(target)).sort(), ['dir', 'ok.txt']);
    assert.equal(await readFile(path.join(target, 'dir', 'deep.txt'), 'utf8'), 'deep');
  });

  it('takes only the chosen folders, and stops (false) where one of them is not a folder', async () => {
    const selection = { folders: ['agent', 'verifier'], maxSkippedBytes: 100 };
    const target = await scratchDir();
    const complete = await extractArchive(
      archiveOf([
        { name: 'logs', type: 'directory' },
        { name: 'logs/agent', type: 'directory' },
        { name: 'logs/agent/a.txt', text: 'a' },
        { name: 'logs/artifacts/big.txt', text: 'x'.repeat(60) },
        { name: 'logs/trial.log', text: 'forged' },
        { name: 'logs/verifier/reward.txt', text: '1' },
        { name: 'logs/verifier-not/x.txt', text: 'x' },
        // Inside hostDir, but out of the chosen folders: the trial folder's own files.
        { name: 'logs/agent/../sandboxes.jsonl', text: 'forged' },
        { name: 'logs/verifier/x/../../trial.log', text: 'forged' },
      ]),
      target,
      undefined,
      '',
      selection
    );
    assert.equal(complete, true);
    assert.deepEqual((await readdir(target)).sort(), ['agent', 'verifier']);
    assert.equal(await readFile(path.join(target, 'verifier', 'reward.txt'), 'utf8'), '1');

    const fileForFolder = archiveOf([{ name: 'logs/agent', text: 'a file' }]);
    assert.equal(await extractArchive(fileForFolder, await scratchDir(), undefined, '', selection), false);
    const tooMuchElse = archiveOf([{ name: 'logs/other.bin', text: 'x'.repeat(101) }]);
    assert.equal(await extractArchive(tooMuchElse, await scratchDir(), undefined, '', selection), false);
  });

  it('reports the files it collected, not the folders holding them; the limit bounds both', async () => {
    const entries = [
      { name: 'logs', type: 'directory' as const },
      { name: 'logs/agent', type: 'directory' as const },
      { name: 'logs/agent/a.txt', text: 'a' },
      { name: 'logs/agent/b.txt', text: 'b' },
      { name: 'logs/verifier', type: 'directory' as const },
      { name: 'logs/verifier/reward.txt', text: '1' },
      { name: 'logs/verifier/test-stdout.txt', text: 'ok' },
    ];
    const budget = new CollectBudget({ maxFiles: 100, maxBytes: 1000 });
    await extractArchive(archiveOf(entries), await scratchDir(), budget);
    assert.deepEqual(budget.report(), { files: 4, bytes: 5, limit_reached: null, cut: [] });
    const tight = new CollectBudget({ maxFiles: 3, maxBytes: 1000 });
    await extractArchive(archiveOf(entries), await scratchDir(), tight);
    assert.deepEqual(tight.report(), { files: 2, bytes: 2, limit_reached: 'files', cut: ['verifier'] });
  });

  it('never writes through a link already on the host, in a folder or a file', async () => {
    const target = await scratchDir();
    const elsewhere = await scratchDir();
    await symlink(elsewhere, path.join(target, 'dir'));
    await writeFile(path.join(elsewhere, 'file.txt'), 'untouched');
    await symlink(path.join(elsewhere, 'file.txt'), path.join(target, 'file.txt'));
    await extractArchive(
      archiveOf([
        { name: 'logs/dir/inner.txt', text: 'inner' },
        { name: 'logs/file.txt', text: 'new' },
      ]),
      target
    );
    assert.deepEqual(await readdir(elsewhere), ['file.txt']);
    assert.equal(await readFile(path.join(elsewhere, 'file.txt'), 'utf8'), 'untouched');
    assert.ok((await lstat(path.join(target, 'dir'))).isDirectory());
    assert.equal(await readFile(path.join(target, 'file.txt'), 'utf8'), 'new');
    assert.equal((await stat(path.join(target, 'dir', 'inner.txt'))).size, 5);
  });
});
