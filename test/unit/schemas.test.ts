/** task.toml, job.yaml, quantities, env references, rewards and metrics: the formats at the edges, on real files. */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

import { resolveEnv, MissingEnvironmentVariableError } from '../../src/env-vars';
import { InputError } from '../../src/contracts/errors';
import { loadJobFile } from '../../src/job/load';
import { parseBytes, parseCpus, parseQuantity } from '../../src/contracts/quantity';
import { addTrial, emptyStats, groupMetrics } from '../../src/results/job-stats';
import { loadDataset, loadTask } from '../../src/task/load';
import { readReward } from '../../src/trial/reward';
import { retryWaitMs } from '../../src/trial/retry';
import type { TrialSummary } from '../../src/contracts/trial';

async function taskDir(toml: string): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-task-'));
  await mkdir(path.join(dir, 'tests'));
  await writeFile(path.join(dir, 'task.toml'), toml);
  await writeFile(path.join(dir, 'instruction.md'), 'Do it.');
  await writeFile(path.join(dir, 'tests', 'test.sh'), 'echo 1 > /logs/verifier/reward.txt');
  return dir;
}

async function jobFile(yaml: string, name = 'job.yaml'): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-job-'));
  await writeFile(path.join(dir, name), yaml);
  return path.join(dir, name);
}

describe('big and linked inputs', () => {
  it(
    'validates a 4.6 MB job.yaml of 200,000 keys in linear time (within the test timeout)',
    { timeout: 120_000 },
    async () => {
      const lines = ['agents:', '  - name: oracle', 'datasets:', '  - path: tasks', 'environment:', '  type: docker'];
      const keys = Array.from({ length: 200_000 }, (_, i) => `  key_number_${i}: value_${i}`);
      const file = await jobFile([...lines.slice(0, 4), 'metrics_extra:', ...keys, ''].join('\n'));
      await assert.rejects(loadJobFile(file), (err: unknown) => {
        assert.ok(err instanceof InputError);
        // The dataset folder does not exist either: that problem is reported alongside (all problems at once).
        assert.deepEqual(
          err.problems.filter((problem) => problem.field === 'metrics_extra'),
          [{ file, field: 'metrics_extra', message: 'unknown key' }]
        );
        return true;
      });
    }
  );

  it('still reports a duplicate key in job.yaml, with its line', async () => {
    const file = await jobFile('agents:\n  - name: oracle\ndatasets:\n  - path: tasks\nn_attempts: 1\nn_attempts: 2\n');
    await assert.rejects(loadJobFile(file), /invalid YAML: duplicate key "n_attempts" at line 6/);
  });

  it('follows a link to a task folder in a dataset', async () => {
    const dataset = await mkdtemp(path.join(tmpdir(), 'rollout-dataset-'));
    await symlink(await taskDir('version = "1.0"\n'), path.join(dataset, 'linked'));
    const loaded = await loadDataset(dataset);
    assert.deepEqual(loaded.problems, []);
    assert.deepEqual(
      loaded.tasks.map((task) => task.name),
      ['linked']
    );
  });
});

describe('quantities', () => {
  it('parses Kubernetes quantities', () => {
    assert.equal(parseQuantity('500m'), 0.5);
    assert.equal(parseQuantity('2G'), 2e9);
    assert.equal(parseQuantity('256Mi'), 256 * 2 ** 20);
    assert.equal(parseQuantity('1.5Gi'), 1.5 * 2 ** 30);
    assert.equal(parseQuantity('1e3'), 1000);
    assert.equal(parseCpus(2), 2);
    assert.equal(parseCpus('500m'), 0.5);
  });
  it('reads a bare memory or storage number as megabytes', () => {
    assert.equal(parseBytes('2048'), 2048e6);
    assert.equal(parseBytes(512), 512e6);
    assert.equal(parseBytes('1Gi'), 2 ** 30);
  });
  it('rejects what is not a quantity', () => {
    for (const bad of ['2 gigs', 'lots', '', '-1', '1.2.3', 'Gi', '0']) assert.throws(() => parseQuantity(bad), bad);
  });
});

