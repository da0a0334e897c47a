/**
 * The model gateway in real jobs (CLI, Temporal, Docker) against the scripted model server (the stand-in for vendor
 * APIs): a custom agent with `gateway: true`, written in bash (bookworm-slim has no curl), calls the model through
 * the gateway. Its calls are recorded with usage and cost in result.json, the job sums them per agent, the ATIF
 * trajectory passes Harbor's own validator, the real key is nowhere in the container (the verifier greps the
 * environment and the filesystem), in history or in files; the preflight's model list reaches the upstream with the
 * key; a 429 is absorbed at the gateway, and one that lasts past max_wait ends in ApiRateLimitError, not scored and
 * retried per `retry`.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { LlmCallRecord } from '../../src/gateway/records';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { gatewayAgentYaml, prepareGatewayTask } from '../support/gateway-agent';
import { validateWithHarbor } from '../support/harbor';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';
import { testTemporal } from '../support/temporal';

const jobName = `gateway-${randomBytes(3).toString('hex')}`;
const KEY = `sk-real-${randomBytes(12).toString('hex')}`;

async function readJson<T>(file: string): Promise<T> {
  return JSON.parse(await readFile(file, 'utf8')) as T;
}

describe('model gateway in real jobs', () => {
  let dir: string;
  let run: CliRun;
  let scripted: ScriptedModelServer;
  let client: Client;
  let connection: Connection;
  const trial = (agent: string) => path.join(dir, 'jobs', jobName, `hello-world__${agent}__1`);

  before(async () => {
    ({ client, connection } = await testTemporal());
    scripted = await startScriptedModelServer();
    const turns = [{ shell: "printf 'Hello, world!' > /app/hello.txt" }, { say: 'done' }];
    scripted.session('ok', { turns });
    scripted.session('flaky', { turns, fault: { kind: 'rate-limit', times: 1, retryAfterSec: 0 } });
    scripted.session('limited', { turns, fault: { kind: 'rate-limit', retryAfterSec: 0 } });
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    const script = await prepareGatewayTask(path.join(dir, 'tasks', 'hello-world'), KEY);
    const agent = (name: string) =>
      gatewayAgentYaml(name, script, {
        OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}',
        OPENAI_BASE_URL: `${scripted.url}/s/${name}/v1`,
      });
    await writeFile(
      path.join(dir, 'job.yaml'),
      [
        `name: ${jobName}`,
        'retry: {error_types: [ApiRateLimitError], max_retries: 1, min_wait_sec: 0.2, max_wait_sec: 1}',
        'agents:',
        agent('ok'),
        agent('flaky'),
        agent('limited'),
        'datasets:',
        '  - path: tasks',
        '',
      ].join('\n')
    );
    run = await runCli(['job.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY, ROLLOUT_GATEWAY_MAX_WAIT_SEC: '2' } });
  });
  after(async () => {
    await connection.close();
    await scripted.close();
    await removeJobLeftovers(jobName);
  });

  it('records every call with usage and cost; the key reached upstream only; the verifier found it nowhere', async () => {
    assert.equal(run.code, 0, run.stderr + run.stdout);
    const result = await readJson<TrialResult>(path.join(trial('ok'), 'result.json'));
    assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
    const calls = (await readFile(path.join(trial('ok'), 'agent', 'llm-calls.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as LlmCallRecord);
    assert.deepEqual(
      calls.map((c) => [c.dialect, c.status, c.usage]),
      [
        ['openai-chat', 200, scriptedUsage(0)],
        ['openai-chat', 200, scriptedUsage(1)],
      ]
    );
    // The preflight's model list first, then the agent's two calls: the real key on each.
    assert.deepEqual(
      scripted.calls('ok').map((c) => [c.method, c.path.replace(/\?.*/, ''), c.credential]),
      [
        ['GET', '/v1/models', KEY],
        ['POST', '/v1/chat/completions', KEY],
        ['POST', '/v1/chat/completions', KEY],
      ]
    );
    const expected = [scriptedUsage(0), scriptedUsage(1)];
    assert.equal(result.usage?.n_llm_calls, 2);
    assert.equal(result.usage?.input_tokens, expected[0]!.input_tokens + expected[1]!.input_tokens);
    assert.equal(result.usage?.output_tokens, expected[0]!.output_tokens + expected[1]!.output_tokens);
    assert.equal(result.usage?.cached_tokens, expected[0]!.cached_tokens + expected[1]!.cached_tokens);
    assert.ok((result.usage?.cost_usd ?? 0) > 0, 'gpt-5 is in the price table');
  });

  it('writes an ATIF trajectory that Harbor’s own validator accepts', async () => {
    const file = path.join(trial('ok'), 'agent', 'trajectory.json');
    const verdict = await validateWithHarbor(file);
    assert.equal(verdict.code, 0, verdict.output);
    const trajectory = await readJson<{ steps: { source: string; tool_calls?: unknown[] }[] }>(file);
    assert.deepEqual(
      trajectory.steps.map((s) => s.source),
      ['user', 'agent', 'agent']
    );
  });

  it('a 429 is absorbed at the gateway; past max_wait it ends in ApiRateLimitError, not scored, retried per `retry`', async () => {
    const flaky = await readJson<TrialResult>(path.join(trial('flaky'), 'result.json'));
    assert.deepEqual(flaky.rewards, { reward: 1 });
    assert.equal(flaky.error, null);
    assert.equal(flaky.retries, 0);
    assert.equal(flaky.usage?.n_llm_calls, 2);
    const [first] = (await readFile(path.join(trial('flaky'), 'agent', 'llm-calls.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as LlmCallRecord);
    assert.deepEqual(
      first!.attempts!.map((a) => a.status),
      [429, 200]
    );
    const limited = await readJson<TrialResult>(path.join(trial('limited'), 'result.json'));
    assert.equal(limited.error?.type, 'ApiRateLimitError');
    assert.equal(limited.retries, 1);
    const earlier = await readFile(path.join(trial('limited'), 'earlier-runs', '1', 'llm-calls.jsonl'), 'utf8');
    const record = JSON.parse(earlier.trim()) as LlmCallRecord;
    assert.equal(record.status, 429);
    assert.ok(record.attempts!.length > 1, 'the gateway retried before giving up');
    const job = await readJson<JobResult>(path.join(dir, 'jobs', jobName, 'result.json'));
    const evalOf = (agent: string) => Object.values(job.evals).find((e) => e.agent === agent);
    assert.equal(evalOf('limited')?.n_scored_trials, 0);
    assert.equal(evalOf('ok')?.n_scored_trials, 1);
  });

  it('sums usage per agent in the job result and the CLI table', async () => {
    const job = await readJson<JobResult>(path.join(dir, 'jobs', jobName, 'result.json'));
    assert.equal(job.usage_by_agent.ok?.n_llm_calls, 2);
    assert.equal(job.usage_by_agent.limited?.input_tokens, 0);
    // Retried calls: flaky's 429 was absorbed, limited's went past max_wait on both runs.
    assert.equal(job.usage_by_agent.ok?.n_retried_calls, 0);
    assert.equal(job.usage_by_agent.flaky?.n_retried_calls, 1);
    assert.equal(job.usage_by_agent.limited?.n_retried_calls, 2);
    assert.match(run.stdout, /llm calls\s+retried\s+waited\s+input tokens/);
    const input = scriptedUsage(0).input_tokens + scriptedUsage(1).input_tokens;
    assert.match(run.stdout, new RegExp(`ok\\s+2\\s+0\\s+\\d\\S*s\\s+${input}\\s`));
    assert.match(run.stdout, new RegExp(`flaky\\s+2\\s+1\\s+\\d\\S*s\\s+${input}\\s`));
  });

  it('keeps the key out of every file, the CLI output and the histories', async () => {
    const entries = await readdir(path.join(dir, 'jobs', jobName), { withFileTypes: true, recursive: true });
    const files = entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
    assert.ok(files.some((f) => f.endsWith('llm-calls.jsonl')));
    for (const file of files) {
      const text = await readFile(file, 'latin1');
      assert.ok(!text.includes(KEY), `key found in ${file}`);
      assert.ok(!text.includes('[REDACTED]') || !file.includes('agent'), `something was redacted in ${file}`);
    }
    assert.ok(!run.stdout.includes(KEY) && !run.stderr.includes(KEY));
    const history = await client.workflow.getHandle(`${jobName}/hello-world__ok__1`).fetchHistory();
    const text = JSON.stringify(history, (_key, value: unknown) =>
      value instanceof Uint8Array ? Buffer.from(value).toString('latin1') : value
    );
    assert.ok(!text.includes(KEY));
  });
});
