/**
 * One-line runs: `rollout run` with Harbor's flags, with or without a job file, `--print-config` (a one-liner becomes
 * a job file in one step, and that file runs the same job), bad flag values (exit 2, one line naming the flag), and
 * `rollout init`. The real CLI against the tests' Temporal server; trials on the `local` environment (host
 * processes: containers add nothing here).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { parse } from 'yaml';

import type { ResolvedJob } from '../../src/job/load';
import { loadJobFile } from '../../src/job/load';
import { ENVIRONMENT_TYPES } from '../../src/environments/registry';
import { runCli, workspace } from '../support/cli';
import { REPO_ROOT, testTemporal } from '../support/temporal';

let dir: string;

async function writeTask(name: string, instruction: string | Buffer = 'Write ok to answer.txt.'): Promise<void> {
  const task = path.join(dir, 'tasks', name);
  for (const sub of ['tests', 'solution']) await mkdir(path.join(task, sub), { recursive: true });
  await writeFile(path.join(task, 'task.toml'), 'version = "1.0"\n[agent]\ntimeout_sec = 30.0\n');
  await writeFile(path.join(task, 'instruction.md'), instruction);
  await writeFile(path.join(task, 'solution', 'solve.sh'), 'echo ok > answer.txt\n');
  await writeFile(
    path.join(task, 'tests', 'test.sh'),
    'if [ "$(cat answer.txt)" = ok ]; then echo 1; else echo 0; fi > "$ROLLOUT_LOGS_DIR/verifier/reward.txt"\n'
  );
}

/** The YAML `--print-config` printed, without its comment lines. */
function body(stdout: string): string {
  return stdout
    .split('\n')
    .filter((line) => !line.startsWith('#'))
    .join('\n');
}

async function config(jobDir: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(path.join(dir, 'jobs', jobDir, 'config.json'), 'utf8')) as Record<string, unknown>;
}

const ONE_LINER = ['run', '-p', 'tasks', '-t', 'a*', '-e', 'local', '-a', 'oracle', '-k', '2', '--jobs-dir', 'jobs'];

