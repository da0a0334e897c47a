/**
 * Built-in agents for real: each installed from its registry (npm, PyPI) into a container built FROM
 * debian:bookworm-slim, run headless on the hello-world task against the scripted model server (the stand-in for
 * vendor APIs), graded by the task's verifier. Two attempts per agent: the second starts from the install snapshot.
 * All slow real-agent tests live here, sharing one job (one image build, one install per agent). mini-swe-agent and
 * aider (PyPI) install here too but are not in it yet: see docs/agents.md.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { stringify } from 'yaml';

import { builtinAgent } from '../src/agents/registry';
import type { TrialResult } from '../src/results/trial-result';
import type { CliRun } from './support/cli';
import { runCli, workspace } from './support/cli';
import { dockerHostAddress, imagesOfJob, removeJobLeftovers } from './support/docker';
import type { ScriptedModelServer, ScriptedTurn } from './support/scripted-model-server';
import { startScriptedModelServer } from './support/scripted-model-server';
import { testTemporal } from './support/temporal';

const jobName = `agents-${process.pid}`;
const HELLO = "printf 'Hello, world!' > /app/hello.txt";
const terminusReply = (commands: string[], complete: boolean): ScriptedTurn => ({
  text: JSON.stringify({
    analysis: '',
    plan: '',
    commands: commands.map((keystrokes) => ({ keystrokes })),
    task_complete: complete,
  }),
});

/** Per agent: its scripted turns and the env pointing it at its session (`url` is the server as the agent sees it). */
const AGENTS: Record<string, { turns: ScriptedTurn[]; env: (url: string) => Record<string, string>; local?: true }> = {
  terminus: {
    turns: [terminusReply([HELLO], false), terminusReply([], true), terminusReply([], true)],
    env: (url) => ({ OPENAI_BASE_URL: `${url}/v1`, OPENAI_API_KEY: 'sk-scripted-terminus' }),
    local: true,
  },
  'claude-code': {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ ANTHROPIC_BASE_URL: url, ANTHROPIC_API_KEY: 'sk-scripted-claude' }),
  },
  codex: {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ OPENAI_BASE_URL: `${url}/v1`, OPENAI_API_KEY: 'sk-scripted-codex' }),
  },
  'gemini-cli': {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ GOOGLE_GEMINI_BASE_URL: url, GEMINI_API_KEY: 'sk-scripted-gemini' }),
  },
  'qwen-code': {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ OPENAI_BASE_URL: `${url}/v1`, OPENAI_API_KEY: 'sk-scripted-qwen' }),
  },
  opencode: {
    turns: [{ shell: HELLO }, { say: 'done' }],
    env: (url) => ({ OPENAI_BASE_URL: `${url}/v1`, OPENAI_API_KEY: 'sk-scripted-opencode' }),
  },
};

let dir: string;
let server: ScriptedModelServer;
let run: CliRun;
const trialDir = (agent: string, attempt: number) =>
  path.join(dir, 'jobs', jobName, `hello-world__${agent}__${attempt}`);
const trial = async (agent: string, attempt: number) =>
  JSON.parse(await readFile(path.join(trialDir(agent, attempt), 'result.json'), 'utf8')) as TrialResult;

describe('built-in agents end to end against the scripted model server (stand-in for vendor APIs)', () => {
  before(async () => {
    const { connection } = await testTemporal();
    await connection.close();
    server = await startScriptedModelServer({ host: '0.0.0.0', port: 0 });
    const gateway = await dockerHostAddress();
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    const agents = Object.entries(AGENTS).map(([name, agent]) => {
      server.session(name, { turns: agent.turns });
      const host = agent.local ? '127.0.0.1' : gateway;
      return { name, model: 'scripted-model', env: agent.env(`http://${host}:${server.port}/s/${name}`) };
    });
    const job = {
      name: jobName,
      n_attempts: 2,
      n_concurrent_trials: 4,
      // Agents start slowly on a busy 2-core host (node and Python imports): the tasks' 60 s would be tight.
      timeout_multiplier: 4,
      environment: { type: 'docker', delete: true },
      agents,
      datasets: [{ path: 'tasks' }],
    };
    await writeFile(path.join(dir, 'job.yaml'), stringify(job));
    run = await runCli(['job.yaml'], { cwd: dir });
  });
  after(async () => {
    await server.close();
    await removeJobLeftovers(jobName);
  });

  it('the job completes', () => {
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
  });

  for (const name of Object.keys(AGENTS)) {
    it(`${name}: reward 1 on both attempts, with the installed version and model recorded`, async () => {
      for (const attempt of [1, 2]) {
        const result = await trial(name, attempt);
        assert.deepEqual(result.rewards, { reward: 1 }, `${name} attempt ${attempt}: ${JSON.stringify(result.error)}`);
        assert.equal(result.agent?.name, name);
        assert.equal(result.agent?.version, builtinAgent(name)?.version);
        assert.equal(result.agent?.model, 'scripted-model');
      }
      const calls = server.calls(name).filter((call) => !call.side && call.turnIndex !== null && call.status === 200);
      assert.ok(calls.length >= 2, `${name}: ${calls.length} scripted turns served`);
    });
  }

  for (const name of Object.keys(AGENTS).filter((name) => builtinAgent(name)?.kind === 'installed')) {
    it(`${name}: installed at most once on this host; later attempts start from the install snapshot`, async () => {
      const results = await Promise.all([1, 2].map((attempt) => trial(name, attempt)));
      for (const result of results) assert.equal(result.agent?.version, builtinAgent(name)?.version);
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

  it('removes the job image and its install snapshots when the job is done (environment.delete)', async () => {
    const left = (await imagesOfJob(jobName)).map((image) => ({ tags: image.RepoTags, labels: image.Labels }));
    assert.deepEqual(left, []);
  });
});
