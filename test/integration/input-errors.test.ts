/**
 * Bad input fails before anything starts: one line per problem naming the file and the field, exit code 2, and
 * nothing written. Runs the real CLI.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { writeSignedJobFile } from '../../src/storage/job-folder';
import { runCli, workspace } from '../support/cli';

let dir: string;

async function write(file: string, content: string): Promise<void> {
  await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
  await writeFile(path.join(dir, file), content);
}

const JOB = ['agents:', '  - name: oracle', 'datasets:', '  - path: tasks', ''].join('\n');

async function writeTask(name: string, files: Record<string, string | Buffer> = {}): Promise<void> {
  const all = {
    'task.toml': 'version = "1.0"\n',
    'instruction.md': 'x',
    'tests/test.sh': 'true',
    'environment/Dockerfile': 'FROM debian:bookworm-slim',
    ...files,
  };
  for (const [file, content] of Object.entries(all)) {
    await mkdir(path.dirname(path.join(dir, name, file)), { recursive: true });
    await writeFile(path.join(dir, name, file), content);
  }
}

async function expectInputError(job: string, patterns: RegExp[]): Promise<string> {
  await write('job.yaml', job);
  const run = await runCli(['job.yaml'], { cwd: dir, timeoutMs: 60_000 });
  assert.equal(run.code, 2, `exit code; stderr: ${run.stderr}`);
  for (const pattern of patterns) assert.match(run.stderr, pattern);
  for (const line of run.stderr.trim().split('\n')) assert.match(line, /^error: \//, `one line per problem: ${line}`);
  assert.equal(existsSync(path.join(dir, 'jobs')), false, 'nothing written');
  return run.stderr;
}

describe('invalid input', () => {
  before(async () => {
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
  });

  it('reports unknown keys, wrong types and bad quantities in job.yaml with their field', async () => {
    await expectInputError(
      ['n_attempts: two', 'colour: blue', 'environment:', '  type: docker', '  override_memory: 2 gigs', JOB].join(
        '\n'
      ),
      [
        /job\.yaml: n_attempts: /,
        /job\.yaml: colour: unknown key/,
        /job\.yaml: environment\.override_memory: .*quantity/,
      ]
    );
  });

  it('lists the first 20 of 200,000 unknown keys in job.yaml and counts the rest', async () => {
    const keys = Array.from({ length: 200_000 }, (_, i) => `unknown_${i}: ${i}`);
    const stderr = await expectInputError([...keys, JOB].join('\n'), [
      /job\.yaml: unknown_0: unknown key/,
      /job\.yaml: unknown_19: unknown key/,
      /job\.yaml: and 199980 more unknown keys$/m,
    ]);
    assert.doesNotMatch(stderr, /unknown_20:/);
    assert.equal(stderr.trim().split('\n').length, 21, stderr.slice(0, 2000));
  });

  it('reports an unknown agent and an unknown environment type', async () => {
    await expectInputError(
      ['environment:', '  type: vmware', 'agents:', '  - name: claude-kode', 'datasets:', '  - path: tasks', ''].join(
        '\n'
      ),
      [/environment\.type: unknown environment type/, /agents\.0\.execute: unknown agent "claude-kode"/]
    );
  });

  it('reports an unknown built-in agent and an option the agent does not take, listing the valid values', async () => {
    const stderr = await expectInputError(
      [
        'agents:',
        '  - name: haiku',
        '    agent: claude-kode',
        '  - name: claude-code',
        '    kwargs: { max_turns: 3, colour: blue }',
        '  - name: terminus',
        '    kwargs: { max_turns: many }',
        'datasets:',
        '  - path: tasks',
        '',
      ].join('\n'),
      [
        /agents\.0\.agent: unknown agent "claude-kode": built-in agents are \[oracle, claude-code, codex, .*terminus\]/,
        /agents\.1\.kwargs\.colour: unknown option of claude-code: valid options are \[max_turns, permission_mode\]/,
        /agents\.2\.kwargs\.max_turns: /,
      ]
    );
    assert.doesNotMatch(stderr, /max_turns: unknown/);
  });

  it('reports a malformed task.toml, a bad task quantity and a missing tests/test.sh, naming each file', async () => {
    await write('tasks/broken-toml/task.toml', 'version = "1.0"\n[agent\ntimeout_sec = 1\n');
    await write('tasks/broken-toml/instruction.md', 'x');
    await write('tasks/broken-toml/tests/test.sh', 'true');
    await write('tasks/broken-toml/environment/Dockerfile', 'FROM debian:bookworm-slim');
    await write('tasks/bad-memory/task.toml', 'version = "1.0"\n[environment]\nmemory = "lots"\n');
    await write('tasks/bad-memory/instruction.md', 'x');
    await write('tasks/bad-memory/tests/test.sh', 'true');
    await write('tasks/bad-memory/environment/Dockerfile', 'FROM debian:bookworm-slim');
    await write('tasks/no-tests/task.toml', 'version = "1.0"\n');
    await write('tasks/no-tests/instruction.md', 'x');
    await write('tasks/no-tests/environment/Dockerfile', 'FROM debian:bookworm-slim');
    await write('tasks/no-dockerfile/task.toml', 'version = "1.0"\n');
    await write('tasks/no-dockerfile/instruction.md', 'x');
    await write('tasks/no-dockerfile/tests/test.sh', 'true');
    try {
      await expectInputError(JOB, [
        /broken-toml\/task\.toml: invalid TOML/,
        /bad-memory\/task\.toml: environment\.memory: not a quantity/,
        /no-tests\/tests\/test\.sh: missing/,
        /no-dockerfile\/environment\/Dockerfile: missing/,
      ]);
    } finally {
      for (const task of ['broken-toml', 'bad-memory', 'no-tests', 'no-dockerfile']) {
        await rm(path.join(dir, 'tasks', task), { recursive: true, force: true });
      }
    }
  });

  it('refuses an instruction.md that is a FIFO (or any non-regular file) with one line, without hanging', async () => {
    await writeTask('tasks/fifo', { 'instruction.md': 'x' });
    await rm(path.join(dir, 'tasks/fifo/instruction.md'));
    execFileSync('mkfifo', [path.join(dir, 'tasks/fifo/instruction.md')]);
    try {
      await expectInputError(JOB, [/fifo\/instruction\.md: not a regular file$/m]);
    } finally {
      await rm(path.join(dir, 'tasks', 'fifo'), { recursive: true, force: true });
    }
  });

  it('refuses bytes that are not UTF-8 in task.toml and instruction.md, naming the file and the offset', async () => {
    await writeTask('tasks/latin1-toml', { 'task.toml': Buffer.from('version = "1.0"\n# caf\xe9\n', 'latin1') });
    await writeTask('tasks/latin1-md', { 'instruction.md': Buffer.from('Write caf\xe9 to a file.', 'latin1') });
    try {
      await expectInputError(JOB, [
        /latin1-toml\/task\.toml: not valid UTF-8 \(first bad byte at offset 21\)/,
        /latin1-md\/instruction\.md: not valid UTF-8 \(first bad byte at offset 9\)/,
      ]);
    } finally {
      for (const task of ['latin1-toml', 'latin1-md']) await rm(path.join(dir, 'tasks', task), { recursive: true });
    }
  });

  it('follows links to task folders and reports symlink loops and dangling links', async () => {
    await writeTask('elsewhere/linked-task', { 'task.toml': 'version = "1.0"\n[agent]\ntimeout_sec = "soon"\n' });
    await symlink(path.join(dir, 'elsewhere', 'linked-task'), path.join(dir, 'tasks', 'linked-task'));
    await symlink('.', path.join(dir, 'tasks', 'self'));
    await symlink('ping', path.join(dir, 'tasks', 'pong'));
    await symlink('pong', path.join(dir, 'tasks', 'ping'));
    await symlink('nowhere', path.join(dir, 'tasks', 'dangling'));
    try {
      await expectInputError(JOB, [
        /tasks\/linked-task\/task\.toml: agent\.timeout_sec: /,
        /tasks\/self: symlink loop/,
        /tasks\/ping: symlink loop$/m,
        /tasks\/pong: symlink loop$/m,
        /tasks\/dangling: broken symlink \(ENOENT\)/,
      ]);
    } finally {
      for (const link of ['linked-task', 'self', 'ping', 'pong', 'dangling']) await rm(path.join(dir, 'tasks', link));
      await rm(path.join(dir, 'elsewhere'), { recursive: true });
    }
  });

  it('names the job file, not "job", in a registry dataset error', async () => {
    await write('registry.json', JSON.stringify([{ name: 'y', version: '1', tasks: [] }]));
    await expectInputError(
      ['agents:', '  - name: oracle', 'datasets:', '  - registry: { path: registry.json }', '    name: x', ''].join(
        '\n'
      ),
      [/^error: \/.*\/job\.yaml: datasets\.0\.name: no dataset "x" in the registry; it has: y$/m]
    );
  });

  it('reports a jobs_dir that is a file in one line', async () => {
    await write('not-a-folder', 'x');
    await expectInputError(`jobs_dir: not-a-folder\n${JOB}`, [
      /job\.yaml: jobs_dir: \S*not-a-folder is a file, not a folder$/m,
    ]);
  });

  it("reports the tasks' problems along with job.yaml's, all at once", async () => {
    await writeTask('both/bad-task', { 'task.toml': 'version = "1.0"\n[agent]\ntimeout_sec = "soon"\n' });
    await expectInputError(
      ['colour: blue', 'agents:', '  - name: oracle', 'datasets:', '  - path: both', ''].join('\n'),
      [/job\.yaml: colour: unknown key/, /bad-task\/task\.toml: agent\.timeout_sec: /]
    );
  });

  it('reports a missing job file and a missing dataset folder', async () => {
    const missing = await runCli(['nope.yaml'], { cwd: dir });
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^error: .*nope\.yaml: no such file$/m);
    await expectInputError(['agents:', '  - name: oracle', 'datasets:', '  - path: elsewhere', ''].join('\n'), [
      /elsewhere: dataset path is not a folder/,
    ]);
  });

  it('refuses to reuse a job folder that holds a different configuration, keeping what it holds', async () => {
    // Signed as Rollout writes it: an unsigned one is refused before it is compared (security.data.test.ts).
    await writeSignedJobFile(
      path.join(dir, 'jobs', 'same'),
      'config.json',
      JSON.stringify({ name: 'same', agents: [] })
    );
    await write('job.yaml', `name: same\n${JOB}`);
    const run = await runCli(['job.yaml'], { cwd: dir });
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /jobs\/same\/config\.json: job "same" already exists with a different configuration/);
    assert.ok(existsSync(path.join(dir, 'jobs', 'same', 'config.json')));
    await rm(path.join(dir, 'jobs'), { recursive: true });
  });
  it("validates a provider's own settings: unknown to its type, or required by it", async () => {
    await expectInputError(['environment:', '  type: docker', '  namespace: evals', JOB].join('\n'), [
      /job\.yaml: environment\.namespace: unknown key/,
    ]);
    await expectInputError(['environment:', '  type: kubernetes', '  image_registry: registry.test', JOB].join('\n'), [
      /job\.yaml: environment\.namespace: required for environment type kubernetes/,
    ]);
  });

  it("refuses a task over the job's caps (resources, steps, timeouts) and job overrides over them, before any trial", async () => {
    await writeTask('greedy', {
      'task.toml': [
        'version = "1.0"',
        '[environment]',
        'memory = "8G"',
        'cpus = 4',
        'storage_mb = 50000',
        '[agent]',
        'timeout_sec = 7200',
        '[[steps]]',
        'name = "one"',
        '[[steps]]',
        'name = "two"',
        '',
      ].join('\n'),
      'steps/one/instruction.md': 'x',
      'steps/two/instruction.md': 'y',
    });
    const caps = [
      '  max_memory: 4G',
      '  max_cpus: 2',
      '  max_storage: 20G',
      '  max_steps: 1',
      '  max_timeout_sec: 3600',
    ];
    const job = [
      'environment:',
      '  type: docker',
      ...caps,
      'agents:',
      '  - name: oracle',
      'datasets:',
      '  - path: greedy',
    ];
    const stderr = await expectInputError(job.join('\n'), [
      /greedy\/task\.toml: environment\.memory: 8 GiB of memory is over the job's cap \(job\.yaml environment\.max_memory = 3\.7 GiB/,
      /greedy\/task\.toml: environment\.cpus: 4 of CPUs is over the job's cap \(job\.yaml environment\.max_cpus = 2\)/,
      /greedy\/task\.toml: environment\.storage_mb: 48\.8 GiB of storage is over/,
      /greedy\/task\.toml: steps: 2 steps are over the job's cap \(job\.yaml environment\.max_steps = 1\)/,
      /greedy\/task\.toml: agent\.timeout_sec: 7200 s is over the job's cap \(job\.yaml environment\.max_timeout_sec = 3600\)/,
    ]);
    assert.equal(stderr.trim().split('\n').length, 5, stderr);

    // The job's overrides replace the task's values: then only they are checked, against the same caps.
    const overridden = [
      'environment:',
      '  type: docker',
      '  max_memory: 4G',
      '  override_memory: 6G',
      '  override_cpus: 1',
    ];
    const overStderr = await expectInputError(
      [...overridden, '  pids_limit: 100000', 'agents:', '  - name: oracle', 'datasets:', '  - path: tasks', ''].join(
        '\n'
      ),
      [
        /job\.yaml: environment\.override_memory: 5\.6 GiB of memory is over the job's cap \(job\.yaml environment\.max_memory = 3\.7 GiB/,
        /job\.yaml: environment\.pids_limit: 100000 of pids is over the job's cap \(job\.yaml environment\.max_pids = 32768\)/,
      ]
    );
    assert.equal(overStderr.trim().split('\n').length, 2, overStderr);

    // A timeout_multiplier that scales a timeout past what a timer can wait (24.8 days) is the job's mistake.
    await expectInputError(['timeout_multiplier: 100000', JOB].join('\n'), [
      /job\.yaml: timeout_multiplier: trial hello-world__oracle__1's \w+ timeout would be \d+ s, over the 2147483 s a timer can wait/,
    ]);
    await expectInputError(['environment:', '  max_timeout_sec: 1e9', JOB].join('\n'), [
      /job\.yaml: environment\.max_timeout_sec: /,
    ]);
    await rm(path.join(dir, 'greedy'), { recursive: true, force: true });
  });

  it("refuses a task over the caps of the worker it would run on: a job's own caps cannot raise them", async () => {
    await writeTask('big', {
      'task.toml': 'version = "1.0"\n[environment]\nmemory = "2Gi"\n',
      'solution/solve.sh': 'true',
    });
    const workerYaml = path.join(dir, 'worker.yaml');
    await writeFile(workerYaml, 'max_memory: 1Gi\n');
    const job = ['environment:', '  type: docker', '  max_memory: 64Gi', 'agents:', '  - name: oracle'];
    await write('job.yaml', [...job, 'datasets:', '  - path: big', ''].join('\n'));
    const run = await runCli(['job.yaml'], { cwd: dir, timeoutMs: 60_000, env: { ROLLOUT_WORKER_CONFIG: workerYaml } });
    assert.equal(run.code, 2, `exit code; stderr: ${run.stderr}`);
    assert.equal(
      run.stderr.trim(),
      `error: ${path.join(dir, 'big', 'task.toml')}: environment.memory: 2 GiB of memory is over this worker's cap (${workerYaml} max_memory = 1 GiB)`
    );
    assert.equal(existsSync(path.join(dir, 'jobs')), false, 'nothing written');
    await rm(path.join(dir, 'big'), { recursive: true, force: true });
  });

  it('refuses a task that needs a capability its provider lacks, naming the task and the capability', async () => {
    await writeTask('gpu-task', { 'task.toml': 'version = "1.0"\n[environment]\ngpus = 1\n' });
    const job = ['environment:', '  type: local', 'agents:', '  - name: oracle', 'datasets:', '  - path: gpu-task', ''];
    const stderr = await expectInputError(job.join('\n'), [
      /gpu-task\/task\.toml: needs environment\.gpus = 1 \(capability gpus\), which the local environment lacks/,
    ]);
    assert.equal(stderr.trim().split('\n').length, 1, stderr);
  });

  it('a provider checks its own configuration first: a missing kubeconfig is one line naming it and the setting', async () => {
    const job = ['environment:', '  type: kubernetes', '  namespace: evals', '  image_registry: registry.test', JOB];
    await write('job.yaml', job.join('\n'));
    const kubeconfig = path.join(dir, 'no-such-kubeconfig');
    const run = await runCli(['job.yaml'], { cwd: dir, timeoutMs: 60_000, env: { KUBECONFIG: kubeconfig } });
    assert.equal(run.code, 2, `exit code; stderr: ${run.stderr}`);
    assert.equal(
      run.stderr.trim(),
      `error: kubernetes: cannot read the kubeconfig ${kubeconfig} (KUBECONFIG): no such file`
    );
    assert.equal(existsSync(path.join(dir, 'jobs')), false, 'nothing written');
  });
});