describe('task.toml', () => {
  it('applies every default of the spec', async () => {
    const load = await loadTask(await taskDir('version = "1.0"\n'));
    assert.ok(load.task, JSON.stringify(load.problems));
    const { config, resources } = load.task;
    assert.equal(config.verifier.timeout_sec, 600);
    assert.equal(config.agent.timeout_sec, 600);
    assert.equal(config.environment.build_timeout_sec, 600);
    assert.equal(config.environment.docker_image, null);
    assert.equal(config.source, null);
    assert.deepEqual(config.metadata, {});
    // Harbor's defaults and units: "2G" is 2048 MiB.
    assert.deepEqual(resources, {
      cpus: 1,
      memoryBytes: 2 * 2 ** 30,
      storageBytes: 10 * 2 ** 30,
      gpus: 0,
      pidsLimit: 4096,
    });
  });

  it('takes a pids limit from [environment] pids_limit, and refuses one that is not a positive integer', async () => {
    const load = await loadTask(await taskDir('version = "1.0"\n[environment]\npids_limit = 128\n'));
    assert.equal(load.task?.resources.pidsLimit, 128);
    const bad = await loadTask(await taskDir('version = "1.0"\n[environment]\npids_limit = 0\n'));
    assert.deepEqual(
      bad.problems.map((problem) => problem.field),
      ['environment.pids_limit']
    );
  });

  it("accepts the spec's example unchanged", async () => {
    const load = await loadTask(
      await taskDir(`version = "1.0"
[metadata]
author_name = "Steve Jobs"
author_email = "steve@apple.com"
difficulty = "easy"
category = "programming"
tags = ["trivial"]
[verifier]
timeout_sec = 120.0
[agent]
timeout_sec = 120.0
[environment]
build_timeout_sec = 600.0
docker_image = "some-org/some-name:some-tag"
cpus = "1"
memory = "2048"
storage = "10240"
`)
    );
    assert.ok(load.task, JSON.stringify(load.problems));
    assert.equal(load.task.resources.memoryBytes, 2048e6);
    assert.equal(load.task.config.environment.docker_image, 'some-org/some-name:some-tag');
    assert.deepEqual(load.task.config.metadata.tags, ['trivial']);
  });

  it("accepts Harbor's schema 1.4 task.toml", async () => {
    const load = await loadTask(
      await taskDir(`schema_version = "1.4"
[task]
name = "harbor/hello-world"
description = "hi"
[verifier]
timeout_sec = 120.0
[verifier.env]
TOKEN = "\${TOKEN:-x}"
[solution.env]
MODE = "fast"
[agent]
timeout_sec = 120.0
[environment]
build_timeout_sec = 600.0
cpus = 2
memory_mb = 4096
storage_mb = 10240
gpus = 0
allow_internet = true
`)
    );
    assert.ok(load.task, JSON.stringify(load.problems));
    assert.deepEqual(load.task.resources, {
      cpus: 2,
      memoryBytes: 4096 * 2 ** 20, // memory_mb and storage_mb are MiB, as Harbor means them
      storageBytes: 10240 * 2 ** 20,
      gpus: 0,
      pidsLimit: 4096,
    });
    assert.deepEqual(load.task.config.solution.env, { MODE: 'fast' });
    assert.equal(load.task.config.verifier.env.TOKEN, '${TOKEN:-x}');
  });

  it('reports each problem with file and field', async () => {
    const dir = await taskDir(
      '[environment]\ncpus = "many"\nmemory = "2 gigs"\nflavour = "x"\n[agent]\ntimeout_sec = "soon"\n'
    );
    const load = await loadTask(dir);
    const lines = load.problems.map((p) => `${p.file}: ${p.field}: ${p.message}`);
    const file = path.join(dir, 'task.toml');
    for (const field of ['environment.cpus', 'environment.memory', 'environment.flavour', 'agent.timeout_sec']) {
      assert.ok(
        lines.some((line) => line.startsWith(`${file}: ${field}: `)),
        `${field} in ${lines.join('\n')}`
      );
    }
  });

  it("reads a task.toml with neither version nor schema_version as Harbor's current schema", async () => {
    const load = await loadTask(await taskDir('[environment]\nmemory = "512M"\n'));
    assert.ok(load.task, JSON.stringify(load.problems));
    assert.equal(load.task.resources.memoryBytes, 512 * 2 ** 20);
  });

  it("names a multi-step task's missing step folder", async () => {
    const load = await loadTask(await taskDir('version = "1.0"\n[[steps]]\nname = "one"\n'));
    assert.match(load.problems[0]?.file ?? '', /steps\/one$/);
    assert.equal(load.problems[0]?.message, 'missing (task.toml declares the step "one")');
  });
});

