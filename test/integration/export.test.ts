/**
 * `rollout export` over job folders whose model calls were really recorded: the model gateway in front of the
 * scripted model server (the stand-in for vendor APIs), driven in each of the four dialects by a two-turn agent loop
 * (a shell call, its output fed back, then a final answer), and results written by the same activity as real
 * trials. Checks the four formats, the filters, Harbor's validator on the ATIF lines, one-line input errors (exit 2,
 * an existing output file kept), and a job of many trials exported under a heap far smaller than its output.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { writeTrialResult } from '../../activities/results';
import { ModelGateway } from '../../src/gateway/gateway';
import type { GatewayAccess } from '../../src/contracts/agent';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import type { TrialResult } from '../../src/results/trial-result';
import { writeSignedJobFile } from '../../src/storage/job-folder';
import type { TrialSpec } from '../../src/contracts/trial';
import { CLI, runCli, workspace } from '../support/cli';
import { validateWithHarbor } from '../support/harbor';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';
import { REPO_ROOT } from '../support/temporal';

// The assertions read exported JSON by path.
/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-return */
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const KEY = `sk-export-${randomBytes(8).toString('hex')}`;
const BASH = { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] };
const COMMAND = 'echo hi > hi.txt';
const OUTPUT = 'tool output 42';

async function post(url: string, body: unknown, headers: Record<string, string>): Promise<Json> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as Json;
}

/** A two-turn agent loop per dialect: ask with a bash tool, run the call (its output is OUTPUT), ask again. */
const LOOPS: Record<string, (access: GatewayAccess) => Promise<void>> = {
  async 'openai-chat'(access) {
    const url = `${access.baseUrls.openai}/chat/completions`;
    const auth = { authorization: `Bearer ${access.token}` };
    const body = {
      model: 'gpt-5',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'make hi.txt' },
      ] as Json[],
      tools: [{ type: 'function', function: { name: 'bash', parameters: BASH } }],
    };
    const first = (await post(url, body, auth)).choices[0].message;
    body.messages.push(first, { role: 'tool', tool_call_id: first.tool_calls[0].id, content: OUTPUT });
    await post(url, body, auth);
  },
  async anthropic(access) {
    const url = `${access.baseUrls.anthropic}/v1/messages`;
    const auth = { 'x-api-key': access.token };
    const body = {
      model: 'claude-sonnet-4-5',
      max_tokens: 100,
      system: 'You are terse.',
      messages: [{ role: 'user', content: 'make hi.txt' }] as Json[],
      tools: [{ name: 'bash', input_schema: BASH }],
    };
    const first = await post(url, body, auth);
    const use = first.content.find((b: Json) => b.type === 'tool_use');
    body.messages.push(
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: OUTPUT }] }
    );
    await post(url, body, auth);
  },
  async 'openai-responses'(access) {
    const url = `${access.baseUrls.openai}/responses`;
    const auth = { authorization: `Bearer ${access.token}` };
    const body = {
      model: 'gpt-5',
      instructions: 'You are terse.',
      input: [{ type: 'message', role: 'user', content: 'make hi.txt' }] as Json[],
      tools: [{ type: 'function', name: 'bash', parameters: BASH }],
    };
    const first = await post(url, body, auth);
    const call = first.output.find((i: Json) => i.type === 'function_call');
    body.input.push(...first.output, { type: 'function_call_output', call_id: call.call_id, output: OUTPUT });
    await post(url, body, auth);
  },
  async gemini(access) {
    const url = `${access.baseUrls.gemini}/v1beta/models/gemini-2.5-pro:generateContent`;
    const auth = { 'x-goog-api-key': access.token };
    const body = {
      systemInstruction: { parts: [{ text: 'You are terse.' }] },
      contents: [{ role: 'user', parts: [{ text: 'make hi.txt' }] }] as Json[],
      tools: [{ functionDeclarations: [{ name: 'bash', parameters: BASH }] }],
    };
    const first = (await post(url, body, auth)).candidates[0].content;
    body.contents.push(first, {
      role: 'user',
      parts: [{ functionResponse: { name: 'bash', response: { output: OUTPUT } } }],
    });
    await post(url, body, auth);
  },
};
const DIALECTS = Object.keys(LOOPS);

