/**
 * The daytona environment against the Daytona stand-in (test/environments/daytona/daytona-stand-in.ts: Daytona's REST, toolbox
 * and object storage APIs, its sandboxes local Docker containers), driven by the unmodified @daytonaio/sdk pointed
 * at it through the SDK's own variables. One stand-in and one built snapshot for the file; every sandbox, snapshot
 * and image removed at the end.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { io } from 'socket.io-client';

import { checkDaytonaCredentials } from '../../../src/environments/daytona/credentials';
import { DaytonaEnvironment } from '../../../src/environments/daytona';
import { snapshotName, sandboxSize } from '../../../src/environments/daytona/images';
import type { BuildRequest, StartRequest } from '../../../src/contracts/environment';
import { TaskEnvironmentError } from '../../../src/contracts/environment';
import { ProviderConfigError } from '../../../src/contracts/provider';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import type { DaytonaStandIn } from './daytona-stand-in';
import { startDaytonaStandIn } from './daytona-stand-in';
import { within } from '../../support/wait';

const run = randomBytes(3).toString('hex');
const RESOURCES = { cpus: 1, memoryBytes: 2 ** 30, storageBytes: 2 * 2 ** 30, pidsLimit: 256 };
let dir: string;
let contextDir: string;
let standIn: DaytonaStandIn;
let environment: DaytonaEnvironment;
let image: string;
const buildOutput: string[] = [];
const savedEnv = { ...process.env };

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (err: unknown) => err
  );

function buildRequest(overrides: Partial<BuildRequest> = {}): BuildRequest {
  return {
    contextDir,
    envKey: `0${run}abcdef0`,
    dockerImage: null,
    force: false,
    jobName: `daytona-${run}`,
    timeoutMs: 300_000,
    resources: RESOURCES,
    ...overrides,
  };
}

function startRequest(name: string, overrides: Partial<StartRequest> = {}): StartRequest {
  return {
    image,
    jobName: `daytona-${run}`,
    trialId: `daytona-${run}/${name}`,
    trialName: name,
    workerId: 'h-daytona',
    resources: RESOURCES,
    env: { GREETING: 'hello from the sandbox' },
    envKey: `0${run}abcdef0`,
    environmentDir: contextDir,
    files: [{ containerPath: '/rollout/instruction.md', text: 'Do the task.\n' }],
    budgetSec: 600,
    timeoutMs: 120_000,
    ...overrides,
  };
}

async function withSandbox(name: string, body: (handle: EnvironmentHandle) => Promise<void>): Promise<void> {
  const { handle } = await environment.start(startRequest(name));
  try {
    await body(handle);
  } finally {
    await environment.remove(handle);
  }
}

describe('daytona environment (stand-in of the Daytona API)', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-daytona-'));
    contextDir = path.join(dir, 'environment');
    await mkdir(path.join(contextDir, 'files'), { recursive: true });
    await writeFile(path.join(contextDir, 'files', 'greeting.txt'), 'built by Daytona\n');
    await writeFile(
      path.join(contextDir, 'Dockerfile'),
      'FROM debian:bookworm-slim\nCOPY files/greeting.txt /opt/greeting.txt\nWORKDIR /app\n'
    );
    standIn = await startDaytonaStandIn();
    Object.assign(process.env, standIn.env);
    environment = new DaytonaEnvironment({ hostId: 'h-daytona', deployment: `test-${run}`, quotaWaitMs: 2_500 });
    await environment.ping();
    image = (await environment.build(buildRequest({ onOutput: (line) => buildOutput.push(line) }))).image;
  });
  after(async () => {
    await standIn.stop();
    for (const key of Object.keys(standIn.env)) {
      if (savedEnv[key] === undefined) delete process.env[key];
      else process.env[key] = savedEnv[key];
    }
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses to start without DAYTONA_API_KEY, naming it (and a DAYTONA_API_URL that is no URL)', async () => {
    const missing = await failure(checkDaytonaCredentials({}));
    assert.ok(missing instanceof ProviderConfigError && missing.kind === 'input');
    assert.match(missing.message, /^daytona: DAYTONA_API_KEY is not set/);
    const badUrl = await failure(checkDaytonaCredentials({ DAYTONA_API_KEY: 'k', DAYTONA_API_URL: 'not a url' }));
    assert.match(String(badUrl), /DAYTONA_API_URL is not an http\(s\) URL/);
    assert.equal(await checkDaytonaCredentials(standIn.env), undefined);
  });

  it('builds the Dockerfile once as a snapshot named by content and size; a broken one is a build error', async () => {
    assert.equal(image, snapshotName(`0${run}abcdef0`, sandboxSize(RESOURCES), 'us'));
    assert.equal(image, `rollout-0${run}abcdef0-1c1g2d-us`, 'the region (DAYTONA_TARGET) in the name');
    // The SDK's progress (and Daytona's build log, which it follows once a build runs long enough to be seen).
    assert.ok(
      buildOutput.some((line) => line.includes(`Creating snapshot ${image}`)),
      `build output passed on: ${buildOutput.join('\n')}`
    );

    const again = await environment.build(buildRequest({ jobName: `other-${run}` }));
    assert.deepEqual(again, { image, built: false }, 'another job reuses the snapshot');
    // rollout build: another size of the environment is another snapshot, built once.
    const prebuild = buildRequest({ jobName: 'rollout-build/now', resources: { ...RESOURCES, cpus: 2 } });
    assert.deepEqual(await environment.prebuild(prebuild), { image: `rollout-0${run}abcdef0-2c1g2d-us`, fresh: true });
    assert.deepEqual(await environment.prebuild(prebuild), { image: `rollout-0${run}abcdef0-2c1g2d-us`, fresh: false });
    const broken = path.join(dir, 'broken');
    await mkdir(broken);
    await writeFile(path.join(broken, 'Dockerfile'), 'FROM debian:bookworm-slim\nRUN exit 7\n');
    const err = await failure(environment.build(buildRequest({ contextDir: broken, envKey: `1${run}abcdef0` })));
    assert.ok(err instanceof TaskEnvironmentError, String(err));
    assert.equal(err.type, 'EnvironmentBuildError');
    assert.match(err.message, /exit code: 7|exited with 7|returned a non-zero code: 7/);
  });

  it('starts a sandbox from the snapshot with its labels, lifetime, size, env, files and WORKDIR', async () => {
    const { handle, unenforced } = await environment.start(startRequest('start-check', { budgetSec: 3600 }));
    try {
      const record = standIn.sandboxRecords().find((r) => r.id === handle.id)!;
      assert.ok(record, 'the sandbox is listed by the API');
      assert.deepEqual(
        [record.snapshot, record.cpu, record.memory, record.disk, record.user],
        [image, 1, 1, 2, 'root']
      );
      const labels = record.labels as Record<string, string>;
      assert.equal(labels['rollout.deployment'], `test-${run}`);
      assert.equal(labels['rollout.job'], `daytona-${run}`);
      assert.equal(labels['rollout.trial'], `daytona-${run}/start-check`);
      assert.deepEqual([record.autoStopInterval, record.autoDeleteInterval, record.ttlMinutes], [0, 0, 60 + 10]);
      assert.deepEqual(unenforced, ['pids']);
      assert.equal(handle.workdir, '/app');
      const result = await environment.exec(handle, {
        command: 'cat /opt/greeting.txt /rollout/instruction.md; echo "$GREETING"; pwd; stat -c %a /logs/agent',
      });
      assert.deepEqual(result, {
        exitCode: 0,
        stdout: 'built by Daytona\nDo the task.\nhello from the sandbox\n/app\n777\n',
        stderr: '',
        timedOut: false,
      });
      assert.equal(await environment.isRunning(handle), true);
    } finally {
      await environment.remove(handle);
    }
    assert.equal(await environment.isRunning(handle), false);
  });

  it('takes a docker_image as it is; without a WORKDIR, commands start in / as on Docker', async () => {
    const plain = await environment.build(
      buildRequest({
        contextDir: path.join(dir, 'none'),
        envKey: `2${run}abcdef0`,
        dockerImage: 'debian:bookworm-slim',
      })
    );
    assert.equal(plain.image, `rollout-2${run}abcdef0-1c1g2d-us`);
    const { handle } = await environment.start(startRequest('plain', { image: plain.image, envKey: `2${run}abcdef0` }));
    try {
      assert.equal(handle.workdir, '/');
      assert.equal((await environment.exec(handle, { command: 'pwd' })).stdout, '/\n');
    } finally {
      await environment.remove(handle);
    }
  });

  it('execs with stdout and stderr apart, exit code, cwd, env and user; a timeout kills what it started', async () => {
    await withSandbox('exec', async (handle) => {
      const result = await environment.exec(handle, {
        command: 'echo out; echo err >&2; echo "$WHO in $(pwd) as $(id -un)"; exit 3',
        cwd: '/tmp',
        env: { WHO: 'agent' },
        user: 'nobody',
      });
      assert.deepEqual(result, {
        exitCode: 3,
        stdout: 'out\nagent in /tmp as nobody\n',
        stderr: 'err\n',
        timedOut: false,
      });
      const timed = await within(
        60_000,
        'the exec to time out',
        environment.exec(handle, { command: 'echo started; sleep 300 & sleep 301; echo never', timeoutMs: 2_000 })
      );
      assert.equal(timed.timedOut, true);
      assert.equal(timed.exitCode, null);
      assert.equal(timed.stdout, 'started\n', 'the output before the timeout is kept');
      const left = await environment.exec(handle, { command: 'cat /proc/[0-9]*/cmdline | tr "\\0" " "' });
      assert.doesNotMatch(left.stdout, /sleep 30[01]/, 'nothing the timed-out command started runs');
    });
  });

  it('killAll kills daemons that left their process group', async () => {
    await withSandbox('kill-all', async (handle) => {
      await environment.exec(handle, { command: 'setsid sh -c "sleep 1234" </dev/null >/dev/null 2>&1 &' });
      const before = await environment.exec(handle, { command: 'cat /proc/[0-9]*/cmdline | tr "\\0" " "' });
      assert.match(before.stdout, /sleep 1234/);
      await environment.killAll(handle);
      const after_ = await environment.exec(handle, { command: 'cat /proc/[0-9]*/cmdline | tr "\\0" " "' });
      assert.doesNotMatch(after_.stdout, /sleep 1234/);
    });
  });

  it('uploads a folder (modes kept) to several paths in one transfer and downloads it, links skipped', async () => {
    const source = path.join(dir, 'upload');
    await mkdir(path.join(source, 'sub'), { recursive: true });
    await writeFile(path.join(source, 'run.sh'), '#!/bin/sh\necho ran\n');
    await chmod(path.join(source, 'run.sh'), 0o755);
    await writeFile(path.join(source, 'sub', 'data.txt'), 'x'.repeat(100_000));
    await withSandbox('files', async (handle) => {
      await environment.upload(handle, source, ['/srv/a', '/srv/b']);
      const ran = await environment.exec(handle, {
        command: '/srv/b/run.sh && wc -c < /srv/a/sub/data.txt && ln -s /etc/passwd /srv/a/link',
      });
      assert.deepEqual([ran.exitCode, ran.stdout], [0, 'ran\n100000\n']);
      const out = path.join(dir, 'download');
      await environment.download(handle, '/srv/a', out);
      assert.equal(await readFile(path.join(out, 'sub', 'data.txt'), 'utf8'), 'x'.repeat(100_000));
      assert.ok((await stat(path.join(out, 'run.sh'))).isFile());
      assert.equal(
        await failure(stat(path.join(out, 'link'))).then((err) => (err as NodeJS.ErrnoException).code),
        'ENOENT'
      );
      await environment.download(handle, '/nothing/here', path.join(dir, 'none'));
    });
  });

  it('openProcess carries lines both ways until killed', async () => {
    await withSandbox('open-process', async (handle) => {
      let received = '';
      const process_ = await environment.openProcess(handle, {
        command: 'while read -r line; do echo "echo:$line:$PREFIX"; done',
        env: { PREFIX: 'p' },
        onStdout: (chunk) => (received += chunk),
      });
      await process_.write('hello\n');
      await process_.write('world\n');
      await within(
        30_000,
        'the echoes',
        (async () => {
          while (!received.includes('echo:world:p\n')) await new Promise((resolve) => setTimeout(resolve, 100));
        })()
      );
      assert.equal(received, 'echo:hello:p\necho:world:p\n');
      await process_.kill();
      await process_.kill();
      await within(30_000, 'the process to end', process_.exited);
    });
  });

  it("cuts a sandbox's network at start and per phase (Daytona's networkBlockAll)", async () => {
    const interfaces = async (handle: EnvironmentHandle) =>
      (await environment.exec(handle, { command: 'ls /sys/class/net' })).stdout.split('\n').filter(Boolean).sort();
    const { handle } = await environment.start(startRequest('network', { network: 'none' }));
    try {
      assert.equal(standIn.sandboxRecords().find((r) => r.id === handle.id)?.networkBlockAll, true);
      assert.deepEqual(await interfaces(handle), ['lo']);
      await environment.setNetwork(handle, 'public');
      assert.ok((await interfaces(handle)).length > 1, 'connected again');
      await environment.setNetwork(handle, 'none');
      assert.deepEqual(await interfaces(handle), ['lo']);
    } finally {
      await environment.remove(handle);
    }
  });

  it('lists what this deployment holds and removes a trial by label', async () => {
    const { handle } = await environment.start(startRequest('held'));
    const held = await environment.heldEnvironments();
    assert.deepEqual(
      held.filter((h) => h.id === handle.id),
      [{ id: handle.id, trialId: `daytona-${run}/held`, workerId: null }]
    );
    assert.equal(await environment.removeTrial(`daytona-${run}/held`), 1);
    assert.deepEqual(await environment.heldEnvironments(), []);
    assert.deepEqual(await standIn.sandboxes(), []);
  });

  it('checks the API through its rate-limit reply (the preflight waits it out, as every call does)', async () => {
    standIn.setFaults({ rate: 1 });
    const passing = environment.ping();
    setTimeout(() => standIn.setFaults({ rate: 0 }), 200);
    await passing;
    standIn.setFaults({ rate: 1 });
    const err = await failure(environment.ping());
    standIn.setFaults({ rate: 0 });
    assert.match(String(err), /Daytona API unreachable at .*quota or rate limit, still refused after waiting/);
  });

  it("waits on Daytona's quota reply with backoff, then fails as infrastructure with the vendor's message", async () => {
    standIn.failNextCreates(1);
    const { handle } = await environment.start(startRequest('quota-once'));
    await environment.remove(handle);
    standIn.failNextCreates(10);
    const err = await failure(environment.start(startRequest('quota-always')));
    standIn.failNextCreates(0);
    assert.ok(err instanceof Error && !(err instanceof TaskEnvironmentError), String(err));
    assert.equal(err.name, 'CloudQuotaError');
    assert.match(
      err.message,
      /^daytona: quota or rate limit, still refused after waiting \d+ s: Total CPU limit exceeded/
    );
    assert.deepEqual(await standIn.sandboxes(), []);
  });

  it('takes an install snapshot of a sandbox and finds it; the job releases its snapshot when no sandbox uses it', async () => {
    const { handle } = await environment.start(startRequest('install'));
    let installed: string;
    try {
      await environment.exec(handle, { command: 'echo agent > /opt/agent' });
      assert.equal(await environment.snapshots.find(image, 'agent-key'), null);
      installed = await environment.snapshots.take(handle, 'agent-key', 'agent@1');
      assert.equal(await environment.snapshots.find(image, 'agent-key'), installed);
      assert.equal(await environment.removeImage(image), false, 'a sandbox still runs from it');
    } finally {
      await environment.remove(handle);
    }
    const { handle: fromInstall } = await environment.start(startRequest('from-install', { image: installed }));
    const agent = await environment.exec(fromInstall, { command: 'cat /opt/agent' });
    await environment.remove(fromInstall);
    assert.equal(agent.stdout, 'agent\n');
    assert.equal(await environment.removeImage(image), true);
    assert.equal(await environment.snapshots.find(image, 'agent-key'), null, 'its install snapshots went with it');
    // A later trial finds it gone and builds it again from the task's folder.
    const { handle: rebuilt } = await environment.start(startRequest('rebuilt'));
    await environment.remove(rebuilt);
    assert.deepEqual(await standIn.sandboxes(), []);
  });

  it("drives the SDK's default event transport: its Socket.IO connection, refused with another key", async () => {
    // No DAYTONA_USE_DEPRECATED_POLLING: the SDK listened on the notification gateway while the tests above ran.
    const { sockets, events } = standIn.notifications();
    assert.ok(sockets >= 1, 'the SDK opened no notification socket');
    assert.ok(events >= 1, 'no sandbox event reached a socket');
    const api = new URL(standIn.env.DAYTONA_API_URL!);
    const refused = await within(
      30_000,
      'a refused notification socket',
      new Promise<string>((resolve) => {
        const socket = io(api.origin, {
          path: `${api.pathname}/socket.io/`,
          transports: ['websocket'],
          auth: { token: 'not-the-key' },
          reconnection: false,
        });
        socket.on('connect', () => resolve('connected'));
        socket.on('connect_error', (err) => {
          socket.close();
          resolve(err.message);
        });
      })
    );
    assert.equal(refused, 'Unauthorized');
  });
});
