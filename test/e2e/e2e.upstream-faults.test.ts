/**
 * Upstream failures are never the agent's fault, in real jobs (CLI, Temporal, Docker) against the scripted model
 * server (the stand-in for vendor APIs), with a custom agent on the gateway written in bash (bookworm-slim has no
 * curl): a 60-second burst of 429s at concurrency 8 is absorbed at the gateway (every trial reward 1, none errored,
 * the waits recorded); the preflight stops a job with a missing key (exit 2), an unreachable upstream or a rejected
 * key (exit 3) before anything starts; an upstream that dies mid-trial, and an agent that keeps calling a dead one
 * until its timeout, end in ApiUnreachableError: not scored, retried.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Connection } from '@temporalio/client';

import type { LlmCallRecord } from '../../src/gateway/records';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { gatewayAgentYaml, prepareGatewayTask } from '../support/gateway-agent';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { testTemporal } from '../support/temporal';

const suffix = randomBytes(3).toString('hex');
const KEY = `sk-real-${randomBytes(8).toString('hex')}`;
const TURNS = [{ shell: "printf 'Hello, world!' > /app/hello.txt" }, { say: 'done' }];
/** Calls the model through the gateway once a second until its timeout, whatever the answer. */
const STUBBORN = [
  'rest=${OPENAI_BASE_URL#http://}; hostport=${rest%%/*}; base=/${rest#*/}',
  'body=\'{"model":"gpt-5","messages":[{"role":"user","content":"go"}]}\'',
  'while true; do',
  '  exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}"',
  '  printf \'POST %s/chat/completions HTTP/1.1\\r\\nHost: %s\\r\\nAuthorization: Bearer %s\\r\\nContent-Type: application/json\\r\\nContent-Length: %s\\r\\nConnection: close\\r\\n\\r\\n%s\' "$base" "$hostport" "$OPENAI_API_KEY" "${#body}" "$body" >&3',
  '  cat <&3 >/dev/null; exec 3<&-; sleep 1',
  'done',
].join('\n');

async function readJson<T>(file: string): Promise<T> {
  return JSON.parse(await readFile(file, 'utf8')) as T;
}

async function callRecords(file: string): Promise<LlmCallRecord[]> {
  const text = await readFile(file, 'utf8');
  return text
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as LlmCallRecord);
}