function trialResult(jobName: string, trialName: string, agent: string, reward: number): TrialResult {
  const now = new Date().toISOString();
  return {
    trial_name: trialName,
    task_name: 'hello-world',
    dataset_name: 'tasks',
    agent_name: agent,
    agent: null,
    attempt: 1,
    rewards: { reward },
    error: null,
    agent_exit_code: 0,
    started_at: now,
    finished_at: now,
    steps: {},
    workflow_id: `${jobName}/${trialName}`,
    job_name: jobName,
    task_dir: '/tasks/hello-world',
    environment_type: 'docker',
    host: null,
    image: null,
    unenforced_limits: [],
    restarts: 0,
    collected: null,
  };
}

function jsonl(text: string): Json[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Json);
}

describe('rollout export', () => {
  let dir: string;
  let jobDir: string;
  let gateway: ModelGateway;
  let scripted: ScriptedModelServer;
  const jobName = 'export-job';
  const exportJob = (...args: string[]) => runCli(['export', jobDir, ...args], { cwd: dir, timeoutMs: 120_000 });

  before(async () => {
    dir = await workspace();
    jobDir = path.join(dir, 'jobs', jobName);
    await mkdir(jobDir, { recursive: true });
    // Signed as the CLI signs it: workers (here, the result write) verify config.json before they use it.
    await writeSignedJobFile(
      jobDir,
      'config.json',
      JSON.stringify({ name: jobName, agents: DIALECTS.map((name) => ({ name })) })
    );
    gateway = new ModelGateway();
    scripted = await startScriptedModelServer();
    // Rewards 0, 0.5, 1, 1: --min-reward 0.5 keeps three trials.
    for (const [i, dialect] of DIALECTS.entries()) {
      const upstream = scripted.session(dialect, { turns: [{ shell: COMMAND }, { say: 'done' }] });
      const trialName = `hello-world__${dialect}__1`;
      const session = await gateway.openTrial({
        trialId: `${jobName}/${trialName}`,
        agentDir: path.join(jobDir, trialName, 'agent'),
        upstreams: upstreamsFromEnv({
          OPENAI_API_KEY: KEY,
          ANTHROPIC_API_KEY: KEY,
          GEMINI_API_KEY: KEY,
          OPENAI_BASE_URL: upstream.openAiBaseUrl,
          ANTHROPIC_BASE_URL: upstream.baseUrl,
          GOOGLE_GEMINI_BASE_URL: upstream.baseUrl,
        }),
      });
      await LOOPS[dialect]!(await session.access());
      await session.close();
      // A real task: the result write scrubs the trial folder of the task's and the agent's secrets.
      const taskDir = path.join(REPO_ROOT, 'examples', 'tasks', 'hello-world');
      const spec = { jobDir, trialName, trialId: `${jobName}/${trialName}`, agentName: dialect, taskDir } as TrialSpec;
      await writeTrialResult({ spec, result: trialResult(jobName, trialName, dialect, Math.min(1, i / 2)) });
    }
  });
  after(async () => {
    await gateway.close();
    await scripted.close();
  });

  it('sft: one row per trial, OpenAI messages with the tool call and its output, whatever the dialect', async () => {
    const run = await exportJob('--format', 'sft');
    assert.equal(run.code, 0, run.stderr);
    const rows = jsonl(run.stdout);
    assert.equal(rows.length, DIALECTS.length);
    assert.match(run.stderr, /exported 4 rows from 4 trials/);
    for (const row of rows) {
      const dialect = row.metadata.agent_name as string;
      const roles = (row.messages as Json[]).map((m) => m.role);
      assert.deepEqual(roles, ['system', 'user', 'assistant', 'tool', 'assistant'], dialect);
      const call = row.messages[2].tool_calls[0];
      assert.equal(call.type, 'function');
      assert.equal(call.function.name, 'bash');
      assert.deepEqual(JSON.parse(call.function.arguments), { command: COMMAND }, dialect);
      assert.equal(row.messages[3].tool_call_id, call.id, dialect);
      assert.match(row.messages[3].content, /tool output 42/, dialect);
      assert.equal(row.messages[4].content, 'done', dialect);
      assert.equal(row.tools[0].function.name, 'bash');
      assert.equal(row.metadata.usage.n_llm_calls, 2);
      assert.equal(row.metadata.source, 'agent/llm-calls.jsonl');
      assert.equal(typeof row.reward, 'number');
    }
  });

  it('rl: every call with its prompt, completion and the recorded usage', async () => {
    const rows = jsonl((await exportJob('--format', 'rl')).stdout);
    assert.equal(rows.length, DIALECTS.length);
    for (const row of rows) {
      assert.equal(row.kind, 'trial');
      assert.equal(row.calls.length, 2, row.agent_name);
      assert.deepEqual(row.calls[0].usage, scriptedUsage(0));
      assert.deepEqual(row.calls[1].usage, scriptedUsage(1));
      assert.equal(row.calls[0].completion.tool_calls[0].function.name, 'bash');
      assert.equal(row.calls[1].completion.content, 'done');
      assert.equal(row.calls[1].messages.at(-1).role, 'tool');
      assert.deepEqual(row.steps, []);
    }
  });

  it('atif: each line a trajectory Harbor validates, the reward under extra.rollout', async () => {
    const rows = jsonl((await exportJob('--format', 'atif')).stdout);
    assert.equal(rows.length, DIALECTS.length);
    for (const row of rows) {
      assert.equal(row.extra.rollout.job_name, jobName);
      const file = path.join(dir, `${row.extra.rollout.agent_name}.json`);
      await writeFile(file, JSON.stringify(row));
      const checked = await validateWithHarbor(file);
      assert.equal(checked.code, 0, checked.output);
    }
  });

  it("sharegpt: Harbor's rows, one per agent step or with --episodes last one per trial", async () => {
    const all = jsonl((await exportJob('--format', 'sharegpt')).stdout);
    assert.equal(all.length, DIALECTS.length * 2);
    const last = jsonl((await exportJob('--format', 'sharegpt', '--episodes', 'last')).stdout);
    assert.equal(last.length, DIALECTS.length);
    for (const row of last) {
      assert.equal(row.episode, 'episode-1');
      const from = (row.conversations_sharegpt as Json[]).map((t) => t.from);
      assert.deepEqual(from, ['human', 'human', 'gpt', 'human', 'gpt']);
      assert.match(row.conversations[0].content, /^<tools>\n/);
      assert.match(
        row.conversations[2].content,
        /<tool_call>\n\{"name":"bash","arguments":\{"command":"echo hi > hi.txt"\}\}/
      );
      assert.ok(['0.0', '0.5', '1.0'].includes(row.result as string), row.result);
    }
  });

  it('--min-reward and --agent filter trials; -o writes the file', async () => {
    const output = path.join(dir, 'out.jsonl');
    const run = await exportJob('--format', 'sft', '--min-reward', '0.5', '-o', output);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, '');
    const rows = jsonl(await readFile(output, 'utf8'));
    assert.deepEqual(rows.map((r) => r.reward as number).sort(), [0.5, 1, 1]);
    const one = jsonl((await exportJob('--format', 'rl', '--agent', 'gemini')).stdout);
    assert.deepEqual(
      one.map((r) => r.agent_name),
      ['gemini']
    );
  });

  it('bad input: one line naming the field, exit 2, an existing output file untouched', async () => {
    const output = path.join(dir, 'kept.jsonl');
    await writeFile(output, 'earlier export\n');
    const cases: [string[], RegExp][] = [
      [
        ['--format', 'csv'],
        /^error: rollout export: --format: unknown format "csv": one of sft, sharegpt, atif, rl\n$/,
      ],
      [['--format', 'sft', '--min-reward', 'high'], /^error: rollout export: --min-reward: "high" is not a number\n$/],
      [
        ['--format', 'sft', '--agent', 'nobody'],
        /^error: rollout export: --agent: no agent "nobody" in .*config\.json: one of openai-chat, /,
      ],
      [
        ['--format', 'sharegpt', '--episodes', 'some'],
        /^error: rollout export: --episodes: "some": one of all, last\n$/,
      ],
    ];
    for (const [args, expected] of cases) {
      const run = await exportJob(...args, '-o', output);
      assert.equal(run.code, 2, run.stderr);
      assert.match(run.stderr, expected);
    }
    const missing = await runCli(['export', path.join(dir, 'nope'), '--format', 'sft'], { cwd: dir });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^error: .*nope: no such job folder\n$/);

    // A corrupt calls file in one trial: the line is named, nothing is written over the earlier export.
    const calls = path.join(jobDir, 'hello-world__gemini__1', 'agent', 'llm-calls.jsonl');
    const good = await readFile(calls, 'utf8');
    await writeFile(calls, `${good}{"seq": 3, "kind": "gener`);
    try {
      const run = await exportJob('--format', 'rl', '-o', output);
      assert.equal(run.code, 2, run.stderr);
      assert.match(run.stderr, /^error: .*llm-calls\.jsonl: line 3: not valid JSON/);
      assert.equal(run.stderr.trim().split('\n').length, 1);
      assert.equal(await readFile(output, 'utf8'), 'earlier export\n');
    } finally {
      await writeFile(calls, good);
    }
  });

  it('a job of 5,000 trials exports under a 64 MB heap (28 MB of it the CLI code), half its output', async () => {
    const big = path.join(dir, 'jobs', 'big');
    await mkdir(big, { recursive: true });
    await writeSignedJobFile(big, 'config.json', JSON.stringify({ name: 'big', agents: [{ name: 'openai-chat' }] }));
    const source = path.join(jobDir, 'hello-world__openai-chat__1');
    // Each trial's calls padded to ~30 KB, so the output is far larger than the heap; trials share their calls
    // (hard links), which makes the folder quick to build and changes nothing for the reader. Each result.json names
    // its own folder (a reader refuses a result that names another trial).
    const calls = path.join(dir, 'padded-calls.jsonl');
    const padded = (await readFile(path.join(source, 'agent', 'llm-calls.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => {
        const record = JSON.parse(line) as Json;
        record.request.messages[0].content = 'x'.repeat(14_000);
        return JSON.stringify(record);
      });
    await writeFile(calls, `${padded.join('\n')}\n`);
    const sourceResult = JSON.parse(await readFile(path.join(source, 'result.json'), 'utf8')) as Json;
    const N = 5_000;
    for (let i = 0; i < N; i += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, N - i) }, async (_, k) => {
          const trial = path.join(big, `t-${i + k}__openai-chat__1`);
          await mkdir(path.join(trial, 'agent'), { recursive: true });
          await writeFile(
            path.join(trial, 'result.json'),
            JSON.stringify({ ...sourceResult, trial_name: path.basename(trial) })
          );
          await link(calls, path.join(trial, 'agent', 'llm-calls.jsonl'));
        })
      );
    }
    const output = path.join(dir, 'big.jsonl');
    const args = ['--max-old-space-size=64', CLI, 'export', big, '--format', 'rl', '-o', output];
    const run = await new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(
        '/usr/bin/time',
        ['-f', 'maxrss_kb=%M', process.execPath, ...args],
        { cwd: dir, timeout: 600_000 },
        (err, _out, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stderr })
      );
    });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /exported 5000 rows from 5000 trials/);
    const size = (await stat(output)).size;
    const rssKb = Number(/maxrss_kb=(\d+)/.exec(run.stderr)![1]);
    console.log(
      `export rl of ${N} trials: ${(size / 1e6).toFixed(0)} MB written, max RSS ${(rssKb / 1024).toFixed(0)} MB`
    );
    assert.ok(size > 2 * 64 * 1024 * 1024, `output only ${size} bytes`);
  });
});