describe('job.yaml', () => {
  it('applies defaults and names the job after its file', async () => {
    const job = await loadJobFile(
      await jobFile('agents: [{name: oracle}]\ndatasets: [{path: tasks}]\n', 'nightly.yaml')
    );
    assert.equal(job.name, 'nightly');
    assert.equal(job.n_attempts, 1);
    assert.equal(job.n_concurrent_trials, 4);
    assert.equal(job.timeout_multiplier, 1);
    assert.equal(job.environment.type, 'docker');
    assert.equal(job.environment.delete, true);
    assert.equal(job.environment.force_build, false);
    assert.deepEqual(job.verifier, { override_timeout_sec: 0, max_timeout_sec: 0, disable: false });
    assert.deepEqual(job.metrics, [{ type: 'mean' }]);
    assert.ok(path.isAbsolute(job.jobs_dir));
  });

  it('reads job.json too, with every key of the spec', async () => {
    const job = await loadJobFile(
      await jobFile(
        JSON.stringify({
          name: 'j',
          jobs_dir: 'out',
          n_attempts: 3,
          n_concurrent_trials: 2,
          timeout_multiplier: 2.5,
          log_level: 'error',
          environment: {
            type: 'local',
            force_build: true,
            delete: false,
            override_cpus: 1,
            override_memory: '2G',
            override_storage: '30G',
          },
          verifier: { override_timeout_sec: 10, max_timeout_sec: 20, disable: true },
          metrics: [{ type: 'sum' }, { type: 'min' }, { type: 'max' }, { type: 'mean' }],
          agents: [
            { name: 'a', description: 'd', install: 'true', execute: 'true', env: { K: '${K}' } },
            { name: 'oracle' },
          ],
          datasets: [{ path: 'tasks' }],
        }),
        'job.json'
      )
    );
    assert.equal(job.n_attempts, 3);
    assert.equal(job.environment.type, 'local');
    assert.equal(job.agents[0]?.env.K, '${K}');
  });

  it('reports every problem at once, one per field', async () => {
    const file = await jobFile(
      'n_attempts: 0\nmetrics: [{type: median}]\nenvironment: {type: k8s, override_cpus: lots}\nagents: [{name: oracle, execute: "x"}, {name: x}]\ndatasets: []\n'
    );
    await assert.rejects(loadJobFile(file), (err: unknown) => {
      assert.ok(err instanceof InputError);
      const fields = err.problems.map((p) => p.field);
      for (const field of [
        'n_attempts',
        'metrics.0.type',
        'environment.type',
        'environment.override_cpus',
        'agents.0.execute',
        'agents.1.execute',
        'datasets',
      ]) {
        assert.ok(fields.includes(field), `${field} in ${fields.join(', ')}`);
      }
      assert.ok(err.problems.every((p) => p.file === file));
      return true;
    });
  });

  it('reads retry (API errors by default) and the gateway opt-in; rejects an error type that is not a task error', async () => {
    const job = await loadJobFile(
      await jobFile('retry: {max_retries: 2}\nagents: [{name: a, execute: x, gateway: true}]\ndatasets: [{path: d}]\n')
    );
    assert.deepEqual(job.retry, {
      error_types: [
        'ApiRateLimitError',
        'AgentAuthenticationError',
        'ContextWindowExceededError',
        'ApiOverloadedError',
        'ApiUnreachableError',
      ],
      max_retries: 2,
      min_wait_sec: 1,
      max_wait_sec: 60,
    });
    assert.equal(job.agents[0]?.gateway, true);
    const file = await jobFile(
      'retry: {error_types: [InfrastructureError]}\nagents: [{name: a, execute: x}]\ndatasets: [{path: d}]\n'
    );
    await assert.rejects(loadJobFile(file), (err: unknown) => {
      assert.ok(err instanceof InputError);
      assert.ok(err.problems.some((p) => p.field === 'retry.error_types.0'));
      assert.match(err.problems.find((p) => p.field === 'retry.error_types.0')!.message, /ApiRateLimitError/);
      return true;
    });
  });

  it('reads rate_limits as the issue shows them; a rule without a limit, or an unknown upstream, names the field', async () => {
    const job = await loadJobFile(
      await jobFile(
        [
          'rate_limits:',
          '  - match: { upstream: anthropic, model: "claude-*" }',
          '    requests_per_minute: 400',
          '    input_tokens_per_minute: 2000000',
          '    max_concurrent: 64',
          'agents: [{name: claude-code}]',
          'datasets: [{path: d}]',
          '',
        ].join('\n')
      )
    );
    assert.deepEqual(job.rate_limits, [
      {
        match: { upstream: 'anthropic', model: 'claude-*' },
        requests_per_minute: 400,
        input_tokens_per_minute: 2000000,
        max_concurrent: 64,
      },
    ]);
    for (const [rule, field, pattern] of [
      ['{match: {upstream: azure}, requests_per_minute: 1}', 'rate_limits.0.match.upstream', /anthropic/],
      ['{match: {model: "gpt-*"}}', 'rate_limits.0', /requests_per_minute, input_tokens_per_minute or max_concurrent/],
    ] as const) {
      const bad = await jobFile(`rate_limits: [${rule}]\nagents: [{name: a, execute: x}]\ndatasets: [{path: d}]\n`);
      await assert.rejects(loadJobFile(bad), (err: unknown) => {
        assert.ok(err instanceof InputError);
        const problem = err.problems.find((p) => p.field === field);
        assert.match(problem?.message ?? JSON.stringify(err.problems), pattern);
        return true;
      });
    }
  });

  it('reads budget and agents[].limits as the issue shows them; a bad value names job.yaml and the field', async () => {
    const job = await loadJobFile(
      await jobFile(
        [
          'budget: { cost_usd: 50, tokens: 20000000 }',
          'agents:',
          '  - name: claude-code',
          '    limits: { cost_usd: 2, tokens: 2000000, llm_calls: 200 }',
          'datasets: [{path: d}]',
          '',
        ].join('\n')
      )
    );
    assert.deepEqual(job.budget, { cost_usd: 50, tokens: 20000000 });
    assert.deepEqual(job.agents[0]!.limits, { cost_usd: 2, tokens: 2000000, llm_calls: 200 });
    for (const [yaml, field, pattern] of [
      ['budget: { cost_usd: 0 }', 'budget.cost_usd', />0/],
      ['budget: { tokens: 1.5 }', 'budget.tokens', /int/],
      ['budget: {}', 'budget', /a budget sets cost_usd or tokens/],
      ['budget: { dollars: 5 }', 'budget.dollars', /unknown key/],
      ['budget: 50', 'budget', /object/],
    ] as const) {
      const bad = await jobFile(`${yaml}\nagents: [{name: a, execute: x}]\ndatasets: [{path: d}]\n`);
      await assert.rejects(loadJobFile(bad), (err: unknown) => {
        assert.ok(err instanceof InputError);
        const problem = err.problems.find((p) => p.field === field);
        assert.match(problem?.message ?? JSON.stringify(err.problems), pattern);
        return true;
      });
    }
    const offGateway = await jobFile(
      'agents: [{name: a, execute: x, limits: {llm_calls: 5}}]\ndatasets: [{path: d}]\n'
    );
    await assert.rejects(loadJobFile(offGateway), (err: unknown) => {
      assert.ok(err instanceof InputError);
      const problem = err.problems.find((p) => p.field === 'agents.0.limits');
      assert.match(problem?.message ?? JSON.stringify(err.problems), /limits need the model gateway \(gateway: true\)/);
      return true;
    });
    // A cost cap over a model without a price could not bound its calls (the gateway refuses them all): refused now.
    for (const [yaml, field, cap] of [
      [
        'budget: { cost_usd: 5 }\nagents: [{name: a, execute: x, gateway: true, model: my-vllm-7b}]',
        'agents.0.model',
        'budget.cost_usd',
      ],
      [
        'agents: [{name: a, execute: x, gateway: true, model: my-vllm-7b, limits: {cost_usd: 1}}]',
        'agents.0.model',
        'limits.cost_usd',
      ],
    ] as const) {
      await assert.rejects(loadJobFile(await jobFile(`${yaml}\ndatasets: [{path: d}]\n`)), (err: unknown) => {
        assert.ok(err instanceof InputError);
        const problem = err.problems.find((p) => p.field === field);
        assert.equal(
          problem?.message,
          `no price for model "my-vllm-7b" (src/budget/workflow/prices.ts), so ${cap} cannot bound its calls: cap tokens instead`
        );
        return true;
      });
    }
    // Capped in tokens, or off the gateway (nothing counts its calls), or priced: accepted.
    for (const yaml of [
      'budget: { tokens: 5000 }\nagents: [{name: a, execute: x, gateway: true, model: my-vllm-7b}]',
      'budget: { cost_usd: 5 }\nagents: [{name: a, execute: x, model: my-vllm-7b}]',
      'budget: { cost_usd: 5 }\nagents: [{name: a, execute: x, gateway: true, model: openai/gpt-5}]',
    ]) {
      await loadJobFile(await jobFile(`${yaml}\ndatasets: [{path: d}]\n`));
    }
    const bad = await jobFile(
      'agents: [{name: a, execute: x, gateway: true, limits: {llm_calls: -1}}]\ndatasets: [{path: d}]\n'
    );
    await assert.rejects(loadJobFile(bad), (err: unknown) => {
      assert.ok(err instanceof InputError);
      assert.ok(
        err.problems.some((p) => p.field === 'agents.0.limits.llm_calls'),
        JSON.stringify(err.problems)
      );
      return true;
    });
  });

  it('retry waits grow from min_wait_sec, jittered, capped at max_wait_sec; only named errors, at most max_retries', () => {
    const policy = { errorTypes: ['ApiRateLimitError'], maxRetries: 3, minWaitSec: 2, maxWaitSec: 5 };
    const error = { type: 'ApiRateLimitError' as const, message: '', step: 'execute' as const };
    assert.equal(
      retryWaitMs(policy, error, 0, () => 0),
      1000
    );
    assert.equal(
      retryWaitMs(policy, error, 0, () => 1),
      2000
    );
    assert.equal(
      retryWaitMs(policy, error, 1, () => 1),
      4000
    );
    assert.equal(
      retryWaitMs(policy, error, 2, () => 1),
      5000
    );
    assert.equal(
      retryWaitMs(policy, error, 3, () => 1),
      null
    );
    assert.equal(retryWaitMs(policy, { ...error, type: 'AgentTimeoutError' }, 0), null);
    assert.equal(retryWaitMs(null, error, 0), null);
    assert.equal(retryWaitMs(policy, null, 0), null);
  });

  it('reports invalid YAML with the file', async () => {
    const file = await jobFile('agents: [\n');
    await assert.rejects(loadJobFile(file), new RegExp(`${file}: invalid YAML`));
  });
});

