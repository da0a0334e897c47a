/**
 * The README's main job, end to end, for real: the CLI, a Temporal dev server, a Docker engine. Asserts rewards,
 * files, metrics and that nothing is left behind.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { parse, stringify } from 'yaml';

import type { JobResult } from '../../src/results/job-result';
import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { containersOfJob, imagesOfJob, removeJobLeftovers } from '../support/docker';
import { recordHistory } from '../support/histories';
import { TEST_ADDRESS, testTemporal } from '../support/temporal';
import { findTemporalCli } from '../../src/temporal/dev-server';

const jobName = `examples-${randomBytes(3).toString('hex')}`;
let dir: string;
let run: CliRun;
const jobDir = () => path.join(dir, 'jobs', jobName);
const trial = async (name: string) =>
  JSON.parse(await readFile(path.join(jobDir(), name, 'result.json'), 'utf8')) as TrialResult;

describe('examples/job.yaml end to end', () => {
  before(async () => {
    const { client, connection } = await testTemporal();
    dir = await workspace({ examples: 'examples' });
    const job = parse(await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8')) as Record<string, unknown>;
    await writeFile(path.join(dir, 'examples', 'job.yaml'), stringify({ ...job, name: jobName }));
    run = await runCli(['examples/job.yaml'], { cwd: dir });
    await recordHistory(client, `rollout-job/${jobName}`, 'job-examples');
    await recordHistory(client, `${jobName}/hello-world__greeter__1`, 'trial-hello-world-greeter');
    await connection.close();
  });
  after(() => removeJobLeftovers(jobName));

  it('exits 0 and prints metrics, the results folder and the UI link', () => {
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /agent\s+dataset\s+reward\s+n\s+trials\s+errors\s+mean\s+ci95\s+max/);
    // Rewards of 0 or 1: every printed interval lies inside [0, 1] (it once printed [-5.853, 6.853]).
    const intervals = [...run.stdout.matchAll(/\[(-?[\d.]+), (-?[\d.]+)\]/g)];
    assert.ok(intervals.length > 0, run.stdout);
    for (const [, low, high] of intervals) assert.ok(Number(low) >= 0 && Number(high) <= 1, run.stdout);
    assert.match(run.stdout, new RegExp(`results: .*jobs/${jobName}`));
    assert.match(run.stderr, /6\/6 done/);
  });

  it('scores the oracle 1 on solvable tasks and 0 on the impossible one', async () => {
    assert.deepEqual((await trial('hello-world__oracle__1')).rewards, { reward: 1 });
    assert.deepEqual((await trial('word-count__oracle__1')).rewards, { lines: 1, words: 1 });
    assert.deepEqual((await trial('impossible__oracle__1')).rewards, { reward: 0 });
  });

  it('runs the custom agent with its install and execute scripts and resolved ${VAR:-default} env', async () => {
    const hello = await trial('hello-world__greeter__1');
    assert.deepEqual(hello.rewards, { reward: 1 });
    assert.equal(hello.error, null);
    assert.deepEqual((await trial('word-count__greeter__1')).rewards, { lines: 0, words: 0 });
    const executeLog = await readFile(path.join(jobDir(), 'hello-world__greeter__1', 'agent', 'execute.txt'), 'utf8');
    assert.match(executeLog, /task: Create a file called `hello.txt`/);
    const installLog = await readFile(path.join(jobDir(), 'hello-world__greeter__1', 'agent', 'install.txt'), 'utf8');
    assert.match(installLog, /installed greeter/);
  });

  it('writes the trial folder layout with step timings and the workflow id', async () => {
    const result = await trial('hello-world__oracle__1');
    for (const step of ['build', 'start', 'execute', 'verify', 'collect', 'stop', 'cleanup'] as const) {
      const timing = result.steps[step];
      assert.ok(timing, `step ${step} recorded`);
      assert.ok(Date.parse(timing.started_at) <= Date.parse(timing.finished_at ?? ''), `step ${step} ordered`);
    }
    // The oracle installs nothing: its trials skip the install step (a round trip for nothing) and still name it.
    assert.equal(result.steps.install, undefined);
    assert.deepEqual(result.agent, { name: 'oracle', version: null, model: null });
    assert.ok((await trial('hello-world__greeter__1')).steps.install, 'an agent that installs records the step');
    assert.equal(result.workflow_id, `${jobName}/hello-world__oracle__1`);
    assert.equal(result.trial_name, 'hello-world__oracle__1');
    assert.equal(result.task_name, 'hello-world');
    assert.equal(result.agent_name, 'oracle');
    assert.equal(result.attempt, 1);
    const files = await readdir(path.join(jobDir(), 'hello-world__oracle__1'));
    for (const expected of ['result.json', 'agent', 'verifier', 'trial.log'])
      assert.ok(files.includes(expected), expected);
    const verifierFiles = await readdir(path.join(jobDir(), 'hello-world__oracle__1', 'verifier'));
    assert.ok(verifierFiles.includes('reward.txt') && verifierFiles.includes('test-stdout.txt'), verifierFiles.join());
    assert.match(
      await readFile(path.join(jobDir(), 'hello-world__oracle__1', 'trial.log'), 'utf8'),
      /\[verify\] rewards/
    );
  });

  it('writes the job result with counts and each metric per reward key, and the resolved config', async () => {
    const result = JSON.parse(await readFile(path.join(jobDir(), 'result.json'), 'utf8')) as JobResult;
    assert.equal(result.status, 'completed');
    assert.equal(result.n_total_trials, 6);
    assert.equal(result.n_completed_trials, 6);
    assert.equal(result.n_errored_trials, 0);
    // reward.txt tasks (hello-world, impossible) report "reward"; word-count's reward.json reports lines and words:
    // each key is summarised over the trials that report it.
    assert.deepEqual(result.evals['oracle__tasks']?.metrics, {
      lines: { n: 1, mean: 1, max: 1, ci95: null },
      reward: { n: 2, mean: 0.5, max: 1, ci95: result.evals['oracle__tasks']?.metrics.reward?.ci95 },
      words: { n: 1, mean: 1, max: 1, ci95: null },
    });
    assert.equal(result.evals['oracle__tasks']?.metrics.reward?.ci95?.length, 2);
    assert.equal(result.evals['greeter__tasks']?.metrics.reward?.mean, 0.5);
    const config = JSON.parse(await readFile(path.join(jobDir(), 'config.json'), 'utf8')) as {
      agents: { name: string; env: Record<string, string> }[];
    };
    assert.equal(config.agents[1]?.env.GREETING, '${GREETING:-Hello, world!}');
    assert.ok((await stat(path.join(jobDir(), 'plan.jsonl'))).size > 0);
  });

  it('makes the trials findable by search attributes (Temporal UI, `temporal workflow list --query`)', () => {
    const list = (query: string) =>
      JSON.parse(
        execFileSync(
          findTemporalCli(),
          ['workflow', 'list', '--address', TEST_ADDRESS, '--query', query, '-o', 'json'],
          {
            encoding: 'utf8',
          }
        ) || '[]'
      ) as { execution: { workflowId: string } }[];
    assert.equal(list(`RolloutJob = "${jobName}" AND WorkflowType = "trialWorkflow"`).length, 6);
    assert.equal(
      list(`RolloutJob = "${jobName}" AND RolloutAgent = "oracle" AND RolloutStatus = "completed"`).length,
      3
    );
    const perfect = list(`RolloutJob = "${jobName}" AND RolloutReward = 1`)
      .map((w) => w.execution.workflowId)
      .sort();
    // The primary reward is "reward", else the first key: word-count's is "lines".
    assert.deepEqual(perfect, [
      `${jobName}/hello-world__greeter__1`,
      `${jobName}/hello-world__oracle__1`,
      `${jobName}/word-count__oracle__1`,
    ]);
    assert.equal(list(`RolloutJob = "${jobName}" AND WorkflowType = "jobWorkflow"`).length, 1);
  });

  it('reports the finished job with `rollout status` and lists it with `rollout jobs`', async () => {
    const status = await runCli(['status', jobName], { cwd: dir });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, new RegExp(`job ${jobName}: completed · 6/6 finished · 0 running · 6 completed`));
    assert.match(status.stdout, /^oracle\s+tasks\s+reward\s+2\s+3\s+0\s+0\.500\s+\[-?\d+\.\d+, \d+\.\d+\]\s+1$/m);
    const gated = await runCli(['status', jobName, '--fail-under', 'reward=0.4', '--max-errors', '0'], { cwd: dir });
    assert.equal(gated.code, 0, gated.stdout);
    const jobs = await runCli(['jobs'], { cwd: dir });
    assert.equal(jobs.code, 0, jobs.stderr);
    assert.match(jobs.stdout, new RegExp(`^${jobName}\\s+completed\\s`, 'm'));
    const unknown = await runCli(['status', 'no-such-job'], { cwd: dir });
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /no-such-job: no such job/);
  });

  it('gates the finished job when run again: exit 4 after the report, JUnit XML of its six trials', async () => {
    const again = await runCli(['examples/job.yaml', '--fail-under', 'reward=0.9', '--junit', 'junit.xml'], {
      cwd: dir,
    });
    assert.equal(again.code, 4, again.stderr);
    assert.match(again.stdout, /results: .*\ngate:\n {2}FAIL {2}oracle__tasks reward mean 0\.5000 < 0\.9/s);
    const junit = await readFile(path.join(dir, 'junit.xml'), 'utf8');
    assert.match(junit, /<testsuites name="[^"]+" tests="6" failures="3" errors="0" skipped="0">/);
    assert.match(
      junit,
      /name="impossible__oracle__1" time="[\d.]+"><failure type="reward" message="reward 0 &lt; 1"\/>/
    );
  });

  it('leaves no containers and, with delete: true, no images of the job', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
    assert.deepEqual(await imagesOfJob(jobName), []);
  });
});
