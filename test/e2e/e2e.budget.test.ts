/**
 * Budgets and limits in real jobs (CLI, Temporal, Docker) against the scripted model server (the stand-in for vendor
 * APIs), with a custom agent on the gateway written in bash: a job budget smaller than the job needs stops starting
 * trials and ends `budget_exhausted`, its overspend within one call per running trial; the same job.yaml with a raised
 * budget carries on from the spend recorded and completes; `kill -9` of the process running the worker mid-job and a
 * resume keep every reported call's spend; an agent's per-trial `limits` end a trial in AgentBudgetExceededError,
 * verified and scored; `--dry-run` prints the plan and an estimate and starts nothing. The hard budget: under CPU
 * load (busy loops in child processes), at n_concurrent_trials 1 and 8, the spend stays within the budget plus one
 * call per running trial, every call sent upstream counted.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { LlmCallRecord } from '../../src/gateway/records';
import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import { budgetLedgerId } from '../../src/budget/workflow/ledger';
import { runCli, startCli, workspace } from '../support/cli';
import { cpuLoad } from '../support/cpu-load';
import { removeJobLeftovers } from '../support/docker';
import { gatewayAgentYaml, prepareGatewayTask } from '../support/gateway-agent';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';
import { testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

const suffix = randomBytes(3).toString('hex');
const KEY = `sk-real-${randomBytes(8).toString('hex')}`;
const TURNS = [{ shell: "printf 'Hello, world!' > /app/hello.txt" }, { say: 'done' }];
/** The tokens of one trial's two calls (input + output, as budgets count them). */
const CALL_TOKENS = [0, 1].map((turn) => scriptedUsage(turn).input_tokens + scriptedUsage(turn).output_tokens);
const TRIAL_TOKENS = CALL_TOKENS[0]! + CALL_TOKENS[1]!;
const MAX_CALL_TOKENS = Math.max(...CALL_TOKENS);

async function readJson<T>(file: string): Promise<T> {
  return JSON.parse(await readFile(file, 'utf8')) as T;
}

async function callRecords(file: string): Promise<LlmCallRecord[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line) as LlmCallRecord);
}

/**
 * Tokens of every call the gateway sent upstream for the job's trials (earlier runs of a trial included), as budgets
 * count them (a call's `charged` estimate when its usage did not come back).
 */
async function recordedTokens(jobDir: string): Promise<number> {
  let tokens = 0;
  for (const trial of (await readdir(jobDir)).filter((name) => name.includes('__'))) {
    const files = [path.join(jobDir, trial, 'agent', 'llm-calls.jsonl')];
    const earlier = await readdir(path.join(jobDir, trial, 'earlier-runs')).catch(() => [] as string[]);
    files.push(...earlier.map((run) => path.join(jobDir, trial, 'earlier-runs', run, 'llm-calls.jsonl')));
    for (const file of files) {
      for (const call of await callRecords(file)) {
        const counted = call.refused ? null : (call.charged ?? call.usage);
        if (counted) tokens += counted.input_tokens + counted.output_tokens;
      }
    }
  }
  return tokens;
}

