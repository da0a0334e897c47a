/**
 * The gateway relay (src/gateway/relay/) for real on Docker: a container with python3 and no Node runs the Python
 * relay, then, with Rollout's Node runtime uploaded where Node agents get it, the Node relay. A client in the
 * container calls the model through it (plain and streamed SSE) and reaches the scripted model server (the stand-in
 * for vendor APIs) via the worker's gateway; each call is recorded in llm-calls.jsonl, a wrong token is refused, and
 * the real key is nowhere in the container's processes. ROLLOUT_GATEWAY_RELAY=1 makes the channel take the relay
 * although Docker containers reach the gateway directly. Also: ROLLOUT_GATEWAY_PUBLIC_URL and its listen address;
 * and a built-in agent (pi, installed from npm) through the relay in a real job (CLI, Temporal, Docker).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { stringify } from 'yaml';

import { hostNodeRuntime, NODE_RUNTIME_DIR } from '../../src/agents/node-runtime';
import { DockerEnvironment } from '../../src/environments/docker';
import { environmentKey } from '../../src/environments/env-key';
import type { Environment } from '../../src/contracts/environment';
import { ModelGateway } from '../../src/gateway/gateway';
import type { TrialSession } from '../../src/gateway/gateway';
import { listenAddress, openGatewayChannel } from '../../src/gateway/relay/channel';
import { MAX_FRAME_CHARS, openGatewayRelay, relayTarget } from '../../src/gateway/relay/host';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import type { EnvironmentHandle } from '../../src/contracts/trial';
import { shellQuote } from '../../src/shell';
import { runCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { prepareGatewayTask } from '../support/gateway-agent';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { freePort } from '../support/serve';
import { TEST_HOST_ID, testTemporal } from '../support/temporal';

const jobName = `relay-${randomBytes(3).toString('hex')}`;
const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const environment = new DockerEnvironment({ hostId: `relay-${TEST_HOST_ID}`, deployment: `relay-${TEST_HOST_ID}` });
const gateway = new ModelGateway();
let scripted: ScriptedModelServer;
let handle: EnvironmentHandle;
let agentDir: string;
let session: TrialSession;
let metadata: Awaited<ReturnType<typeof startMetadataStandIn>>;

/** A Python client in the container: POSTs a chat completion to $URL with $TOKEN, prints the body it got. */
const CLIENT = [
  'import json, os, sys, urllib.request',
  'body = json.dumps({"model": "scripted-model", "stream": sys.argv[1] == "stream",',
  '  "messages": [{"role": "user", "content": "hi"}]}).encode()',
  'req = urllib.request.Request(os.environ["URL"] + "/chat/completions", data=body, method="POST",',
  '  headers={"content-type": "application/json", "authorization": "Bearer " + os.environ["TOKEN"]})',
  'try:',
  '  with urllib.request.urlopen(req, timeout=60) as res: print(res.status); print(res.read().decode())',
  'except urllib.error.HTTPError as e: print(e.code); print(e.read().decode())',
].join('\n');

/** A raw HTTP/1.1 request to the relay on 127.0.0.1:$1 with request target $2: prints the status line and body. */
const RAW_CLIENT = [
  'import socket, sys',
  's = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)',
  's.sendall(("GET " + sys.argv[2] + " HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n").encode())',
  'data = b""',
  'while True:',
  '  chunk = s.recv(4096)',
  '  if not chunk: break',
  '  data += chunk',
  'head, _, body = data.decode().partition("\\r\\n\\r\\n")',
  'print(head.split("\\r\\n")[0]); print(body)',
].join('\n');

