/**
 * Built-in agents for real: each installed from its registry (npm, PyPI) into a container built FROM
 * debian:bookworm-slim, run headless on the hello-world task through the worker's model gateway (their default)
 * against the scripted model server (the stand-in for vendor APIs), graded by the task's verifier. The scripted
 * server listens on 127.0.0.1 only, which containers cannot reach: every call must pass through the gateway. The
 * verifier greps every process's environment and the whole filesystem for the real key. Two attempts per agent:
 * the second starts from the install snapshot. All slow real-agent tests live here, sharing one job (one image
 * build, one install per agent).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';
import { stringify } from 'yaml';

import { builtinAgent } from '../../src/agents/registry';
import { jobWorkflowId } from '../../src/job/plan';
import type { LlmCallRecord } from '../../src/gateway/records';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { imageById, imagesOfJob, removeJobLeftovers } from '../support/docker';
import { validateWithHarbor } from '../support/harbor';
import type { ScriptedModelServer, ScriptedSession, ScriptedTurn } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { testTemporal } from '../support/temporal';
import { writeKeyProbe } from '../support/gateway-agent';

const jobName = `agents-${process.pid}`;
const JOB_TIMEOUT_MS = 40 * 60_000;
const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const HELLO = "printf 'Hello, world!' > /app/hello.txt";
const terminusReply = (commands: string[], complete: boolean): ScriptedTurn => ({
  text: JSON.stringify({
    analysis: '',
    plan: '',
    commands: commands.map((keystrokes) => ({ keystrokes })),
    task_complete: complete,
  }),
});
const TERMINUS_TURNS = [terminusReply([HELLO], false), terminusReply([], true), terminusReply([], true)];
/** aider's prompt holds example exchanges (so its first call's turn index is not 0); it makes one edit call. */
const AIDER_WHOLE_FILE: ScriptedTurn = { text: 'hello.txt\n```\nHello, world!\n```\n' };