describe('budgets and limits in real jobs (scripted model server)', () => {
  let dir: string;
  let scripted: ScriptedModelServer;
  let connection: Connection;
  let client: Client;
  let fixtureAgent: string;
  const jobs: string[] = [];

  before(async () => {
    ({ connection, client } = await testTemporal());
    scripted = await startScriptedModelServer();
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    fixtureAgent = await prepareGatewayTask(path.join(dir, 'tasks', 'hello-world'), KEY);
  });
  after(async () => {
    await connection.close();
    await scripted.close();
    for (const job of jobs) await removeJobLeftovers(job);
  });

  /** A job of `attempts` trials of one gateway agent (its script run after `delaySec`) on its own scripted session. */
  async function writeJob(file: string, lines: string[], agent: { attempts: number; delaySec?: number }) {
    const name = `${file.replace(/\.yaml$/, '')}-${suffix}`;
    if (!jobs.includes(name)) jobs.push(name);
    scripted.session(name, { turns: TURNS });
    const script = `${agent.delaySec ? `sleep ${agent.delaySec}\n` : ''}${fixtureAgent}`;
    const yaml = [
      `name: ${name}`,
      `n_attempts: ${agent.attempts}`,
      ...lines,
      'agents:',
      gatewayAgentYaml('scripted', script, {
        OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}',
        OPENAI_BASE_URL: `${scripted.url}/s/${name}/v1`,
      }),
      'datasets:',
      '  - path: tasks',
      '',
    ];
    await writeFile(path.join(dir, file), yaml.join('\n'));
    return { name, jobDir: path.join(dir, 'jobs', name) };
  }

  it('a budget smaller than the job needs: no new trial starts, overspend within one call per running trial, budget_exhausted; raised, the job carries on and completes', async () => {
    const concurrency = 2;
    const budget = Math.round(2.5 * TRIAL_TOKENS);
    const lines = [`n_concurrent_trials: ${concurrency}`];
    const { name, jobDir } = await writeJob('stop.yaml', [...lines, `budget: { tokens: ${budget} }`], {
      attempts: 8,
    });
    const run = await runCli(['stop.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
    assert.equal(run.code, 1, run.stderr + run.stdout);
    const stopped = await readJson<JobResult>(path.join(jobDir, 'result.json'));
    assert.equal(stopped.status, 'budget_exhausted');
    const spent = stopped.budget!.spent;
    assert.ok(spent.tokens >= budget, `spent ${spent.tokens} of ${budget}`);
    assert.ok(
      spent.tokens - budget <= concurrency * MAX_CALL_TOKENS,
      `overspend ${spent.tokens - budget} exceeds one call per running trial`
    );
    assert.equal(spent.tokens, await recordedTokens(jobDir), "the ledger's spend is what the gateway recorded");
    assert.ok(stopped.n_finished_trials < 8, `${stopped.n_finished_trials} trials finished`);
    const started = (await readdir(jobDir)).filter((entry) => entry.startsWith('hello-world__'));
    assert.ok(started.length <= 5, `${started.length} trials started`);
    assert.equal(stopped.budget!.limits.tokens, budget);
    assert.match(stopped.budget!.exhausted ?? '', /^tokens \d+ of \d+$/);

    const status = await runCli(['status', jobDir], { cwd: dir });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /budget_exhausted/);
    assert.match(status.stdout, new RegExp(`budget: spent \\$[\\d.]+ · ${spent.tokens} of ${budget} tokens`));
    assert.match(status.stdout, /scripted: \$[\d.]+ · \d+ tokens/);

    // The same job.yaml with a raised budget: carries on from what was spent, runs what is left, completes.
    await writeJob('stop.yaml', [...lines, `budget: { tokens: ${20 * TRIAL_TOKENS} }`], { attempts: 8 });
    const resumed = await runCli(['stop.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
    assert.equal(resumed.code, 0, resumed.stderr + resumed.stdout);
    const done = await readJson<JobResult>(path.join(jobDir, 'result.json'));
    assert.equal(done.status, 'completed');
    assert.equal(done.n_completed_trials, 8, JSON.stringify(done.errors_by_type));
    assert.ok(done.budget!.spent.tokens >= spent.tokens, 'the earlier spend is carried');
    assert.equal(done.budget!.spent.tokens, await recordedTokens(jobDir));
    assert.equal(done.budget!.spent_by_agent.scripted?.tokens, done.budget!.spent.tokens);
    const ledger = await client.workflow.getHandle(budgetLedgerId(name)).describe();
    assert.equal(ledger.status.name, 'COMPLETED', 'the ledger ends with its job');

    // By name, with no worker left (the CLI's has exited): the closed ledger is read, never queried, and the gate holds.
    const byName = await runCli(['status', name, '--fail-under', 'reward=0.5', '--max-errors', '0'], { cwd: dir });
    assert.equal(byName.code, 0, byName.stderr + byName.stdout);
    assert.doesNotMatch(byName.stderr, /error/);
    assert.match(byName.stdout, new RegExp(`budget: spent \\$[\\d.]+ · ${done.budget!.spent.tokens} of \\d+ tokens`));
    const missed = await runCli(['status', name, '--fail-under', 'reward=1.5'], { cwd: dir });
    assert.equal(missed.code, 4, missed.stderr + missed.stdout);
  });

  // The hard budget (issue 33): on a loaded machine, whatever the concurrency, the job's spend stays within the
  // budget plus one call per running trial, and a trial starts only once the spend of those before it is counted.
  for (const concurrency of [1, 8]) {
    it(`a hard budget under CPU load, n_concurrent_trials ${concurrency}: spend within the budget plus one call per running trial, nothing uncounted`, async () => {
      const budget = Math.round(2.5 * TRIAL_TOKENS);
      const { jobDir } = await writeJob(
        `hard-${concurrency}.yaml`,
        [`n_concurrent_trials: ${concurrency}`, `budget: { tokens: ${budget} }`],
        { attempts: 2 * concurrency + 4 }
      );
      const stopLoad = cpuLoad(3);
      let run: Awaited<ReturnType<typeof runCli>>;
      try {
        run = await runCli([`hard-${concurrency}.yaml`], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
      } finally {
        await stopLoad();
      }
      assert.equal(run.code, 1, run.stderr + run.stdout);
      const result = await readJson<JobResult>(path.join(jobDir, 'result.json'));
      assert.equal(result.status, 'budget_exhausted');
      const spent = result.budget!.spent.tokens;
      assert.ok(spent >= budget, `spent ${spent} of ${budget}`);
      assert.ok(
        spent - budget <= concurrency * MAX_CALL_TOKENS,
        `overspend ${spent - budget} exceeds one call per running trial (${concurrency} × ${MAX_CALL_TOKENS})`
      );
      assert.equal(spent, await recordedTokens(jobDir), 'every call the gateway sent upstream is counted');
      const started = (await readdir(jobDir)).filter((entry) => entry.startsWith('hello-world__'));
      // One at a time, the third trial's calls pass the budget: a fourth starts only if the third's spend was not
      // counted when it ended.
      if (concurrency === 1) assert.equal(started.length, 3, `${started.length} trials started`);
    });
  }

  it('kill -9 of the process running the worker mid-job, then resume --budget (raised): the spent amount is intact', async () => {
    const { name, jobDir } = await writeJob(
      'killed.yaml',
      ['n_concurrent_trials: 2', `budget: { tokens: ${100 * TRIAL_TOKENS} }`],
      { attempts: 6, delaySec: 3 }
    );
    const cli = startCli(['killed.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
    // Once two trials have finished (their spend reported as their sessions closed), kill it mid-job.
    let finishedBefore = 0;
    await waitFor(
      'two finished trials',
      async () => {
        const entries = await readdir(jobDir).catch(() => [] as string[]);
        const trials = entries.filter((entry) => entry.startsWith('hello-world__'));
        finishedBefore = trials.filter((trial) => existsSync(path.join(jobDir, trial, 'result.json'))).length;
        return finishedBefore >= 2;
      },
      5 * 60_000
    );
    cli.kill('SIGKILL');
    await cli.output;
    // Resumed with a raised budget (rollout resume --budget): the new cap holds from this run on.
    const raised = 200 * TRIAL_TOKENS;
    const resumed = await runCli(['resume', name, '--budget', `tokens=${raised}`], {
      cwd: dir,
      env: { ROLLOUT_TEST_KEY: KEY },
    });
    assert.equal(resumed.code, 0, resumed.stderr + resumed.stdout);
    const done = await readJson<JobResult>(path.join(jobDir, 'result.json'));
    assert.equal(done.status, 'completed');
    assert.equal(done.n_completed_trials, 6);
    assert.equal(done.budget!.limits.tokens, raised);
    const spent = done.budget!.spent.tokens;
    assert.ok(spent >= finishedBefore * TRIAL_TOKENS, `${spent}: the trials finished before the kill count`);
    // Every call recorded counts, but a call whose record was written an instant before the kill and not yet reported
    // (at most one per trial running then).
    const recorded = await recordedTokens(jobDir);
    assert.ok(spent <= recorded && recorded - spent <= 2 * MAX_CALL_TOKENS, `spent ${spent}, recorded ${recorded}`);
  });

  it('rollout ctl <job> budget lowers the budget of a running job at once: its next call is refused, no trial starts, budget_exhausted; bad values exit 2', async () => {
    const { name, jobDir } = await writeJob(
      'lowered.yaml',
      ['n_concurrent_trials: 1', `budget: { tokens: ${100 * TRIAL_TOKENS} }`],
      { attempts: 4, delaySec: 20 }
    );
    const cli = startCli(['lowered.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
    const first = path.join(jobDir, 'hello-world__scripted__1', 'result.json');
    await waitFor('the first trial to finish', () => existsSync(first), 5 * 60_000);
    // The second trial sleeps 20 s before its first call: lowered now, that call is refused.
    const lowered = await runCli(['ctl', name, 'budget', 'tokens=1'], { cwd: dir });
    assert.equal(lowered.code, 0, lowered.stderr + lowered.stdout);
    assert.match(lowered.stdout, /budget \{"tokens":1\} · spent .* · spent \(tokens \d+ of 1\): no trial starts/);
    const run = await cli.output;
    assert.equal(run.code, 1, run.stderr + run.stdout);
    const job = await readJson<JobResult>(path.join(jobDir, 'result.json'));
    assert.equal(job.status, 'budget_exhausted');
    assert.equal(job.n_completed_trials, 1);
    const second = await readJson<TrialResult>(path.join(jobDir, 'hello-world__scripted__2', 'result.json'));
    assert.equal(second.error?.type, 'JobBudgetExhaustedError', JSON.stringify(second.error));
    assert.match(second.error.message, /the job's budget is spent \(tokens \d+ of 1; job\.yaml budget\)/);
    assert.equal(Object.values(job.evals)[0]?.n_scored_trials, 1, 'the refused trial is not scored');
    assert.ok(
      !existsSync(path.join(jobDir, 'hello-world__scripted__3')),
      'no trial started after the budget was spent'
    );
    const ended = await runCli(['ctl', name, 'budget', 'tokens=1000000'], { cwd: dir });
    assert.equal(ended.code, 2, ended.stderr + ended.stdout);
    assert.match(ended.stderr, /the job is not running \(completed\)/);
    const bad = await runCli(['ctl', name, 'budget', 'tokens=-5'], { cwd: dir });
    assert.equal(bad.code, 2, bad.stderr + bad.stdout);
    assert.match(bad.stderr.trim(), /^error: rollout ctl: budget: budget tokens must be a positive number, got -5$/);
  });

  it("an agent's per-trial limits: its call over them is refused with a clear message, the trial ends AgentBudgetExceededError, verified and scored", async () => {
    const { name, jobDir } = await writeJob('limited.yaml', [], { attempts: 1 });
    const yaml = await readFile(path.join(dir, 'limited.yaml'), 'utf8');
    await writeFile(
      path.join(dir, 'limited.yaml'),
      yaml.replace('    gateway: true\n', '    gateway: true\n    limits: { llm_calls: 1 }\n')
    );
    const run = await runCli(['limited.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY } });
    assert.equal(run.code, 0, run.stderr + run.stdout);
    const trial = await readJson<TrialResult>(path.join(jobDir, 'hello-world__scripted__1', 'result.json'));
    assert.equal(trial.error?.type, 'AgentBudgetExceededError', JSON.stringify(trial.error));
    assert.match(trial.error.message, /llm_calls 1 of 1/);
    // The first call wrote hello.txt: the verifier grades it as usual.
    assert.deepEqual(trial.rewards, { reward: 1 });
    const calls = await callRecords(path.join(jobDir, 'hello-world__scripted__1', 'agent', 'llm-calls.jsonl'));
    assert.deepEqual(
      calls.map((call) => [call.status, call.refused ?? null]),
      [
        [200, null],
        [402, 'trial_limit'],
      ]
    );
    const turn2 = await readFile(path.join(jobDir, 'hello-world__scripted__1', 'agent', 'turn-2.txt'), 'utf8');
    assert.match(turn2, /HTTP\/1.1 402[\s\S]*this trial reached its limit \(llm_calls 1 of 1/);
    const generations = scripted.calls(name).filter((call) => call.dialect === 'openai-chat');
    assert.equal(generations.length, 1, 'the refused call never reached the upstream');
    const job = await readJson<JobResult>(path.join(jobDir, 'result.json'));
    assert.equal(Object.values(job.evals)[0]?.n_scored_trials, 1);
  });

  it('--dry-run prints the plan and an estimate (measured where an earlier job ran the same agent, model and tasks), and starts nothing', async () => {
    const { name, jobDir } = await writeJob('planned.yaml', ['budget: { cost_usd: 0.001 }'], { attempts: 3 });
    const run = await runCli(['planned.yaml', '--dry-run'], { cwd: dir, env: { ROLLOUT_TEST_KEY: '' } });
    assert.equal(run.code, 0, run.stderr + run.stdout);
    assert.match(run.stdout, /3 trials/);
    assert.match(run.stdout, /scripted/);
    assert.match(run.stdout, /gpt-5/);
    assert.match(run.stdout, /measured/);
    assert.match(run.stdout, /estimated cost/i);
    assert.match(run.stdout, /exceeds the budget/);
    assert.ok(!existsSync(jobDir), 'no job folder');
    assert.equal(scripted.calls(name).length, 0, 'not even a preflight call');
  });
});
