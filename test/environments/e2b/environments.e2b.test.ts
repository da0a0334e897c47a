/**
 * The e2b environment against the E2B stand-in (test/environments/e2b/e2b-stand-in.ts: E2B's REST API and envd's API, with
 * local Docker containers behind its sandboxes), driven by the unmodified `e2b` SDK pointed at it through
 * E2B_API_URL / E2B_SANDBOX_URL. The real service runs the same code through `npm run test:cloud`.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { NODE_RUNTIME_DIR, hostNodeRuntime } from '../../../src/agents/node-runtime';
import { E2BEnvironment } from '../../../src/environments/e2b';
import { e2bProvider } from '../../../src/environments/e2b/provider';
import type { StartRequest } from '../../../src/contracts/environment';
import { CloudQuotaError } from '../../../src/environments/kit/quota';
import { TaskEnvironmentError } from '../../../src/contracts/environment';
import { ProviderConfigError } from '../../../src/contracts/provider';
import { ModelGateway } from '../../../src/gateway/gateway';
import { openGatewayChannel } from '../../../src/gateway/relay/channel';
import { upstreamsFromEnv } from '../../../src/gateway/upstreams';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import type { E2BStandIn } from './e2b-stand-in';
import { QUOTA_MESSAGE, startE2BStandIn } from './e2b-stand-in';
import { startScriptedModelServer } from '../../support/scripted-model-server';
import { waitFor } from '../../support/wait';

const run = randomBytes(3).toString('hex');
const IMAGE = 'debian:bookworm-slim';
let dir: string;
let standIn: E2BStandIn;
let environment: E2BEnvironment;
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
    jobName: `e2b-${run}`,
    trialId: `e2b-${run}/${name}`,
    trialName: name,
    workerId: 'h-e2b',
    resources: { cpus: 1, memoryBytes: 512 * 2 ** 20, storageBytes: 0, pidsLimit: 256 },
    env: { GREETING: 'hello from the sandbox' },
    settings: {},
    budgetSec: 120,
    ...overrides,
  };
}

async function buildContext(name: string, dockerfile: string): Promise<string> {
  const context = path.join(dir, name);
  await mkdir(context, { recursive: true });
  await writeFile(path.join(context, 'Dockerfile'), dockerfile);
  await writeFile(path.join(context, 'hello.txt'), 'copied in\n');
  return context;
}

describe('e2b environment (E2B stand-in, the unmodified e2b SDK)', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-e2b-'));
    standIn = await startE2BStandIn();
    for (const [key, value] of Object.entries(standIn.env)) {
      saved[key] = process.env[key];
      process.env[key] = value;
    }
    environment = new E2BEnvironment({
      hostId: 'h-e2b',
      deployment: `test-${run}`,
      quotaWaitMs: 2_500,
    });
  });

  after(async () => {
    await standIn.stop();
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    await rm(dir, { recursive: true, force: true });
  });

  it('checks its credentials before a job starts: a missing E2B_API_KEY is named', async () => {
    await e2bProvider.check!({});
    const key = process.env.E2B_API_KEY;
    delete process.env.E2B_API_KEY;
    try {
      const err = await failure(e2bProvider.check!({}));
      assert.ok(err instanceof ProviderConfigError, String(err));
      assert.equal(err.kind, 'input');
      assert.match(err.message, /^e2b: E2B_API_KEY is not set/);
    } finally {
      process.env.E2B_API_KEY = key;
    }
  });

  it('builds a template from the Dockerfile once per environment, reused by another job', async () => {
    const context = await buildContext(
      'env',
      `FROM ${IMAGE}\nWORKDIR /app\nCOPY hello.txt /app/hello.txt\nENV FROM_IMAGE=yes\nRUN echo built > /built\n`
    );
    const envKey = `k${run}`;
    const lines: string[] = [];
    const built = await environment.build({
      contextDir: context,
      envKey,
      dockerImage: null,
      force: false,
      jobName: `e2b-${run}`,
      timeoutMs: 300_000,
      onOutput: (line) => lines.push(line),
    });
    assert.equal(built.built, true);
    assert.match(built.image, new RegExp(`^rollout-${envKey}:job-[0-9a-f]{16}$`));
    image = built.image;
    const again = await environment.build({
      contextDir: context,
      envKey,
      dockerImage: null,
      force: false,
      jobName: `other-${run}`,
      timeoutMs: 300_000,
      onOutput: (line) => lines.push(line),
    });
    assert.notEqual(again.image, built.image, 'each job holds its own reference');
    assert.ok(lines.some((line) => /exists: reused/.test(line)));
    assert.deepEqual(standIn.templateNames(), [`rollout-${envKey}`]);
    // The other job's release leaves the template to this one's.
    assert.equal(await environment.removeImage(again.image), true);
    assert.deepEqual(standIn.templateNames(), [`rollout-${envKey}`]);
  });

  it('a Dockerfile whose step fails is the task build error', async () => {
    const context = await buildContext('broken', `FROM ${IMAGE}\nRUN echo failing step && exit 7\n`);
    const err = await failure(
      environment.build({
        contextDir: context,
        envKey: `b${run}`,
        dockerImage: null,
        force: false,
        jobName: `e2b-${run}`,
        timeoutMs: 300_000,
      })
    );
    assert.ok(err instanceof TaskEnvironmentError, String(err));
    assert.equal(err.type, 'EnvironmentBuildError');
  });

  describe('a started sandbox', () => {
    let handle: EnvironmentHandle;

    before(async () => {
      const started = await environment.start(
        startRequest('main', {
          files: [{ containerPath: '/rollout/instruction.md', text: 'do the task\n' }],
          setup: 'echo set up > /setup-ran',
        })
      );
      handle = started.handle;
      assert.deepEqual(started.unenforced, ['cpus', 'memory', 'pids']);
    });

    it('runs commands with the environment, workdir, files and setup, streamed back with exit codes', async () => {
      assert.equal(handle.workdir, '/app');
      const result = await environment.exec(handle, {
        command:
          'pwd; echo "$GREETING"; cat /rollout/instruction.md /setup-ran /built hello.txt; echo oops >&2; exit 4',
      });
      assert.equal(result.exitCode, 4);
      assert.equal(result.stdout, '/app\nhello from the sandbox\ndo the task\nset up\nbuilt\ncopied in\n');
      assert.equal(result.stderr, 'oops\n');
      const asUser = await environment.exec(handle, {
        command: 'id -un; echo "$EXTRA"',
        user: 'user',
        env: { EXTRA: 'x' },
      });
      assert.equal(asUser.stdout, 'user\nx\n');
      const logs = await environment.exec(handle, { command: 'stat -c %a /logs/agent /logs/verifier' });
      assert.equal(logs.stdout, '777\n777\n');
    });

    it('a command past its timeout is killed with everything it started', async () => {
      const result = await environment.exec(handle, {
        command: '(sleep 600 & echo $! > /tmp/child; wait) & sleep 600',
        timeoutMs: 1_500,
      });
      assert.equal(result.timedOut, true);
      assert.equal(result.exitCode, null);
      const left = await environment.exec(handle, {
        command: 'kill -0 "$(cat /tmp/child)" && echo alive || echo gone',
      });
      assert.equal(left.stdout, 'gone\n');
    });

    it('killAll kills daemons the agent left, and the sandbox still answers', async () => {
      await environment.exec(handle, {
        command: 'setsid sh -c "sleep 900 & echo \\$! > /tmp/daemon" < /dev/null > /dev/null 2>&1',
      });
      const before = await environment.exec(handle, { command: 'kill -0 "$(cat /tmp/daemon)" && echo alive' });
      assert.equal(before.stdout, 'alive\n');
      await environment.killAll(handle);
      const after = await environment.exec(handle, {
        command: 'kill -0 "$(cat /tmp/daemon)" 2>/dev/null && echo alive || echo gone',
      });
      assert.equal(after.stdout, 'gone\n');
    });

    it('uploads folders and files and downloads folders, links skipped', async () => {
      const source = path.join(dir, 'upload');
      await mkdir(path.join(source, 'nested'), { recursive: true });
      await writeFile(path.join(source, 'nested', 'a.txt'), 'A');
      await writeFile(path.join(dir, 'single.txt'), 'S');
      await environment.upload(handle, source, ['/tmp/up1', '/tmp/up2']);
      await environment.upload(handle, path.join(dir, 'single.txt'), '/tmp/single');
      const listed = await environment.exec(handle, {
        command:
          'cat /tmp/up1/nested/a.txt /tmp/up2/nested/a.txt /tmp/single/single.txt; ln -s /etc/passwd /tmp/up1/link',
      });
      assert.equal(listed.stdout, 'AAS');
      const target = path.join(dir, 'down');
      await environment.download(handle, '/tmp/up1', target);
      assert.equal(await readFile(path.join(target, 'nested', 'a.txt'), 'utf8'), 'A');
      assert.deepEqual((await readdir(target)).sort(), ['nested']);
      await environment.download(handle, '/nothing/here', path.join(dir, 'none'));
      // Several folders in one archive (collect's /logs/agent and /logs/verifier): those there, each as download puts it.
      const folders = path.join(dir, 'folders');
      const selection = { folders: ['up1', 'up2', 'absent'], maxSkippedBytes: 0 };
      assert.equal(await environment.downloadFolders(handle, '/tmp', selection, folders), true);
      assert.deepEqual((await readdir(folders)).sort(), ['up1', 'up2']);
      assert.equal(await readFile(path.join(folders, 'up2', 'nested', 'a.txt'), 'utf8'), 'A');
      assert.deepEqual((await readdir(path.join(folders, 'up1'))).sort(), ['nested'], 'the link skipped');
      assert.equal(await environment.downloadFolders(handle, '/nothing', selection, path.join(dir, 'none2')), true);
    });

    it('puts a small upload inside its extracting command, stages a large one, and does without base64', async () => {
      const small = path.join(dir, 'small-upload');
      const large = path.join(dir, 'large-upload');
      await mkdir(small);
      await mkdir(large);
      await writeFile(path.join(small, 's.txt'), 'small');
      const bytes = randomBytes(200_000);
      await writeFile(path.join(large, 'l.bin'), bytes);
      const calls = async (upload: () => Promise<void>) => {
        const before = standIn.requests();
        await upload();
        return standIn.requests() - before;
      };
      const smallCalls = await calls(() => environment.upload(handle, small, '/tmp/small'));
      const largeCalls = await calls(() => environment.upload(handle, large, '/tmp/large'));
      assert.equal(smallCalls, 1, 'the archive rides in the command');
      assert.equal(largeCalls, 2, 'the archive staged as a file, then extracted');
      const sums = await environment.exec(handle, {
        command: 'cat /tmp/small/s.txt; echo; sha256sum < /tmp/large/l.bin',
      });
      const sha = createHash('sha256').update(bytes).digest('hex');
      assert.equal(sums.stdout, `small\n${sha}  -\n`);
      // An image without base64: the small upload is staged after all.
      await environment.exec(handle, { command: 'mv "$(command -v base64)" /tmp/base64.gone' });
      try {
        await environment.upload(handle, small, '/tmp/small-again');
        const again = await environment.exec(handle, { command: 'cat /tmp/small-again/s.txt' });
        assert.equal(again.stdout, 'small');
      } finally {
        await environment.exec(handle, { command: 'mv /tmp/base64.gone /usr/bin/base64' });
      }
    });

    it('openProcess carries stdin and stdout both ways while the process runs (the gateway relay channel)', async () => {
      let received = '';
      const process = await environment.openProcess(handle, {
        command: 'while read -r line; do echo "echo:$line"; done',
        onStdout: (chunk) => (received += chunk),
      });
      await process.write('first\n');
      // Whole lines, newline included, as they come: the relay's frames are JSON lines.
      await waitFor('the first echo', () => received.includes('echo:first\n'), 10_000);
      await process.write('second\n');
      await waitFor('the second echo', () => received === 'echo:first\necho:second\n', 10_000);
      await process.kill();
      assert.equal(await process.exited, null);
    });

    it('carries a model call through the gateway relay over envd; the real key stays on the worker', async () => {
      const scripted = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
      scripted.session('relay', { turns: [{ say: 'relayed hello' }] });
      const gateway = new ModelGateway();
      const agentDir = await mkdtemp(path.join(dir, 'agent-'));
      const key = `sk-real-${randomBytes(12).toString('hex')}`;
      const session = await gateway.openTrial({
        trialId: `e2b-${run}/main`,
        agentDir,
        upstreams: upstreamsFromEnv({ OPENAI_BASE_URL: `${scripted.url}/s/relay/v1`, OPENAI_API_KEY: key }),
      });
      try {
        await environment.upload(handle, await hostNodeRuntime(), NODE_RUNTIME_DIR);
        const channel = await openGatewayChannel(gateway, session, environment, handle, {});
        assert.match(channel.description, /gateway relay \(node/);
        const client =
          "fetch(process.env.URL + '/chat/completions', { method: 'POST', headers: { 'content-type': " +
          "'application/json', authorization: 'Bearer ' + process.env.TOKEN }, body: JSON.stringify({ model: 'm', " +
          "messages: [{ role: 'user', content: 'hi' }] }) }).then(async (r) => console.log(r.status, await r.text()))";
        const called = await environment.exec(handle, {
          command: `${NODE_RUNTIME_DIR}/bin/node -e "${client}"`,
          env: { URL: channel.access.baseUrls.openai, TOKEN: channel.access.token },
          timeoutMs: 60_000,
        });
        assert.match(called.stdout, /^200 .*relayed hello/, called.stderr);
        // The key split in two: this search's own command line must not hold it.
        const [head, tail] = [key.slice(0, 10), key.slice(10)];
        const found = await environment.exec(handle, {
          command: `k=${head}; grep -rl "\${k}${tail}" /proc/[0-9]*/environ /tmp /rollout /logs 2>/dev/null; true`,
        });
        assert.equal(found.stdout, '');
        await channel.close();
        const calls = (await readFile(path.join(agentDir, 'llm-calls.jsonl'), 'utf8')).trim().split('\n');
        assert.equal(calls.length, 1);
      } finally {
        await session.close();
        await gateway.close();
        await scripted.close();
      }
    });

    it('cuts the network for a phase and restores it (E2B internet access)', async () => {
      const interfaces = async () =>
        (await environment.exec(handle, { command: 'ls /sys/class/net' })).stdout.split(/\s+/).filter(Boolean);
      assert.notDeepEqual(await interfaces(), ['lo']);
      await environment.setNetwork(handle, 'none');
      assert.deepEqual(await interfaces(), ['lo']);
      await environment.setNetwork(handle, 'public');
      assert.notDeepEqual(await interfaces(), ['lo']);
    });

    it('an install snapshot of the sandbox starts later trials with the agent installed', async () => {
      const key = `greeter@1 ${run}`;
      assert.equal(await environment.snapshots.find(image, key), null);
      await environment.exec(handle, { command: 'mkdir -p /opt/agent && echo installed > /opt/agent/marker' });
      const snapshot = await environment.snapshots.take(handle, key, 'greeter@1');
      assert.equal(await environment.snapshots.find(image, key), snapshot);
      const again = await environment.exec(handle, { command: 'cat /opt/agent/marker' });
      assert.equal(again.stdout, 'installed\n', 'the snapshotted sandbox runs on');
      const started = await environment.start(startRequest('from-snapshot', { image: snapshot }));
      try {
        const found = await environment.exec(started.handle, { command: 'cat /opt/agent/marker; pwd' });
        assert.equal(found.stdout, 'installed\n/app\n');
      } finally {
        await environment.remove(started.handle);
      }
    });

    it('lists what this deployment holds by metadata, and removeTrial removes it', async () => {
      const held = await environment.heldEnvironments();
      assert.deepEqual(
        held.map((h) => h.trialId),
        [`e2b-${run}/main`]
      );
      assert.equal(held[0]!.id, handle.id);
      assert.equal(await environment.isRunning(handle), true);
      assert.equal(await environment.removeTrial(`e2b-${run}/main`), 1);
      assert.deepEqual(await standIn.sandboxes(), []);
      assert.equal(await environment.isRunning(handle), false);
      await environment.remove(handle);
    });
  });

  it('starts a no-network trial cut off from the start', async () => {
    const started = await environment.start(startRequest('offline', { network: 'none' }));
    try {
      const net = await environment.exec(started.handle, { command: 'ls /sys/class/net' });
      assert.deepEqual(net.stdout.split(/\s+/).filter(Boolean), ['lo']);
    } finally {
      await environment.remove(started.handle);
    }
  });

  it("waits on E2B's quota reply, then fails as infrastructure with the vendor's message", async () => {
    standIn.failNextCreates(2);
    const started = await environment.start(startRequest('quota-then-ok'));
    await environment.remove(started.handle);
    standIn.failNextCreates(100);
    const err = await failure(environment.start(startRequest('quota')));
    standIn.failNextCreates(0);
    assert.ok(err instanceof CloudQuotaError, String(err));
    assert.ok(err.message.includes(QUOTA_MESSAGE), err.message);
    assert.deepEqual(await standIn.sandboxes(), []);
  });

  it("releases the template, and its install snapshots, with the last job's reference", async () => {
    assert.equal(await environment.removeImage(image), true);
    assert.deepEqual(standIn.templateNames(), []);
    assert.equal(await environment.removeImage(image), true, 'idempotent');
  });
});