/** A port nothing listens on: connections to it are refused. */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('upstream failures in real jobs (scripted model server)', () => {
  let dir: string;
  let scripted: ScriptedModelServer;
  let dying: ScriptedModelServer;
  let connection: Connection;
  let fixtureAgent: string;
  const jobs: string[] = [];

  before(async () => {
    ({ connection } = await testTemporal());
    scripted = await startScriptedModelServer();
    dying = await startScriptedModelServer();
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    fixtureAgent = await prepareGatewayTask(path.join(dir, 'tasks', 'hello-world'), KEY);
  });
  after(async () => {
    await connection.close();
    await scripted.close();
    await dying.close();
    for (const job of jobs) await removeJobLeftovers(job);
  });

  async function writeJob(file: string, lines: string[]): Promise<string> {
    const name = `${file.replace(/\.yaml$/, '')}-${suffix}`;
    jobs.push(name);
    await writeFile(path.join(dir, file), [`name: ${name}`, ...lines, 'datasets:', '  - path: tasks', ''].join('\n'));
    return name;
  }

  it('a 60-second burst of 429s at concurrency 8: every trial still reward 1, none errored, the waits recorded', async () => {
    scripted.session('burst', { turns: TURNS });
    const name = await writeJob('burst.yaml', [
      'n_attempts: 8',
      'n_concurrent_trials: 8',
      'timeout_multiplier: 4',
      'agents:',
      gatewayAgentYaml('burst', fixtureAgent, {
        OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}',
        OPENAI_BASE_URL: `${scripted.url}/s/burst/v1`,
      }),
    ]);
    scripted.faultWindow({ kind: 'rate-limit', durationMs: 60_000, retryAfterSec: 5 });
    const run = await runCli(['burst.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY }, timeoutMs: 15 * 60_000 });
    assert.equal(run.code, 0, run.stderr + run.stdout);
    const job = await readJson<JobResult>(path.join(dir, 'jobs', name, 'result.json'));
    assert.equal(job.n_completed_trials, 8);
    assert.equal(job.n_errored_trials, 0);
    const limited = scripted.calls('burst').filter((c) => c.status === 429);
    assert.ok(limited.length >= 8, `${limited.length} calls were rate-limited`);
    let waited = 0;
    for (let attempt = 1; attempt <= 8; attempt++) {
      const folder = path.join(dir, 'jobs', name, `hello-world__burst__${attempt}`);
      const result = await readJson<TrialResult>(path.join(folder, 'result.json'));
      assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
      assert.equal(result.retries, 0);
      const calls = await callRecords(path.join(folder, 'agent', 'llm-calls.jsonl'));
      assert.ok(calls.every((call) => call.status === 200 && call.error === null));
      const retried = calls.filter((call) => call.attempts!.some((a) => a.status === 429));
      for (const call of retried) assert.ok(call.waited_ms! >= 5_000, 'retry-after: 5 honoured');
      waited += retried.length;
    }
    assert.ok(waited >= 8, 'every trial met the burst and waited it out');
    // Retried calls and time waited, per agent, in result.json and `rollout status`.
    const usage = job.usage_by_agent.burst;
    assert.equal(usage?.n_retried_calls, waited);
    assert.ok((usage?.waited_ms ?? 0) >= waited * 5_000, JSON.stringify(usage));
    const status = await runCli(['status', path.join(dir, 'jobs', name)], { cwd: dir });
    assert.match(status.stdout, new RegExp(`burst\\s+\\d+\\s+${waited}\\s+\\d\\S*s`), status.stdout);
  });

  it('preflight: a missing key is an input error naming the variable (exit 2); nothing starts', async () => {
    const name = await writeJob('no-key.yaml', ['agents:', '  - name: claude-code']);
    const run = await runCli(['no-key.yaml'], { cwd: dir, env: { ANTHROPIC_API_KEY: '' } });
    assert.equal(run.code, 2, run.stderr + run.stdout);
    assert.deepEqual(run.stderr.trim().split('\n'), [
      'error: no-key.yaml: agents.0.env: ANTHROPIC_API_KEY is not set: claude-code calls https://api.anthropic.com ' +
        '(add ANTHROPIC_API_KEY: ${ANTHROPIC_API_KEY} to its env)',
    ]);
    assert.ok(!(await readdir(path.join(dir, 'jobs')).catch(() => [] as string[])).includes(name));
  });

  it('preflight: an unreachable upstream, an unknown host and a rejected key are one line each (exit 3)', async () => {
    scripted.session('rejected', { turns: TURNS, fault: { kind: 'auth' } });
    const cases = [
      ['refused', `http://127.0.0.1:${await closedPort()}/v1`, /cannot be reached \(connect ECONNREFUSED/],
      ['unknown-host', 'http://rollout-no-such-host.invalid/v1', /cannot be reached \(getaddrinfo /],
      ['rejected', `${scripted.url}/s/rejected/v1`, /rejected the key in OPENAI_API_KEY .*\(HTTP 401\)/],
    ] as const;
    for (const [label, baseUrl, pattern] of cases) {
      const name = await writeJob(`${label}.yaml`, [
        'agents:',
        '  - name: terminus',
        '    env:',
        `      OPENAI_BASE_URL: '${baseUrl}'`,
        "      OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}'",
      ]);
      const run = await runCli([`${label}.yaml`], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
      assert.equal(run.code, 3, `${label}: ${run.stderr}${run.stdout}`);
      const lines = run.stderr.trim().split('\n');
      assert.equal(lines.length, 1, run.stderr);
      assert.match(lines[0]!, pattern);
      assert.match(lines[0]!, /no trial was started \(--skip-preflight to start anyway\)/);
      assert.ok(!run.stderr.includes(KEY));
      // The job folder may hold its config; no trial ran.
      const entries = await readdir(path.join(dir, 'jobs', name)).catch(() => [] as string[]);
      assert.ok(!entries.some((entry) => entry.startsWith('hello-world__')), `${label}: ${entries.join(', ')}`);
    }
  });

  it('an upstream that dies mid-trial, and an agent calling a dead one until its timeout: ApiUnreachableError, not scored, retried', async () => {
    dying.session('dying', { turns: TURNS, fault: { kind: 'die', atTurn: 1 } });
    const name = await writeJob('dies.yaml', [
      'timeout_multiplier: 0.25',
      'retry: {max_retries: 1, min_wait_sec: 0.2, max_wait_sec: 1}',
      'agents:',
      gatewayAgentYaml('dying', fixtureAgent, {
        OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}',
        OPENAI_BASE_URL: `${dying.url}/s/dying/v1`,
      }),
      gatewayAgentYaml('stubborn', STUBBORN, {
        OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}',
        OPENAI_BASE_URL: `http://127.0.0.1:${await closedPort()}/v1`,
      }),
    ]);
    const run = await runCli(['dies.yaml', '--skip-preflight'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
    assert.equal(run.code, 0, run.stderr + run.stdout);
    const job = await readJson<JobResult>(path.join(dir, 'jobs', name, 'result.json'));
    for (const agent of ['dying', 'stubborn']) {
      const folder = path.join(dir, 'jobs', name, `hello-world__${agent}__1`);
      const result = await readJson<TrialResult>(path.join(folder, 'result.json'));
      assert.equal(result.error?.type, 'ApiUnreachableError', `${agent}: ${JSON.stringify(result.error)}`);
      assert.equal(result.retries, 1);
      assert.equal(result.rewards, null);
      const evaluation = Object.values(job.evals).find((e) => e.agent === agent);
      assert.equal(evaluation?.n_scored_trials, 0, `${agent} is not scored`);
    }
    const died = await callRecords(
      path.join(dir, 'jobs', name, 'hello-world__dying__1', 'earlier-runs', '1', 'llm-calls.jsonl')
    );
    assert.deepEqual(
      died.map((call) => [call.status, call.error?.type ?? null]),
      [
        [200, null],
        [0, 'ApiUnreachableError'],
      ]
    );
    assert.equal(job.errors_by_type.ApiUnreachableError, 2);
  });
});