describe('env references', () => {
  it('resolves ${VAR} and ${VAR:-default}, and names every unset variable', () => {
    assert.deepEqual(resolveEnv({ A: '${X}', B: 'pre-${Y:-dflt}', C: 'plain' }, { X: 'x' }), {
      A: 'x',
      B: 'pre-dflt',
      C: 'plain',
    });
    assert.throws(
      () => resolveEnv({ A: '${NOPE}', B: '${ALSO_NOPE}' }, {}),
      (err: unknown) => {
        assert.ok(err instanceof MissingEnvironmentVariableError);
        assert.deepEqual(err.names, ['ALSO_NOPE', 'NOPE']);
        return true;
      }
    );
  });
});

describe('rewards', () => {
  it('reads reward.txt first, then reward.json', () => {
    assert.deepEqual(readReward({ txt: ' 0.75\n', json: '{"x": 1}' }), { rewards: { reward: 0.75 } });
    assert.deepEqual(readReward({ json: '{"accuracy": 0.95, "runtime_sec": 1.23}' }), {
      rewards: { accuracy: 0.95, runtime_sec: 1.23 },
    });
  });
  it('reads reward.txt as one decimal integer or float, as the spec says', () => {
    for (const [text, value] of [
      ['1', 1],
      ['-0.5\n', -0.5],
      ['+.25', 0.25],
      ['3.', 3],
      ['1e-3', 0.001],
      ['007', 7],
    ] as const) {
      assert.deepEqual(readReward({ txt: text }), { rewards: { reward: value } }, text);
    }
  });

  it('refuses reward files too big to read, and rewards too many or too long to carry', () => {
    assert.match((readReward({ tooBig: 'reward.json' }) as { message: string }).message, /reward\.json: too big/);
    const many = JSON.stringify(Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`k${i}`, i])));
    assert.match((readReward({ json: many }) as { message: string }).message, /more than 1000 rewards/);
    assert.match((readReward({ json: `{"${'k'.repeat(201)}": 1}` }) as { message: string }).message, /longer than 200/);
    assert.deepEqual(readReward({ json: `{"reward": 1}${' '.repeat(10 * 2 ** 20)}` }), { rewards: { reward: 1 } });
  });

  it('types missing and unparsable reward files', () => {
    assert.equal((readReward({}) as { error: string }).error, 'RewardFileNotFoundError');
    for (const bad of [
      { txt: 'yes' },
      { txt: '' },
      { txt: '0x10' },
      { txt: '0o7' },
      { txt: '0b1' },
      { txt: '1e' },
      { txt: 'Infinity' },
      { txt: '-Infinity' },
      { txt: '1 2' },
      { txt: '1e400' },
      { json: '{"a": "1"}' },
      { json: '[1]' },
      { json: '{"a": {"b": 1}}' },
      { json: 'nope' },
    ]) {
      assert.equal((readReward(bad) as { error: string }).error, 'RewardFileParseError', JSON.stringify(bad));
    }
  });
});