describe('rollout run with flags', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    dir = await workspace();
    await writeTask('alpha');
    await writeTask('beta');
    // Not selected by the one-liner: it must not block it.
    await writeTask('zz-latin1', Buffer.from('Write caf\xe9 to a file.', 'latin1'));
    await writeFile(
      path.join(dir, 'job.yaml'),
      [
        'name: from-file',
        'n_attempts: 1',
        'environment: { type: docker, delete: false }',
        'agents:',
        '  - name: echo',
        '    execute: echo ok > answer.txt',
        '    env: { KEEP: kept }',
        '  - name: oracle',
        'datasets:',
        '  - path: tasks',
        '    task_names: [beta]',
        '',
      ].join('\n')
    );
  });

  it('bad flag values: exit 2, one line naming each flag, nothing started or written', async () => {
    const run = await runCli(
      ['run', '-p', 'tasks', '-n', 'eight', '-k', '0', '-e', 'nimbus', '--ae', 'NOEQUALS', '-a', 'claude-kode'],
      { cwd: dir }
    );
    assert.equal(run.code, 2, run.stderr);
    const lines = run.stderr.trim().split('\n');
    assert.deepEqual(lines, [
      'error: --n-concurrent: expected a positive whole number, got "eight"',
      'error: --n-attempts: expected a positive whole number, got "0"',
      `error: --env: unknown environment type "nimbus": expected one of ${ENVIRONMENT_TYPES.join(', ')}`,
      'error: --ae: "NOEQUALS" is not KEY=VALUE (KEY: letters, digits and _)',
      'error: --agent: unknown agent "claude-kode": `rollout agents list` lists the built-in agents (and oracle)',
    ]);
    assert.equal(existsSync(path.join(dir, 'jobs')), false);
    const timeout = await runCli(['run', 'job.yaml', '--timeout-multiplier', '-1'], { cwd: dir });
    assert.equal(timeout.code, 2);
    assert.equal(timeout.stderr.trim(), 'error: --timeout-multiplier: expected a positive number, got "-1"');
    const nothing = await runCli(['run'], { cwd: dir });
    assert.equal(nothing.code, 2);
    assert.match(nothing.stderr.trim(), /^error: rollout run: give a job file, or a dataset \(-d/);
  });

  it('-d names a registry dataset; one the registry lacks is one line naming --dataset', async () => {
    await writeFile(path.join(dir, 'registry.json'), JSON.stringify([{ name: 'bench', version: '1.0', tasks: [] }]));
    const printed = await runCli(['run', '-d', 'bench@1.0', '--registry', 'registry.json', '--print-config'], {
      cwd: dir,
    });
    assert.equal(printed.code, 0, printed.stderr);
    const job = parse(printed.stdout) as ResolvedJob;
    assert.deepEqual(job.datasets, [
      { registry: { path: path.join(dir, 'registry.json') }, name: 'bench', version: '1.0' },
    ]);
    assert.deepEqual(job.agents, [{ name: 'oracle', env: {}, install_timeout_sec: 900 }]);
    const missing = await runCli(['run', '-d', 'bench@2.0', '--registry', 'registry.json', '-e', 'local'], {
      cwd: dir,
    });
    assert.equal(missing.code, 2, missing.stderr);
    assert.equal(missing.stderr.trim(), 'error: --dataset: dataset "bench" has no version "2.0"; it has: 1.0');
  });

  it('flags override the job file: fields set, agents replaced by -a, env added by --ae, selection by -t/-x', async () => {
    const run = await runCli(
      [
        'run',
        'job.yaml',
        '-k',
        '3',
        '-n',
        '5',
        '-e',
        'local',
        '-x',
        'zz-*',
        '-t',
        '*',
        '--ae',
        'EXTRA=1',
        '--print-config',
      ],
      { cwd: dir }
    );
    assert.equal(run.code, 0, run.stderr);
    const job = parse(run.stdout) as ResolvedJob;
    assert.equal(job.name, 'from-file');
    assert.equal(job.n_attempts, 3);
    assert.equal(job.n_concurrent_trials, 5);
    assert.equal(job.environment.type, 'local');
    assert.equal(job.environment.delete, false, "the file's other environment keys stay");
    assert.deepEqual(
      job.agents.map((agent) => [agent.name, agent.env]),
      [
        ['echo', { KEEP: 'kept', EXTRA: '1' }],
        ['oracle', { EXTRA: '1' }],
      ]
    );
    assert.deepEqual(job.datasets, [
      { path: path.join(dir, 'tasks'), task_names: ['*'], exclude_task_names: ['zz-*'] },
    ]);

    const agent = await runCli(['run', 'job.yaml', '-a', 'claude-code', '-m', 'm1', '-m', 'm2', '--print-config'], {
      cwd: dir,
    });
    assert.equal(agent.code, 0, agent.stderr);
    const agents = (parse(agent.stdout) as ResolvedJob).agents;
    assert.deepEqual(
      agents.map((a) => [a.name, a.agent, a.model, a.env]),
      ['m1', 'm2'].map((model) => [
        `claude-code-${model}`,
        'claude-code',
        model,
        {
          ANTHROPIC_API_KEY: '${ANTHROPIC_API_KEY}',
          ANTHROPIC_BASE_URL: '${ANTHROPIC_BASE_URL:-https://api.anthropic.com}',
        },
      ])
    );
  });

  it('a one-liner runs; its --print-config, saved, loads to the same job and runs it identically', async () => {
    const run = await runCli([...ONE_LINER, '--job-name', 'one-liner'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^oracle\s+tasks\s+reward\s+2\s+2\s+0\s+1\s/m);

    const printed = await runCli([...ONE_LINER, '--job-name', 'saved', '--print-config'], { cwd: dir });
    assert.equal(printed.code, 0, printed.stderr);
    assert.equal(existsSync(path.join(dir, 'jobs', 'saved')), false, '--print-config runs nothing');
    await writeFile(path.join(dir, 'saved.yaml'), printed.stdout);
    const again = await runCli(['run', 'saved.yaml', '--print-config'], { cwd: dir });
    assert.equal(body(again.stdout), body(printed.stdout));
    const { file: _file, ...loaded } = await loadJobFile(path.join(dir, 'saved.yaml'));
    assert.deepEqual(loaded, parse(printed.stdout));

    const saved = await runCli(['run', 'saved.yaml'], { cwd: dir });
    assert.equal(saved.code, 0, saved.stderr);
    assert.deepEqual({ ...(await config('saved')), name: 'one-liner' }, await config('one-liner'));
    for (const job of ['one-liner', 'saved']) {
      const result = JSON.parse(await readFile(path.join(dir, 'jobs', job, 'result.json'), 'utf8')) as {
        n_total_trials: number;
      };
      assert.equal(result.n_total_trials, 2, `${job}: alpha × 2 attempts`);
    }
  });

  it('--print-config masks literal secret values (and the command line it repeats); --ae warns of them; results redact them', async () => {
    const literal = 'sk-ant-literal-SECRET-777';
    const flags = ['--ae', `ANTHROPIC_API_KEY=${literal}`, '--ae', 'MY_TOKEN=${MY_TOKEN}', '--ae', 'EXTRA=1'];
    const printed = await runCli([...ONE_LINER, ...flags, '--print-config'], { cwd: dir });
    assert.equal(printed.code, 0, printed.stderr);
    assert.ok(!printed.stdout.includes(literal), printed.stdout);
    assert.match(
      printed.stdout,
      /^# rollout run .* --ae ANTHROPIC_API_KEY=\[REDACTED\] --ae MY_TOKEN=\$\{MY_TOKEN\} /m
    );
    assert.deepEqual((parse(printed.stdout) as ResolvedJob).agents[0]!.env, {
      ANTHROPIC_API_KEY: '[REDACTED]',
      MY_TOKEN: '${MY_TOKEN}',
      EXTRA: '1',
    });
    assert.match(
      printed.stderr,
      /^warning: --ae ANTHROPIC_API_KEY: a literal secret value is kept in the job's config\.json/m
    );
    assert.doesNotMatch(printed.stderr, /--ae (MY_TOKEN|EXTRA)/, 'a ${VAR} or a name that is no secret: no warning');
    assert.ok(!printed.stderr.includes(literal));

    // Run: an agent that prints its env gets the literal value redacted in the collected logs.
    await writeFile(
      path.join(dir, 'leaky.yaml'),
      [
        'name: leaky',
        'jobs_dir: jobs',
        'environment: { type: local }',
        'agents:',
        '  - name: leaky',
        '    execute: echo "token=$SERVICE_TOKEN" > "$ROLLOUT_LOGS_DIR/agent/leak.txt"; echo ok > answer.txt',
        `    env: { SERVICE_TOKEN: ${literal} }`,
        'datasets:',
        '  - path: tasks',
        '    task_names: [alpha]',
        '',
      ].join('\n')
    );
    const run = await runCli(['run', 'leaky.yaml'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    const leak = await readFile(path.join(dir, 'jobs', 'leaky', 'alpha__leaky__1', 'agent', 'leak.txt'), 'utf8');
    assert.equal(leak, 'token=[REDACTED]\n');
  });

  it('a one-liner without --job-name is named by its start time, as Harbor names jobs', async () => {
    const run = await runCli(['run', '-p', 'tasks', '--print-config'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    assert.match((parse(run.stdout) as ResolvedJob).name, /^\d{4}-\d\d-\d\d__\d\d-\d\d-\d\d$/);
  });
});

describe('rollout init', () => {
  before(async () => {
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
  });

  it('writes dir/job.yaml, commented, that loads as a job; refuses to overwrite it without --force', async () => {
    const run = await runCli(['init', 'evals', '-a', 'codex', '-m', 'gpt-5', '-d', 'terminal-bench@2.0'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    const file = path.join(dir, 'evals', 'job.yaml');
    const text = await readFile(file, 'utf8');
    assert.match(text, /^# A Rollout job\./);
    assert.match(text, /OPENAI_API_KEY: "\$\{OPENAI_API_KEY\}"/);
    // The template's environment comment names every built-in provider (cloud ones included).
    const typeLine = text.split('\n').find((line) => line.startsWith('  type: '));
    for (const type of ENVIRONMENT_TYPES) assert.match(typeLine ?? '', new RegExp(`\\b${type}\\b`), type);
    const job = await loadJobFile(file);
    assert.equal(job.name, 'evals');
    assert.deepEqual(
      job.agents.map((agent) => [agent.name, agent.model]),
      [['codex', 'gpt-5']]
    );
    assert.deepEqual(job.datasets, [{ name: 'terminal-bench', version: '2.0' }]);

    const again = await runCli(['init', 'evals', '-a', 'oracle', '-p', 'tasks'], { cwd: dir });
    assert.equal(again.code, 2);
    assert.equal(again.stderr.trim(), `error: ${file}: already exists (--force overwrites it)`);
    assert.equal(await readFile(file, 'utf8'), text, 'left as it was');

    const forced = await runCli(['init', 'evals', '-p', 'tasks', '--force'], { cwd: dir });
    assert.equal(forced.code, 0, forced.stderr);
    const local = await loadJobFile(file);
    assert.deepEqual(local.datasets, [{ path: path.join(dir, 'tasks') }]);
    assert.deepEqual(
      local.agents.map((agent) => agent.name),
      ['oracle']
    );
  });

  it('without a folder, writes ./job.yaml; an unknown dataset or agent is one line naming the flag', async () => {
    const bad = await runCli(['init', '-d', 'no-such-bench@1', '-a', 'nobody'], { cwd: dir });
    assert.equal(bad.code, 2);
    const lines = bad.stderr.trim().split('\n');
    assert.equal(lines.length, 2, bad.stderr);
    assert.match(lines[0]!, /^error: --agent: unknown agent "nobody"/);
    assert.match(lines[1]!, /^error: --dataset: no dataset "no-such-bench" in the registry; it has: .*terminal-bench/);
    assert.equal(existsSync(path.join(dir, 'job.yaml')), false);
    const run = await runCli(['init', '-d', 'hello-world@1.0'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual((await loadJobFile(path.join(dir, 'job.yaml'))).datasets, [
      { name: 'hello-world', version: '1.0' },
    ]);
  });

  it('on a terminal, asks for what the flags left open (Enter takes the default)', async () => {
    // `script` gives the CLI a terminal; the answers are typed into it.
    const command = `node ${path.join(REPO_ROOT, 'bin', 'rollout.js')} init asked`;
    const run = spawnSync('script', ['-qec', command, '/dev/null'], {
      cwd: dir,
      input: 'tasks\nclaude-code\n\n',
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
    assert.match(run.stdout, /dataset \(name@version/);
    const job = await loadJobFile(path.join(dir, 'asked', 'job.yaml'));
    assert.deepEqual(job.datasets, [{ path: path.join(dir, 'tasks') }]);
    assert.deepEqual(
      job.agents.map((agent) => [agent.name, agent.model]),
      [['claude-code', undefined]]
    );
  });
});
