/**
 * `rollout serve` as a user runs it (the real CLI as a child process, real Temporal, real trials on the `local`
 * environment), driven over HTTP and with Eval Protocol's own client code from PyPI.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import { namedTrial } from '../../src/api/rollout';
import { startTrialWorkflow } from '../../src/api/submit';
import type { LlmCallRecord } from '../../src/gateway/records';
import type { TrialResult } from '../../src/results/trial-result';
import type { TrialSpec } from '../../src/contracts/trial';
import { isScored } from '../../src/contracts/trial';
import { runCli } from '../support/cli';
import { writeLocalJob } from '../support/local-job';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';
import { REPO_ROOT, testTemporal } from '../support/temporal';
import { freePort, ServeProcess } from '../support/serve';
import { waitFor, within } from '../support/wait';

const TOKEN = `tok-${randomBytes(8).toString('hex')}`;
const API_KEY = `sk-test-${randomBytes(12).toString('hex')}`;
const EP_PYTHON = path.join(REPO_ROOT, '.venv-test', 'bin', 'python');

let dir: string;
let base: string;
let serveName: string;
let server: ServeProcess;
let client: Client;
let connection: Connection;
let scripted: ScriptedModelServer;
/** The scripted model server's OpenAI root for every rollout (the stand-in for the trainer's model). */
let modelBaseUrl: string;
const SCENARIO = { turns: [{ say: 'done' }] };

function api(pathname: string, init: { method?: string; body?: unknown; token?: string | null } = {}) {
  return server.request(pathname, init);
}

function initBody(rolloutId: string, rowId: string) {
  return {
    completion_params: { model: 'scripted-1', temperature: 0 },
    messages: [{ role: 'user', content: 'solve it' }],
    model_base_url: modelBaseUrl,
    api_key: API_KEY,
    metadata: { invocation_id: 'i', experiment_id: 'e', rollout_id: rolloutId, run_id: 'r', row_id: rowId },
  };
}

function statusOf(rolloutId: string) {
  return server.json(`/status?rollout_id=${encodeURIComponent(rolloutId)}`);
}

/** Every string and decoded payload byte of a history, as one text (payloads are bytes in the proto). */
function decodedText(value: unknown): string {
  if (value instanceof Uint8Array) return Buffer.from(value).toString('utf8');
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') return Object.values(value).map(decodedText).join('\n');
  return '';
}