describe('metrics', () => {
  const trial = (agent: string, rewards: Record<string, number> | null, error: string | null = null): TrialSummary => ({
    trialId: `${agent}-${Math.random()}`,
    trialName: 't',
    taskName: 't',
    datasetName: 'd',
    agentName: agent,
    attempt: 1,
    rewards,
    error: error ? { type: error as 'AgentTimeoutError', message: '', step: 'execute' } : null,
    hostQueue: null,
    builtImage: null,
    envKey: 'k',
  });

  it('computes sum, min, max and mean per reward key; task errors count 0, infrastructure errors not at all', () => {
    const stats = emptyStats(5);
    addTrial(stats, trial('a', { reward: 1 }));
    addTrial(stats, trial('a', { reward: 0.5 }));
    addTrial(stats, trial('a', null, 'RewardFileNotFoundError'));
    addTrial(stats, trial('a', null, 'InfrastructureError'));
    addTrial(stats, trial('a', null, 'CancelledError'));
    const group = stats.groups['a__d']!;
    // All five trials are of one task: no interval from one task, and pass@k over its three scored trials.
    const { pass_at_k, ...reward } = groupMetrics(group, ['sum', 'min', 'max', 'mean']).reward!;
    assert.deepEqual(reward, { n: 3, sum: 1.5, min: 0, max: 1, mean: 0.5, ci95: null });
    assert.deepEqual(Object.keys(pass_at_k ?? {}), ['1', '2', '3']);
    assert.equal(stats.n_completed, 2);
    assert.equal(stats.n_errored, 1);
    assert.equal(stats.n_infrastructure_errors, 1);
    assert.equal(stats.n_cancelled, 1);
  });
});