/** A server on the worker's loopback standing for what a relayed request must never reach (cloud metadata, …). */
async function startMetadataStandIn(): Promise<{ port: number; hits: number; close(): Promise<void> }> {
  const state = { port: 0, hits: 0, close: async () => {} };
  const server = http.createServer((_req, res) => {
    state.hits += 1;
    res.end('secret-metadata');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.port = (server.address() as AddressInfo).port;
  state.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return state;
}

async function call(baseUrl: string, token: string, mode: 'stream' | 'plain') {
  const result = await environment.exec(handle, {
    command: `python3 -c '${CLIENT}' ${mode}`,
    env: { URL: baseUrl, TOKEN: token },
    timeoutMs: 90_000,
  });
  assert.equal(result.exitCode, 0, result.stderr);
  const [status, ...body] = result.stdout.split('\n');
  return { status: Number(status), body: body.join('\n') };
}

async function records(): Promise<{ status: number }[]> {
  const text = await readFile(path.join(agentDir, 'llm-calls.jsonl'), 'utf8');
  return text
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { status: number });
}

describe('gateway relay over Docker exec stdin/stdout (scripted model server as the vendor)', () => {
  before(async () => {
    scripted = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
    metadata = await startMetadataStandIn();
    scripted.session('relay', { turns: Array.from({ length: 8 }, () => ({ say: 'relayed hello' })) });
    const contextDir = await mkdtemp(path.join(tmpdir(), 'rollout-relay-'));
    await writeFile(
      path.join(contextDir, 'Dockerfile'),
      'FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\n'
    );
    const envKey = await environmentKey(contextDir, null);
    const built = await environment.build({
      contextDir,
      envKey,
      dockerImage: null,
      force: false,
      jobName,
      timeoutMs: 600_000,
    });
    await rm(contextDir, { recursive: true });
    const started = await environment.start({
      image: built.image,
      jobName,
      trialId: `${jobName}/t1`,
      trialName: 't1',
      workerId: `relay-${TEST_HOST_ID}~1`,
      resources: { cpus: 1, memoryBytes: 512 * 2 ** 20, storageBytes: 2 ** 30, pidsLimit: 200 },
      env: {},
    });
    handle = started.handle;
    agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-relay-agent-'));
    session = await gateway.openTrial({
      trialId: `${jobName}/t1`,
      agentDir,
      upstreams: upstreamsFromEnv({ OPENAI_BASE_URL: `${scripted.url}/s/relay/v1`, OPENAI_API_KEY: KEY }),
    });
  });
  after(async () => {
    await session?.close();
    await gateway.close();
    await scripted?.close();
    await metadata?.close();
    await removeJobLeftovers(jobName);
    if (agentDir) await rm(agentDir, { recursive: true, force: true });
  });

  for (const runtime of ['python', 'node'] as const) {
    it(`carries plain and streamed calls through the ${runtime} relay; the key stays on the worker`, async () => {
      if (runtime === 'node') {
        await environment.upload(handle, await hostNodeRuntime(), NODE_RUNTIME_DIR);
      }
      const logLines: string[] = [];
      const before = scripted.calls('relay').length;
      const channel = await openGatewayChannel(
        gateway,
        session,
        environment,
        handle,
        { ROLLOUT_GATEWAY_RELAY: '1' },
        { onLog: (line) => logLines.push(line) }
      );
      try {
        assert.match(channel.description, new RegExp(`gateway relay \\(${runtime} `));
        assert.match(channel.access.baseUrls.openai, /^http:\/\/127\.0\.0\.1:\d+\/t\/.+\/openai\/v1$/);
        const plain = await call(channel.access.baseUrls.openai, channel.access.token, 'plain');
        assert.equal(plain.status, 200, plain.body);
        assert.match(plain.body, /relayed hello/);
        const streamed = await call(channel.access.baseUrls.openai, channel.access.token, 'stream');
        assert.equal(streamed.status, 200, streamed.body);
        assert.match(streamed.body, /^data: /m, 'server-sent events came through');
        assert.match(streamed.body, /relayed/);
        // An absolute-form target (the SSRF of the review's C4) is refused by the relay program itself.
        const port = new URL(channel.access.baseUrls.openai).port;
        const absolute = await environment.exec(handle, {
          command: `python3 -c '${RAW_CLIENT}' ${port} 'http://127.0.0.1:${metadata.port}/latest/meta-data'`,
        });
        assert.match(absolute.stdout, /^HTTP\/1\.[01] 400 .*\n[^]*origin-form/, absolute.stdout + absolute.stderr);
        assert.equal(metadata.hits, 0, 'nothing reached the worker-side server');
        const refused = await call(channel.access.baseUrls.openai, 'rollout-forged', 'plain');
        assert.equal(refused.status, 401);
        assert.equal(scripted.calls('relay').length, before + 2, 'the forged token never reached upstream');
        const probe = await environment.exec(handle, {
          // The key in two halves, so that the probe's own command line does not hold it.
          command:
            `printf '%s%s' ${KEY.slice(0, 10)} ${KEY.slice(10)} > /tmp/probe; ` +
            'cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -c -F -f /tmp/probe; rm /tmp/probe',
        });
        assert.equal(probe.stdout.trim(), '0', 'the real key is in no process of the container');
      } finally {
        await channel.close();
      }
      const calls = await records();
      assert.ok(calls.filter((c) => c.status === 200).length >= 2, 'the calls are recorded in llm-calls.jsonl');
      assert.deepEqual(logLines, [], 'the relay wrote nothing on stderr');
    });
  }

  it('a hostile relay (the agent owns its stdout) gets 400 frames for other targets, methods and headers; the worker lives', async () => {
    const trialPath = `/t/${session.pathId}/`;
    const meta = `127.0.0.1:${metadata.port}`;
    const chat = JSON.stringify({ model: 'scripted-model', messages: [{ role: 'user', content: 'hi' }] });
    const ok = { authorization: `Bearer ${session.token}`, 'content-type': 'application/json' };
    const requests: Record<string, unknown>[] = [
      { id: 1, method: 'GET', path: `http://${meta}/latest/meta-data`, headers: {} },
      {
        id: 2,
        method: 'PUT',
        path: `//${meta}/latest/api/token`,
        headers: { 'x-aws-ec2-metadata-token-ttl-seconds': '60' },
      },
      { id: 3, method: 'GET', path: `${trialPath}../../api/v1/namespaces`, headers: {} },
      { id: 4, method: 'GET', path: `/t/another-trial/openai/v1/models`, headers: {} },
      { id: 5, method: 'GET', path: `file:///etc/passwd`, headers: {} },
      { id: 6, method: 'GET /x HTTP/1.1\r\nHost: evil', path: `${trialPath}openai/v1/models`, headers: {} },
      { id: 7, method: 'CONNECT', path: `${trialPath}openai/v1/models`, headers: {} },
      { id: 8, method: 'GET', path: `${trialPath}openai/v1/models`, headers: { 'x\r\ninjected': 'v' } },
      { id: 9, method: 'GET', path: `${trialPath}openai/v1/models`, headers: { 'x-ok': 'a\r\nx-injected: b' } },
      { id: 10, method: 'POST', path: `${trialPath}openai/v1/chat/completions`, headers: ok },
    ];
    const frames = [
      { t: 'ready', port: 1, runtime: 'hostile' },
      ...requests.map((r) => ({ t: 'req', ...r })),
      { t: 'body', id: 10, data: Buffer.from(chat).toString('base64') },
      { t: 'end', id: 10 },
    ];
    // The "relay": writes the frames, then keeps what the worker answers in /tmp/answers.
    const script = `exec 3<&0; cat <&3 > /tmp/answers & printf '%s\\n' ${frames.map((f) => shellQuote(JSON.stringify(f))).join(' ')}; wait`;
    const failures: string[] = [];
    const relay = await openGatewayRelay(environment, handle, {
      gatewayOrigin: await gateway.urlFor('127.0.0.1'),
      trialPath,
      command: script,
      onFailure: (message) => failures.push(message),
    });
    try {
      const answers = await waitFor(async () => {
        const out = await environment.exec(handle, { command: 'cat /tmp/answers' });
        const lines = out.stdout.trim().split('\n').filter(Boolean);
        const parsed = lines.map((line) => JSON.parse(line) as { t: string; id: number; status?: number });
        return parsed.filter((f) => f.t === 'end' || f.t === 'error').length >= requests.length ? parsed : null;
      });
      const statusOf = (id: number) => answers.find((f) => f.id === id && f.t === 'head')?.status;
      for (const id of [1, 2, 3, 4, 5, 6, 7, 8, 9])
        assert.equal(statusOf(id), 400, `request ${id} refused: ${JSON.stringify(answers)}`);
      assert.equal(statusOf(10), 200, "the trial's own route still works");
      assert.equal(metadata.hits, 0, 'no relayed request reached another server on the worker');
      assert.deepEqual(failures, []);
      assert.equal(relay.failure(), null);
    } finally {
      await relay.close();
    }
    assert.equal(
      relayTarget('http://127.0.0.1:5', '/t/a/', '/t/a/openai/v1/x?y=1')?.href,
      'http://127.0.0.1:5/t/a/openai/v1/x?y=1'
    );
    assert.equal(relayTarget('http://127.0.0.1:5', '/t/a/', '/t/a/%2e%2e/b/openai'), null);
    assert.equal(relayTarget('http://127.0.0.1:5', '/t/a/', '/t/a/\\..\\..\\x'), null);
  });

  it('a hostile relay sending an endless frame is stopped (the step told), its stderr flood capped', async () => {
    const failures: string[] = [];
    const logLines: string[] = [];
    // One frame-sized line of stdout without a newline, after ten thousand lines of stderr.
    const script = [
      `printf '%s\\n' '{"t":"ready","port":1,"runtime":"hostile"}'`,
      'i=0; while [ $i -lt 10000 ]; do echo "noise $i" >&2; i=$((i+1)); done',
      `head -c ${MAX_FRAME_CHARS + 2 ** 20} /dev/zero | tr '\\0' a`,
      'sleep 600',
    ].join('\n');
    const relay = await openGatewayRelay(environment, handle, {
      gatewayOrigin: await gateway.urlFor('127.0.0.1'),
      trialPath: `/t/${session.pathId}/`,
      command: script,
      onLog: (line) => logLines.push(line),
      onFailure: (message) => failures.push(message),
    });
    try {
      await waitFor(() => Promise.resolve(failures.length > 0 ? true : null));
      assert.match(failures[0]!, /sent a frame over \d+ characters; it was stopped/);
      assert.equal(relay.failure(), failures[0]);
      assert.ok(logLines.length <= 101, `stderr capped in the trial log: ${logLines.length} lines`);
      assert.equal(logLines.at(-1), '(further relay stderr not logged)');
    } finally {
      await relay.close();
    }
  });

  it('runs a built-in agent through the relay in a real job: it does the task, the key nowhere in the container', async () => {
    const { connection } = await testTemporal();
    await connection.close();
    const session = scripted.session('relay-agent', {
      turns: [{ shell: "printf 'Hello, world!' > /app/hello.txt" }, { say: 'done' }],
    });
    const dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    await prepareGatewayTask(path.join(dir, 'tasks', 'hello-world'), KEY);
    const name = `${jobName}-pi`;
    const env = { OPENAI_BASE_URL: session.openAiBaseUrl, OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}' };
    const job = { name, agents: [{ name: 'pi', model: 'scripted-model', env }], datasets: [{ path: 'tasks' }] };
    await writeFile(path.join(dir, 'job.yaml'), stringify(job));
    try {
      const result = await runCli(['job.yaml'], {
        cwd: dir,
        env: { ROLLOUT_TEST_KEY: KEY, ROLLOUT_GATEWAY_RELAY: '1' },
      });
      assert.equal(result.code, 0, result.stderr);
      const trialDir = path.join(dir, 'jobs', name, 'hello-world__pi__1');
      const trial = JSON.parse(await readFile(path.join(trialDir, 'result.json'), 'utf8')) as {
        rewards: unknown;
        error: unknown;
      };
      assert.deepEqual(trial.rewards, { reward: 1 }, `the task done, no key found: ${JSON.stringify(trial.error)}`);
      assert.match(await readFile(path.join(trialDir, 'trial.log'), 'utf8'), /through the gateway relay \(node v/);
      assert.ok(session.calls.length >= 2, 'the model was called');
    } finally {
      await removeJobLeftovers(name);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('takes ROLLOUT_GATEWAY_PUBLIC_URL where the environment has no channel, listening at ROLLOUT_GATEWAY_LISTEN', async () => {
    // An environment that neither reaches this host nor runs streamed processes (Fly's machines).
    const remote = { type: 'remote' } as Environment;
    const port = await freePort();
    const env = { ROLLOUT_GATEWAY_PUBLIC_URL: 'https://gw.example.com/', ROLLOUT_GATEWAY_LISTEN: `127.0.0.1:${port}` };
    const channel = await openGatewayChannel(gateway, session, remote, handle, env);
    const base = channel.access.baseUrls.openai;
    assert.match(base, /^https:\/\/gw\.example\.com\/t\/.+\/openai\/v1$/);
    // What the user's proxy does: the public URL's path, at the listen address.
    const res = await fetch(`http://127.0.0.1:${port}${new URL(base).pathname}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${channel.access.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'scripted-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /relayed hello/);
    await assert.rejects(openGatewayChannel(gateway, session, remote, handle, {}), /set ROLLOUT_GATEWAY_PUBLIC_URL/);
    assert.throws(() => listenAddress('127.0.0.1:0'), /ROLLOUT_GATEWAY_LISTEN: expected host:port/);
    assert.deepEqual(listenAddress('[::1]:8790'), { host: '::1', port: 8790 });
  });
});

async function waitFor<T>(probe: () => Promise<T | null>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error(`not seen within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