async function filesUnder(folder: string): Promise<string[]> {
  const entries = await readdir(folder, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

/** A further `rollout serve` over the same tasks and agent, in its own folder, with one more serve.yaml line. */
async function anotherServer(name: string, setting: string): Promise<ServeProcess> {
  const folder = path.join(dir, name);
  await mkdir(folder, { recursive: true });
  const port = await freePort();
  await writeFile(
    path.join(folder, 'serve.yaml'),
    [
      'dataset: ../tasks',
      'agent: ../agent.yaml',
      `name: ${serveName}-${name}`,
      'jobs_dir: ../jobs',
      'environment: local',
      `port: ${port}`,
      setting,
      '',
    ].join('\n')
  );
  const started = new ServeProcess(`http://127.0.0.1:${port}`, folder, TOKEN);
  await started.start();
  return started;
}

describe('rollout serve: remote rollouts', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
    scripted = await startScriptedModelServer();
    modelBaseUrl = scripted.session('ep', SCENARIO).openAiBaseUrl;
    serveName = `serve-${randomBytes(3).toString('hex')}`;
    const jobFile = await writeLocalJob({ name: serveName, attempts: 1, concurrency: 2 });
    dir = path.dirname(jobFile);
    // A second task the agent takes its time over (to kill the server mid-rollout).
    const slow = path.join(dir, 'tasks', 'slow');
    await mkdir(path.join(slow, 'tests'), { recursive: true });
    for (const file of ['task.toml', 'tests/test.sh']) {
      await writeFile(path.join(slow, file), await readFile(path.join(dir, 'tasks', 'trivial', file)));
    }
    await writeFile(path.join(slow, 'instruction.md'), 'Slowly write ok to answer.txt.');
    await writeFile(
      path.join(dir, 'agent.yaml'),
      [
        'agents:',
        '  - name: scripted',
        '    execute: |',
        '      echo "model=$ROLLOUT_MODEL base=$ROLLOUT_MODEL_BASE_URL key=$ROLLOUT_API_KEY"',
        '      printf %s "$ROLLOUT_API_KEY" | sha256sum',
        // One model call, OpenAI Chat, in bash (no curl needed): through the gateway, which records it.
        '      rest=${OPENAI_BASE_URL#http://}; hostport=${rest%%/*}; path=/${rest#*/}',
        '      body=\'{"model":"\'"$ROLLOUT_MODEL"\'","messages":[{"role":"user","content":"solve it"}]}\'',
        '      exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}"',
        '      printf \'POST %s/chat/completions HTTP/1.1\\r\\nHost: %s\\r\\nAuthorization: Bearer %s\\r\\nContent-Type: application/json\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n%s\' "$path" "$hostport" "$OPENAI_API_KEY" "${#body}" "$body" >&3',
        '      head -1 <&3',
        '      exec 3<&-',
        '      case "$ROLLOUT_TASK_INSTRUCTION" in Slowly*) sleep 6;; esac',
        '      echo ok > answer.txt',
        'datasets:',
        '  - path: tasks',
        '',
      ].join('\n')
    );
    base = `http://127.0.0.1:${await freePort()}`;
    await writeFile(
      path.join(dir, 'serve.yaml'),
      [
        'dataset: tasks',
        'agent: agent.yaml',
        `name: ${serveName}`,
        'jobs_dir: jobs',
        'environment: local',
        `port: ${new URL(base).port}`,
        '',
      ].join('\n')
    );
    server = new ServeProcess(base, dir, TOKEN);
    await server.start();
  });
  after(async () => {
    await server.stop('SIGTERM');
    await connection.close();
    await scripted.close();
  });

  it('needs the bearer token, except for /health and /openapi.json', async () => {
    assert.equal((await api('/status?rollout_id=x', { token: null })).status, 401);
    assert.equal((await api('/init', { body: initBody('r-401', 'trivial'), token: null })).status, 401);
    assert.equal((await api('/status?rollout_id=x', { token: 'wrong' })).status, 401);
    assert.equal((await api('/health', { token: null })).status, 200);
    const openapi = (await (await api('/openapi.json', { token: null })).json()) as { paths: Record<string, unknown> };
    assert.ok(
      ['/init', '/status', '/rollouts/{id}'].every((p) => p in openapi.paths),
      Object.keys(openapi.paths).join()
    );
  });

  it('rejects an unknown task and a malformed body with 400 and a clear message', async () => {
    const unknown = await api('/init', { body: initBody('r-unknown', 'no-such-task') });
    assert.equal(unknown.status, 400);
    assert.match(((await unknown.json()) as { error: string }).error, /unknown task "no-such-task".*slow, trivial/);
    const malformed = await api('/init', { body: { ...initBody('r-bad', 'trivial'), completion_params: {} } });
    assert.equal(malformed.status, 400);
    assert.match(((await malformed.json()) as { error: string }).error, /^body\.completion_params\.model: /);
    assert.equal((await statusOf('r-unknown')).http, 404);
    // Every missing field at once, not the first only.
    const empty = await api('/init', { body: { completion_params: {}, metadata: {} } });
    assert.equal(empty.status, 400);
    assert.deepEqual(((await empty.json()) as { error: string }).error.split('; '), [
      'body.completion_params.model: required (the model the agent uses)',
      'body.metadata.rollout_id: required (the idempotency key)',
      'body.metadata.row_id: required (it names the task)',
    ]);
    // The ids Rollout does not need (invocation, experiment, run) may be left out.
    const minimal = { completion_params: { model: 'm' }, metadata: { rollout_id: 'r-minimal', row_id: 'trivial' } };
    assert.equal((await api('/init', { body: minimal })).status, 200);
    await waitFor(
      'the minimal rollout to finish',
      async () => (await statusOf('r-minimal')).body?.terminated === true,
      120_000
    );
  });

  it("runs a rollout end to end with Eval Protocol's client; a duplicate /init starts no second trial", async () => {
    const { stdout } = await promisify(execFile)(
      EP_PYTHON,
      [path.join(REPO_ROOT, 'test', 'fixtures', 'eval-protocol', 'client.py'), base, 'ep-1', 'trivial', API_KEY],
      {
        env: {
          ...process.env,
          FIREWORKS_API_KEY: TOKEN,
          LITELLM_LOCAL_MODEL_COST_MAP: 'True',
          MODEL_BASE_URL: modelBaseUrl,
        },
        timeout: 180_000,
      }
    );
    const run = JSON.parse(stdout.trim().split('\n').pop()!) as {
      init: { http: number };
      final: { code: number; message: string };
      exception: string | null;
      reward: number;
    };
    assert.equal(run.init.http, 200);
    assert.deepEqual(run.final, { code: 100, message: 'finished' });
    assert.equal(run.exception, null);
    assert.equal(run.reward, 1);

    const again = await api('/init', { body: initBody('ep-1', 'trivial') });
    assert.equal(again.status, 200);
    const runs = await client.workflow.count(`WorkflowId = "${serveName}/rollout__ep-1"`);
    assert.equal(runs.count, 1);

    const finished = (await (await api('/rollouts/ep-1')).json()) as {
      result: { rewards: unknown; task_name: string };
      files: string[];
    };
    assert.deepEqual(finished.result.rewards, { reward: 1 });
    assert.equal(finished.result.task_name, 'trivial');
    assert.ok(finished.files.includes('agent/execute.txt'), finished.files.join());
  });

  it('keeps the API key on the worker: the agent calls the model through the gateway, which records the call', async () => {
    const trialDir = path.join(dir, 'jobs', serveName, 'rollout__ep-1');
    const log = await readFile(path.join(trialDir, 'agent', 'execute.txt'), 'utf8');
    // The agent saw the gateway's URL and its per-trial token, never the /init key; the vendor got the key.
    assert.match(
      log,
      /model=accounts\/fireworks\/models\/scripted base=http:\/\/127\.0\.0\.1:\d+\/t\/\S+ key=rollout-[0-9a-f]{48}/
    );
    assert.match(log, /HTTP\/1\.1 200/);
    assert.ok(!log.includes(createHash('sha256').update(API_KEY).digest('hex')), 'the agent got the key');
    const upstream = scripted.calls('ep');
    assert.ok(upstream.length >= 1 && upstream.every((c) => c.credential === API_KEY), JSON.stringify(upstream));
    const calls = (await readFile(path.join(trialDir, 'agent', 'llm-calls.jsonl'), 'utf8')).trim().split('\n');
    assert.equal(calls.length, 1);
    const call = JSON.parse(calls[0]!) as LlmCallRecord;
    assert.equal(call.status, 200);
    assert.deepEqual(call.usage, scriptedUsage(0));
    const finished = (await (await api('/rollouts/ep-1')).json()) as { files: string[] };
    assert.ok(
      ['agent/llm-calls.jsonl', 'agent/trajectory.json'].every((f) => finished.files.includes(f)),
      finished.files.join()
    );
    const exported = await runCli(['export', path.join(dir, 'jobs', serveName), '--format', 'rl'], { cwd: dir });
    assert.equal(exported.code, 0, exported.stderr);
    const row = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { trial_name: string; kind: string; reward: number; calls: unknown[] })
      .find((r) => r.trial_name === 'rollout__ep-1');
    assert.deepEqual(row && { kind: row.kind, reward: row.reward, calls: row.calls.length }, {
      kind: 'rollout',
      reward: 1,
      calls: 1,
    });

    const history = decodedText(await client.workflow.getHandle(`${serveName}/rollout__ep-1`).fetchHistory());
    assert.ok(!history.includes(API_KEY), 'key in workflow history');
    assert.ok(history.includes('sealedAgentEnv'));
    for (const file of await filesUnder(path.join(dir, 'jobs'))) {
      assert.ok(!(await readFile(file, 'utf8')).includes(API_KEY), `key in ${file}`);
    }
  });

  it('refuses a sealed key copied into another trial: an infrastructure error, not scored, the key reaches nothing', async () => {
    // Whoever can start workflows copies the sealed key of ep-1's input into a trial of their own (M8).
    const events = (await client.workflow.getHandle(`${serveName}/rollout__ep-1`).fetchHistory()).events ?? [];
    const input = events[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]?.data;
    const original = JSON.parse(Buffer.from(input!).toString('utf8')) as TrialSpec;
    assert.ok(original.sealedAgentEnv, 'the rollout was given its key sealed');
    const copy = namedTrial(original, 'rollout__stolen');
    const before = scripted.calls('ep').length;
    const summary = await within(180_000, 'the copied trial to end', (await startTrialWorkflow(client, copy)).result());
    assert.equal(summary.error?.type, 'InfrastructureError', JSON.stringify(summary));
    assert.equal(isScored(summary.error?.type), false, 'never scored as the agent failing');
    const result = JSON.parse(
      await readFile(path.join(dir, 'jobs', serveName, 'rollout__stolen', 'result.json'), 'utf8')
    ) as TrialResult;
    assert.equal(result.error?.type, 'InfrastructureError');
    assert.equal(result.error?.step, 'build');
    assert.match(
      result.error?.message ?? '',
      /sealed secrets: not sealed for this trial \(job serve-[0-9a-f]+, trial serve-[0-9a-f]+\/rollout__stolen\): refused/
    );
    assert.equal(result.agent_exit_code, null, 'the agent never ran');
    assert.equal(scripted.calls('ep').length, before, 'no model call was made with the key');
  });

  it('names the task by the first user message with task_from: first_user_message', async () => {
    const second = await anotherServer('by-message', 'task_from: first_user_message');
    try {
      const first = initBody('msg-1', 'not-a-task');
      const body = {
        ...first,
        // The trainer's policy version for this rollout: stamped on its model calls (docs/rl.md).
        metadata: { ...first.metadata, policy_version: 12 },
        messages: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: ' trivial\n' },
        ],
      };
      const init = await second.request('/init', { body });
      assert.equal(init.status, 200, await init.text());
      const unknown = await second.request('/init', {
        body: {
          ...body,
          metadata: { ...body.metadata, rollout_id: 'msg-2' },
          messages: [{ role: 'user', content: 'nope' }],
        },
      });
      assert.equal(unknown.status, 400);
      assert.match(
        ((await unknown.json()) as { error: string }).error,
        /^unknown task "nope" \(from the first user message\)/
      );
      const status = () => second.json<{ terminated: boolean; reward: number | null }>('/status?rollout_id=msg-1');
      await waitFor(
        'the rollout named by its message to finish',
        async () => (await status()).body.terminated,
        120_000
      );
      assert.equal((await status()).body.reward, 1);
      const finished = (await (await second.request('/rollouts/msg-1')).json()) as { result: { task_name: string } };
      assert.equal(finished.result.task_name, 'trivial');
      const calls = await readFile(
        path.join(dir, 'jobs', `${serveName}-by-message`, 'rollout__msg-1', 'agent', 'llm-calls.jsonl'),
        'utf8'
      );
      const versions = calls
        .trim()
        .split('\n')
        .map((line) => (JSON.parse(line) as LlmCallRecord).policy_version);
      assert.deepEqual(versions, [12]);
    } finally {
      await second.stop('SIGTERM');
    }
  });

  it("runs Eval Protocol's own RemoteRolloutProcessor, unchanged, with eval_protocol.loopback_without_token", async () => {
    const loopback = await anotherServer('ep-loopback', 'eval_protocol: { loopback_without_token: true }');
    const port = new URL(loopback.base).port;
    try {
      // Only Eval Protocol's endpoints go without the token.
      assert.equal((await loopback.request('/sessions', { body: { task: 'trivial' }, token: null })).status, 401);
      const modelUrl = scripted.session('rrp', SCENARIO).openAiBaseUrl;
      // The processor sends no token anywhere; its "tracing proxy" is this server (http://localhost:<port>).
      const { stdout } = await promisify(execFile)(
        EP_PYTHON,
        [
          path.join(REPO_ROOT, 'test', 'fixtures', 'eval-protocol', 'remote_processor.py'),
          `http://127.0.0.1:${port}`,
          `http://localhost:${port}`,
          modelUrl,
          'trivial',
          'rrp-1',
          'rrp-2',
        ],
        {
          env: { ...process.env, FIREWORKS_API_KEY: API_KEY, LITELLM_LOCAL_MODEL_COST_MAP: 'True' },
          timeout: 240_000,
        }
      );
      const rows = stdout
        .trim()
        .split('\n')
        .map(
          (line) =>
            JSON.parse(line) as {
              status: { code: number; message: string };
              messages: { role: string; content: string }[];
              ids: string[];
              extra: { reward?: number } | null;
            }
        );
      assert.equal(rows.length, 2, stdout);
      for (const [i, row] of rows.entries()) {
        assert.equal(row.status.code, 100, JSON.stringify(row));
        // The row's messages are now the rollout's model conversation, from the gateway's records.
        assert.deepEqual(row.messages, [
          { role: 'user', content: 'solve it' },
          { role: 'assistant', content: 'done' },
        ]);
        assert.deepEqual(row.ids, ['inv-1', 'exp-1', `rrp-${i + 1}`, 'run-1']);
        assert.equal(row.extra?.reward, 1);
      }
      // The model behind the tracing URL (completion_params.base_url) got both calls, with the key.
      const upstream = scripted.calls('rrp');
      assert.equal(upstream.length, 2);
      assert.ok(upstream.every((c) => c.credential === API_KEY));
      const selfOnly = await loopback.request('/init', {
        token: null,
        body: { ...initBody('rrp-3', 'trivial'), model_base_url: `http://localhost:${port}/v1` },
      });
      assert.equal(selfOnly.status, 400);
      assert.match(((await selfOnly.json()) as { error: string }).error, /^model_base_url: .* is this server/);
    } finally {
      await loopback.stop('SIGTERM');
    }
  });

  it('answers status across a server kill and restart, and the rollout completes', async () => {
    assert.equal((await api('/init', { body: initBody('slow-1', 'slow') })).status, 200);
    await waitFor('the slow rollout to be running', async () => (await statusOf('slow-1')).body.terminated === false);
    const output = await server.stop('SIGKILL');
    assert.ok(!output.includes(API_KEY), 'key in the server output');
    await server.start();
    const during = await statusOf('slow-1');
    assert.equal(during.http, 200);
    await waitFor(
      'the slow rollout to finish after the restart',
      async () => (await statusOf('slow-1')).body.terminated === true,
      120_000
    );
    const final = (await statusOf('slow-1')).body;
    assert.deepEqual(final.status, { code: 100, message: 'finished' });
    assert.equal(final.reward, 1);
  });
});