const openai = (url: string) => ({ OPENAI_BASE_URL: `${url}/v1`, OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}' });

/** Per job agent: its catalogue agent, scripted turns, env (`url` is its session on the scripted server), extras. */
const ALL_AGENTS: Record<
  string,
  {
    agent?: string;
    turns: ScriptedTurn[];
    env: (url: string) => Record<string, string>;
    kwargs?: Record<string, unknown>;
    fault?: { kind: 'rate-limit'; times: number; retryAfterSec: number };
    /** Scripted turns one attempt takes (default 2). */
    turnsPerAttempt?: number;
  }
> = {
  terminus: { turns: TERMINUS_TURNS, env: openai },
  // A rate limit on the first call: absorbed at the gateway, which retries after retry-after (terminus never sees it).
  'terminus-rate-limited': {
    agent: 'terminus',
    turns: TERMINUS_TURNS,
    env: openai,
    fault: { kind: 'rate-limit', times: 1, retryAfterSec: 0 },
  },
  'claude-code': {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ ANTHROPIC_BASE_URL: url, ANTHROPIC_API_KEY: '${ROLLOUT_TEST_KEY}' }),
  },
  codex: { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  'gemini-cli': {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ GOOGLE_GEMINI_BASE_URL: url, GEMINI_API_KEY: '${ROLLOUT_TEST_KEY}' }),
  },
  'qwen-code': { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  opencode: { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  'mini-swe-agent': {
    turns: [{ shell: HELLO }, { shell: 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT' }],
    env: openai,
  },
  'copilot-cli': { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  pi: { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  kimi: { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  aider: {
    turns: Array<ScriptedTurn>(8).fill(AIDER_WHOLE_FILE),
    env: openai,
    kwargs: { edit_format: 'whole' },
    turnsPerAttempt: 1,
  },
  // cline's yolo mode ends only on its submit_and_exit tool.
  cline: {
    turns: [
      { shell: HELLO },
      { call: { name: 'submit_and_exit', arguments: { summary: 'wrote /app/hello.txt', verified: true } } },
    ],
    env: openai,
  },
  'grok-cli': { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  kilo: { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  'continue-cli': { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  'mistral-vibe': { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  hermes: { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  'factory-droid': { turns: [{ shell: HELLO }, { say: 'done' }], env: openai },
  // gptme's non-interactive mode ends on its complete tool.
  gptme: { turns: [{ shell: HELLO }, { call: { name: 'complete', arguments: {} } }], env: openai },
};
/** ROLLOUT_TEST_AGENTS=cline,pi runs only those (while working on an agent); all by default. */
const only = process.env.ROLLOUT_TEST_AGENTS?.split(',').filter(Boolean);
const AGENTS = only
  ? Object.fromEntries(
      only.map((name) => {
        if (!ALL_AGENTS[name]) throw new Error(`ROLLOUT_TEST_AGENTS: no agent "${name}" in this test`);
        return [name, ALL_AGENTS[name]];
      })
    )
  : ALL_AGENTS;
const INSTALLED = Object.keys(AGENTS).filter((name) => builtinAgent(name)?.kind === 'installed');

let dir: string;
let server: ScriptedModelServer;
const sessions = new Map<string, ScriptedSession>();
let run: CliRun;
let client: Client;
let connection: Connection;
const trialDir = (agent: string, attempt: number) =>
  path.join(dir, 'jobs', jobName, `hello-world__${agent}__${attempt}`);
const trial = async (agent: string, attempt: number) =>
  JSON.parse(await readFile(path.join(trialDir(agent, attempt), 'result.json'), 'utf8')) as TrialResult;
const callRecords = async (file: string) =>
  (await readFile(file, 'utf8'))
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as LlmCallRecord);

describe('built-in agents end to end through the gateway against the scripted model server (stand-in for vendor APIs)', () => {
  before(
    async () => {
      ({ client, connection } = await testTemporal());
      server = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
      dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
      const task = path.join(dir, 'tasks', 'hello-world');
      await writeKeyProbe(task, KEY);
      const agents = Object.entries(AGENTS).map(([name, agent]) => {
        sessions.set(
          name,
          server.session(name, { turns: agent.turns, ...(agent.fault ? { fault: agent.fault } : {}) })
        );
        return {
          name,
          ...(agent.agent ? { agent: agent.agent } : {}),
          model: 'scripted-model',
          ...(agent.kwargs ? { kwargs: agent.kwargs } : {}),
          env: agent.env(`${server.url}/s/${name}`),
        };
      });
      const job = {
        name: jobName,
        n_attempts: 2,
        n_concurrent_trials: 4,
        // Agents start slowly on a busy 2-core host (node and Python imports; opencode, qwen-code and mini-swe-agent
        // took 170-205 s of their 240 s at load 33): the tasks' 60 s would be tight.
        timeout_multiplier: 6,
        retry: { error_types: ['ApiRateLimitError'], max_retries: 2, min_wait_sec: 0.2, max_wait_sec: 1 },
        // Real agents need more than hello-world's 512Mi: opencode's runtime alone was OOM-killed at 521 MB.
        environment: { type: 'docker', delete: true, override_memory: '2Gi' },
        agents,
        datasets: [{ path: 'tasks' }],
      };
      await writeFile(path.join(dir, 'job.yaml'), stringify(job));
      // Cold installs of the Python agents (apt, then pip) take minutes each on a loaded host.
      run = await runCli(['job.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY }, timeoutMs: JOB_TIMEOUT_MS });
    },
    { timeout: JOB_TIMEOUT_MS + 5 * 60_000 }
  );
  after(async () => {
    await connection.close();
    await server.close();
    await removeJobLeftovers(jobName);
  });

  it('the job completes', () => {
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
  });

  for (const name of Object.keys(AGENTS)) {
    const catalogueName = AGENTS[name]!.agent ?? name;
    it(`${name}: reward 1 on both attempts (the key found nowhere in the container), version and model recorded`, async () => {
      for (const attempt of [1, 2]) {
        const result = await trial(name, attempt);
        assert.deepEqual(result.rewards, { reward: 1 }, `${name} attempt ${attempt}: ${JSON.stringify(result.error)}`);
        assert.deepEqual(result.agent, {
          name: catalogueName,
          version: builtinAgent(catalogueName)?.version,
          model: 'scripted-model',
        });
      }
      const calls = server.calls(name).filter((call) => !call.side && call.turnIndex !== null && call.status === 200);
      const expected = 2 * (AGENTS[name]!.turnsPerAttempt ?? 2);
      assert.ok(calls.length >= expected, `${name}: ${calls.length} scripted turns served, expected ${expected}`);
    });

    it(`${name}: every call went through the gateway, which put the real key on it; usage equals what was served`, async () => {
      const served = server.calls(name);
      assert.ok(served.length > 0);
      assert.deepEqual([...new Set(served.map((call) => call.credential))], [KEY]);
      const results = await Promise.all([1, 2].map((attempt) => trial(name, attempt)));
      const recorded = { input: 0, output: 0, cached: 0 };
      for (const result of results) {
        assert.ok(result.usage, `${name}: no usage`);
        recorded.input += result.usage.input_tokens;
        recorded.output += result.usage.output_tokens;
        recorded.cached += result.usage.cached_tokens;
        assert.equal(result.usage.cost_usd, null, 'scripted-model has no price');
        assert.match(result.usage.cost_unknown_reason ?? '', /scripted-model/);
      }
      const scripted = sessions.get(name)!.usage();
      assert.deepEqual(recorded, {
        input: scripted.input_tokens,
        output: scripted.output_tokens,
        cached: scripted.cached_tokens,
      });
    });

    it(`${name}: its ATIF trajectory passes Harbor's validator and names the agent, version and model`, async () => {
      for (const attempt of [1, 2]) {
        const file = path.join(trialDir(name, attempt), 'agent', 'trajectory.json');
        const verdict = await validateWithHarbor(file);
        assert.equal(verdict.code, 0, `${name} attempt ${attempt}: ${verdict.output}`);
        const trajectory = JSON.parse(await readFile(file, 'utf8')) as {
          agent: { name: string; version: string; model_name?: string };
          steps: { source: string }[];
        };
        const { name: agentName, version, model_name } = trajectory.agent;
        assert.deepEqual(
          { agentName, version, model_name },
          { agentName: catalogueName, version: builtinAgent(catalogueName)?.version, model_name: 'scripted-model' }
        );
        assert.ok(trajectory.steps.some((step) => step.source === 'agent'));
      }
    });
  }

  const rateLimited = { skip: !('terminus-rate-limited' in AGENTS) };
  it(
    'a rate limit is absorbed at the gateway: no retry of the trial; the call records both attempts',
    rateLimited,
    async () => {
      const name = 'terminus-rate-limited';
      const results = await Promise.all([1, 2].map((attempt) => trial(name, attempt)));
      assert.deepEqual(
        results.map((r) => [r.retries, r.error]),
        [
          [0, null],
          [0, null],
        ]
      );
      const calls = await Promise.all(
        [1, 2].map((attempt) => callRecords(path.join(trialDir(name, attempt), 'agent', 'llm-calls.jsonl')))
      );
      const retried = calls.flat().filter((call) => (call.attempts ?? []).length > 1);
      assert.equal(retried.length, 1, 'the one 429 the server gave was retried at the gateway');
      assert.deepEqual(
        retried[0]!.attempts!.map((a) => a.status),
        [429, 200]
      );
      assert.ok(calls.flat().every((call) => call.status === 200));
      results.forEach((result, i) => assert.equal(result.usage?.n_llm_calls, calls[i]!.length));
    }
  );

  for (const name of INSTALLED) {
    it(`${name}: installed at most once on this host; later attempts start from the install snapshot`, async () => {
      const logs = await Promise.all([1, 2].map((a) => readFile(path.join(trialDir(name, a), 'trial.log'), 'utf8')));
      const installs = await Promise.all(
        [1, 2].map((a) => readFile(path.join(trialDir(name, a), 'agent', 'install.txt'), 'utf8'))
      );
      // One attempt installs and the other starts from its snapshot; or, when this host kept a snapshot of the same
      // image and agent from an earlier job, both start from it.
      const fromSnapshot = logs.filter((log) => /from install snapshot rollout-agent:/.test(log)).length;
      const fresh = installs.filter((text) => /rollout: installed /.test(text)).length;
      assert.ok(fromSnapshot >= 1, logs.join('\n'));
      assert.equal(fresh + fromSnapshot, 2, installs.join('\n---\n'));
      assert.equal(installs.filter((text) => /already installed/.test(text)).length, fromSnapshot);
    });
  }

  it('sums usage per agent in the job result and the CLI table', async () => {
    const job = JSON.parse(await readFile(path.join(dir, 'jobs', jobName, 'result.json'), 'utf8')) as JobResult;
    for (const name of Object.keys(AGENTS)) {
      const results = await Promise.all([1, 2].map((attempt) => trial(name, attempt)));
      const calls = results.reduce((sum, result) => sum + (result.usage?.n_llm_calls ?? 0), 0);
      const input = results.reduce((sum, result) => sum + (result.usage?.input_tokens ?? 0), 0);
      assert.equal(job.usage_by_agent[name]?.n_llm_calls, calls, name);
      assert.equal(job.usage_by_agent[name]?.input_tokens, input, name);
      // Columns: llm calls, retried, waited, input tokens.
      assert.match(run.stdout, new RegExp(`^${name}\\s+${calls}\\s+\\d+\\s+\\S+\\s+${input}\\s`, 'm'), name);
    }
  });

  it('keeps the key out of every job file, the CLI output and the Temporal histories', async () => {
    const entries = await readdir(path.join(dir, 'jobs', jobName), { withFileTypes: true, recursive: true });
    const files = entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
    for (const file of files) {
      if ((await stat(file)).size > 64 * 2 ** 20) continue;
      const text = await readFile(file, 'latin1');
      assert.ok(!text.includes(KEY), `key found in ${file}`);
      // Collect redacts resolved secrets: a redaction in an agent's logs would mean the key reached the container.
      assert.ok(!text.includes('[REDACTED]'), `something was redacted in ${file}`);
    }
    assert.ok(!run.stdout.includes(KEY) && !run.stderr.includes(KEY));
    const workflows = [
      jobWorkflowId(jobName),
      ...Object.keys(AGENTS).map((name) => `${jobName}/hello-world__${name}__1`),
    ];
    for (const id of workflows) {
      const history = await client.workflow.getHandle(id).fetchHistory();
      const text = JSON.stringify(history, (_key, value: unknown) =>
        value instanceof Uint8Array ? Buffer.from(value).toString('latin1') : value
      );
      assert.ok(!text.includes(KEY), `key in the history of ${id}`);
    }
  });

  it('releases the job image (environment.delete); its install snapshots go with it unless another job holds it', async () => {
    const references = new Set<string>();
    for (const name of Object.keys(AGENTS)) {
      for (const attempt of [1, 2]) references.add((await trial(name, attempt)).image ?? '');
    }
    const left = await imagesOfJob(jobName);
    const tags = new Set(left.flatMap((image) => image.RepoTags ?? []));
    // On a shared host another job may hold the same image (same task environment): then it and its snapshots stay.
    const heldByOthers = (image: { RepoTags?: string[] } | undefined) =>
      (image?.RepoTags ?? []).some((tag) => /-[0-9a-f]{12}$/.test(tag) && !references.has(tag));
    for (const reference of references) assert.ok(!tags.has(reference), `${reference} still tagged`);
    for (const image of left) {
      const base = image.Labels?.['rollout.snapshot-of'];
      const owner = base ? left.find((other) => other.Id === base) : image;
      // A snapshot over an image another job built (the shared host had it): that job's release takes it, not ours.
      if (!owner && base && (await imageById(base))) continue;
      assert.ok(heldByOthers(owner), `${image.RepoTags?.join(', ')} left although no other job holds its image`);
    }
  });
});
