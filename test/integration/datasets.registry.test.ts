/**
 * Registry datasets end to end through the real CLI: a real git server on loopback (git daemon) holding a repository
 * of tasks with several commits, a registry.json served over loopback HTTP and read from a file, pinned, short and
 * HEAD commits, selection globs and sampling, a re-run from the cache with the git server stopped, a cut-short
 * download never used, and bad registry input. Trials run on the `local` environment: containers add nothing here.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ResolvedJob } from '../../src/job/load';
import { selectTasks } from '../../src/job/select';
import type { RegistryDatasetConfig } from '../../src/contracts/job-config';
import { cachedTaskDir } from '../../src/registry/git-cache';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, startCli } from '../support/cli';
import type { GitServer } from '../support/git-server';
import { freePort, git, serveFile, startGitServer } from '../support/git-server';
import { testTemporal } from '../support/temporal';

let root: string;
let cacheHome: string;
let gitPort: number;
let server: GitServer;
let http: { url: string; server: Server };
const commits: string[] = [];
let registry: unknown[] = [];
const suffix = randomBytes(3).toString('hex');
const LFS_POINTER = 'version https://git-lfs.github.com/spec/v1';
const hasGitLfs = spawnSync('git', ['lfs', 'version']).status === 0;

/** A task whose verifier reports the reward written into this commit's test.sh: the reward says which commit ran. */
async function writeTask(repo: string, name: string, reward: string): Promise<void> {
  const dir = path.join(repo, 'tasks', name);
  await mkdir(path.join(dir, 'tests'), { recursive: true });
  await writeFile(path.join(dir, 'task.toml'), 'version = "1.0"\n[agent]\ntimeout_sec = 30.0\n');
  await writeFile(path.join(dir, 'instruction.md'), `Task ${name}.`);
  await writeFile(path.join(dir, 'tests', 'test.sh'), `echo ${reward} > "$ROLLOUT_LOGS_DIR/verifier/reward.txt"\n`);
}

function commitAll(repo: string, message: string): string {
  git(repo, 'add', '-A');
  git(repo, 'commit', '-q', '-m', message);
  return git(repo, 'rev-parse', 'HEAD');
}

function env(extra: Record<string, string> = {}) {
  return { XDG_CACHE_HOME: cacheHome, ...extra };
}

/** A job over one registry dataset entry, run with a do-nothing custom agent on the local environment. */
async function runJob(
  name: string,
  dataset: Record<string, unknown>,
  extraEnv: Record<string, string> = {},
  cliArgs: string[] = []
) {
  const dir = path.join(root, name);
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'registry.json'), JSON.stringify(registry));
  await writeFile(
    path.join(dir, 'job.json'),
    JSON.stringify({
      name,
      jobs_dir: path.join(dir, 'jobs'),
      environment: { type: 'local' },
      agents: [{ name: 'noop', execute: 'true' }],
      datasets: [dataset],
    })
  );
  const run = await runCli(['job.json', ...cliArgs], { cwd: dir, env: env(extraEnv) });
  const jobDir = path.join(dir, 'jobs', name);
  const rewards = async () => {
    const trials = (await readdir(jobDir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
    const entries = await Promise.all(
      trials.sort().map(async (trial) => {
        const result = JSON.parse(await readFile(path.join(jobDir, trial, 'result.json'), 'utf8')) as TrialResult;
        return [trial, result.rewards?.reward ?? null] as const;
      })
    );
    return Object.fromEntries(entries);
  };
  const config = async () => JSON.parse(await readFile(path.join(jobDir, 'config.json'), 'utf8')) as ResolvedJob;
  return { run, rewards, config, dir };
}

const pins = (config: ResolvedJob) => (config.datasets[0] as RegistryDatasetConfig).pinned_tasks ?? [];

describe('registry datasets from a git server', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    root = await mkdtemp(path.join(tmpdir(), 'rollout-registry-'));
    cacheHome = path.join(root, 'cache');
    const source = path.join(root, 'source');
    await mkdir(source);
    git(source, 'init', '-q', '-b', 'main');
    for (const name of ['task-a', 'task-b', 'other-c', 'lfs-d', 'latin1-e']) await writeTask(source, name, '0.25');
    // A broken task (its instruction is not UTF-8): only a job that selects it may be refused for it.
    await writeFile(path.join(source, 'tasks', 'latin1-e', 'instruction.md'), Buffer.from('caf\xe9', 'latin1'));
    // A file kept in Git LFS: the repository holds its pointer.
    await writeFile(
      path.join(source, 'tasks', 'lfs-d', 'tests', 'data.bin'),
      `${LFS_POINTER}\noid sha256:${'0'.repeat(64)}\nsize 1048576\n`
    );
    commits.push(commitAll(source, 'first'));
    await writeTask(source, 'task-a', '0.75');
    commits.push(commitAll(source, 'second'));
    const served = path.join(root, 'served');
    await mkdir(served);
    git(root, 'clone', '-q', '--bare', source, path.join(served, 'tasks.git'));
    git(path.join(served, 'tasks.git'), 'config', 'uploadpack.allowFilter', 'true');
    gitPort = await freePort();
    server = await startGitServer(served, gitPort);
    const withGit = server.url('tasks.git');
    const withoutGit = server.url('tasks');
    const entry = (name: string, commit: string | undefined, url = withGit, taskPath = `tasks/${name}`) => ({
      name,
      git_url: url,
      ...(commit === undefined ? {} : { git_commit_id: commit }),
      path: taskPath,
    });
    const first = commits[0] as string;
    registry = [
      {
        name: 'bench',
        version: '1.0',
        description: 'three tasks at the first commit',
        tasks: ['task-a', 'task-b', 'other-c'].map((name) => entry(name, first)),
      },
      { name: 'bench', version: 'head', description: 'HEAD', tasks: [entry('task-a', 'HEAD', withoutGit)] },
      { name: 'bench', version: 'latest', description: 'no commit', tasks: [entry('task-a', undefined)] },
      { name: 'bench', version: 'short', description: 'short SHA', tasks: [entry('task-a', first.slice(0, 7))] },
      {
        name: 'renamed',
        version: '1.0',
        description: 'named by the entry, not the folder',
        tasks: [entry('alpha', first, withGit, 'tasks/task-a')],
      },
      {
        name: 'mixed',
        version: '1.0',
        description: 'a good task and a broken one',
        tasks: ['task-a', 'latin1-e'].map((name) => entry(name, first)),
      },
      {
        name: 'broken',
        version: 'missing-path',
        description: 'a path absent at that commit',
        tasks: [entry('ghost', first, withGit, 'tasks/ghost')],
      },
      {
        name: 'broken',
        version: 'lfs',
        description: 'a task file in Git LFS',
        tasks: [entry('lfs-d', first)],
      },
      {
        name: 'broken',
        version: 'unreachable',
        description: 'nobody listens',
        tasks: [entry('lost', first, `git://127.0.0.1:${await freePort()}/nothing.git`)],
      },
    ];
    http = await serveFile(() => JSON.stringify(registry));
  });
  after(async () => {
    await server?.stop();
    await new Promise((resolve) => http?.server.close(resolve));
  });

  it('lists a registry served over HTTP: name, version, task count, description', async () => {
    const run = await runCli(['datasets', 'list', '--registry', http.url], { cwd: root, env: env() });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^bench\s+1\.0\s+3\s+three tasks at the first commit$/m);
    assert.match(run.stdout, /^broken\s+unreachable\s+1\s+nobody listens$/m);
  });

  it('lists the shipped registry of popular benchmarks by default', async () => {
    const run = await runCli(['datasets', 'list'], { cwd: root, env: env() });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^terminal-bench\s+2\.0\s+89\s/m);
    assert.match(run.stdout, /^swebench-verified\s+1\.0\s+500\s/m);
  });

  it('runs a pinned dataset by URL with include and exclude globs, named by registry entry', async () => {
    const job = await runJob(`pinned-${suffix}`, {
      registry: { url: http.url },
      name: 'bench',
      version: '1.0',
      task_names: ['task-*', 'other-*'],
      exclude_task_names: ['task-b'],
    });
    assert.equal(job.run.code, 0, job.run.stderr);
    assert.deepEqual(await job.rewards(), { 'other-c__noop__1': 0.25, 'task-a__noop__1': 0.25 });
    assert.match(job.run.stderr, /downloading 2 tasks from git:\/\/127\.0\.0\.1/);
    assert.deepEqual(
      pins(await job.config()).map((task) => [task.name, task.git_commit_id]),
      [
        ['task-a', commits[0]],
        ['other-c', commits[0]],
      ]
    );
  });

  it('names registry tasks by their entry, reading the registry from a file', async () => {
    const job = await runJob(`renamed-${suffix}`, { registry: { path: './registry.json' }, name: 'renamed' });
    assert.equal(job.run.code, 0, job.run.stderr);
    assert.deepEqual(await job.rewards(), { alpha__noop__1: 0.25 });
  });

  it('a broken task the job does not select (task_names, or -t over the job file) never blocks it', async () => {
    const dataset = { registry: { url: http.url }, name: 'mixed', version: '1.0' };
    const named = await runJob(`mixed-named-${suffix}`, { ...dataset, task_names: ['task-a'] });
    assert.equal(named.run.code, 0, named.run.stderr);
    assert.deepEqual(await named.rewards(), { 'task-a__noop__1': 0.25 });
    assert.deepEqual(
      pins(await named.config()).map((task) => task.name),
      ['task-a']
    );
    const flagged = await runJob(`mixed-flag-${suffix}`, dataset, {}, ['-t', 'task-*']);
    assert.equal(flagged.run.code, 0, flagged.run.stderr);
    assert.deepEqual(await flagged.rewards(), { 'task-a__noop__1': 0.25 });
    const all = await runJob(`mixed-all-${suffix}`, dataset);
    assert.equal(all.run.code, 2, all.run.stderr);
    const errors = all.run.stderr.split('\n').filter((line) => line.startsWith('error:'));
    assert.equal(errors.length, 1, all.run.stderr);
    assert.match(errors[0]!, /latin1-e\/instruction\.md: not valid UTF-8 \(first bad byte at offset 3\)$/);
  });

  it('resolves a short SHA to the full commit', async () => {
    const job = await runJob(`short-${suffix}`, { registry: { url: http.url }, name: 'bench', version: 'short' });
    assert.equal(job.run.code, 0, job.run.stderr);
    assert.deepEqual(await job.rewards(), { 'task-a__noop__1': 0.25 });
    assert.equal(pins(await job.config())[0]?.git_commit_id, commits[0]);
  });

  it('resolves HEAD once, saves it in config.json, and re-runs from the cache with the git server stopped', async () => {
    const name = `head-${suffix}`;
    const dataset = { name: 'bench', version: 'head' };
    const first = await runJob(name, dataset, { ROLLOUT_REGISTRY_URL: http.url });
    assert.equal(first.run.code, 0, first.run.stderr);
    assert.deepEqual(await first.rewards(), { 'task-a__noop__1': 0.75 });
    assert.equal(pins(await first.config())[0]?.git_commit_id, commits[1]);

    // HEAD moves on, then the server goes away: the job's second run still uses the commit it resolved, from cache.
    const source = path.join(root, 'source');
    await writeTask(source, 'task-a', '0.5');
    commitAll(source, 'third');
    git(source, 'push', '-q', path.join(root, 'served', 'tasks.git'), 'main');
    await server.stop();
    try {
      // Without its result the trial runs again, so its reward shows which commit the second run used.
      await rm(path.join(first.dir, 'jobs', name, 'task-a__noop__1'), { recursive: true });
      const second = await runJob(name, dataset, { ROLLOUT_REGISTRY_URL: http.url });
      assert.equal(second.run.code, 0, second.run.stderr);
      assert.match(second.run.stderr, /1 tasks from the cache/);
      assert.deepEqual(await second.rewards(), { 'task-a__noop__1': 0.75 });
      assert.equal(pins(await second.config())[0]?.git_commit_id, commits[1]);
    } finally {
      server = await startGitServer(path.join(root, 'served'), gitPort);
    }
  });

  it('a worker on another host (another cache) fetches a registry task itself, then re-uses it offline', async () => {
    const otherCache = path.join(root, 'other-host-cache');
    const otherRoot = path.join(otherCache, 'rollout', 'tasks');
    // The only worker: trials go to it, while the CLI that plans the job (and downloads into its own cache) has none.
    const worker = startCli(['worker', '--env', 'local', '--host-id', `other-${suffix}`, '--max-trials', '2'], {
      cwd: root,
      env: { XDG_CACHE_HOME: otherCache },
    });
    try {
      const dataset = { registry: { url: http.url }, name: 'bench', version: '1.0', task_names: ['task-a', 'other-c'] };
      const first = await runJob(`other-host-${suffix}`, dataset, {}, ['--no-worker']);
      assert.equal(first.run.code, 0, first.run.stderr);
      assert.deepEqual(await first.rewards(), { 'other-c__noop__1': 0.25, 'task-a__noop__1': 0.25 });
      const jobDir = path.join(first.dir, 'jobs', `other-host-${suffix}`);
      for (const pin of pins(await first.config())) {
        // Planned from the submitter's cache; run from the worker's, which fetched it.
        const trial = path.join(jobDir, `${pin.name}__noop__1`);
        const result = JSON.parse(await readFile(path.join(trial, 'result.json'), 'utf8')) as TrialResult;
        assert.equal(result.task_dir, cachedTaskDir(pin, path.join(cacheHome, 'rollout', 'tasks')));
        assert.match(result.host ?? '', new RegExp(`@other-${suffix}`), 'run by the other host');
        assert.ok(existsSync(path.join(cachedTaskDir(pin, otherRoot), 'task.toml')), 'in the worker host cache');
        assert.match(await readFile(path.join(trial, 'trial.log'), 'utf8'), /into this host's cache/);
      }
      // The git server gone, both hosts use their caches.
      await server.stop();
      try {
        const second = await runJob(`other-host-again-${suffix}`, dataset, {}, ['--no-worker']);
        assert.equal(second.run.code, 0, second.run.stderr);
        assert.deepEqual(await second.rewards(), { 'other-c__noop__1': 0.25, 'task-a__noop__1': 0.25 });
        const log = await readFile(
          path.join(second.dir, 'jobs', `other-host-again-${suffix}`, 'task-a__noop__1', 'trial.log'),
          'utf8'
        );
        assert.doesNotMatch(log, /downloading/);
      } finally {
        server = await startGitServer(path.join(root, 'served'), gitPort);
      }
    } finally {
      worker.kill('SIGTERM');
      await worker.output;
    }
  });

  it('a task file kept in Git LFS: without git-lfs, one error line naming the dataset, task and file', async (t) => {
    if (hasGitLfs) return t.skip('git-lfs is installed here: the pointer is fetched instead');
    const job = await runJob(`lfs-${suffix}`, { registry: { url: http.url }, name: 'broken', version: 'lfs' });
    assert.equal(job.run.code, 3, job.run.stderr);
    const errors = job.run.stderr.split('\n').filter((line) => line.startsWith('error:'));
    assert.equal(errors.length, 1, job.run.stderr);
    assert.match(
      errors[0] ?? '',
      /broken@lfs: task lfs-d: git:\/\/127\.0\.0\.1:\d+\/tasks\.git: tasks\/lfs-d\/tests\/data\.bin is a Git LFS pointer, and git-lfs is not installed/
    );
  });

  it('never uses a cut-short download: a leftover .partial folder is ignored, the task fetched whole, the leftover removed', async () => {
    const commit = commits[0] as string;
    const cacheRoot = path.join(cacheHome, 'rollout', 'tasks');
    const target = cachedTaskDir(
      { name: 'task-b', git_url: server.url('tasks.git'), git_commit_id: commit, path: 'tasks/task-b' },
      cacheRoot
    );
    const partial = path.join(path.dirname(path.dirname(target)), `.partial-${commit.slice(0, 12)}-killed`);
    await mkdir(path.join(partial, 'tasks', 'task-b'), { recursive: true });
    await writeFile(path.join(partial, 'tasks', 'task-b', 'task.toml'), 'garbage = [');
    const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);
    await utimes(partial, twoHoursAgo, twoHoursAgo);
    const job = await runJob(`partial-${suffix}`, {
      registry: { url: http.url },
      name: 'bench',
      version: '1.0',
      task_names: ['task-b'],
    });
    assert.equal(job.run.code, 0, job.run.stderr);
    assert.deepEqual(await job.rewards(), { 'task-b__noop__1': 0.25 });
    assert.match(await readFile(path.join(target, 'task.toml'), 'utf8'), /^version = "1.0"/);
    assert.equal(existsSync(partial), false, 'a stale partial download is removed');
  });

  it('a path missing at that commit is one error line naming the dataset, task and URL, and leaves nothing behind', async () => {
    const job = await runJob(`ghost-${suffix}`, {
      registry: { url: http.url },
      name: 'broken',
      version: 'missing-path',
    });
    assert.equal(job.run.code, 2, job.run.stderr);
    const errors = job.run.stderr.split('\n').filter((line) => line.startsWith('error:'));
    assert.equal(errors.length, 1, job.run.stderr);
    assert.match(errors[0] ?? '', /broken@missing-path: task ghost: git:\/\/127\.0\.0\.1:\d+\/tasks\.git: no folder/);
    const repoCache = path.dirname(
      path.dirname(
        cachedTaskDir(
          { name: 'ghost', git_url: server.url('tasks.git'), git_commit_id: commits[0] as string, path: 'tasks/ghost' },
          path.join(cacheHome, 'rollout', 'tasks')
        )
      )
    );
    const left = await readdir(repoCache);
    assert.ok(!left.some((name) => name.startsWith('.partial-')), `left behind: ${left.join(', ')}`);
  });

  it('an unreachable repository is one error line naming the dataset, task and URL', async () => {
    const job = await runJob(`lost-${suffix}`, { registry: { url: http.url }, name: 'broken', version: 'unreachable' });
    assert.equal(job.run.code, 3, job.run.stderr);
    const errors = job.run.stderr.split('\n').filter((line) => line.startsWith('error:'));
    assert.equal(errors.length, 1, job.run.stderr);
    assert.match(
      errors[0] ?? '',
      /broken@unreachable: task lost: git:\/\/127\.0\.0\.1:\d+\/nothing\.git: cannot fetch/
    );
  });

  it('bad registry input: an unknown name or version lists what the registry has (exit 2)', async () => {
    const unknown = await runJob(`unknown-${suffix}`, { registry: { url: http.url }, name: 'nope' });
    assert.equal(unknown.run.code, 2, unknown.run.stderr);
    assert.match(
      unknown.run.stderr,
      /job\.json: datasets\.0\.name: no dataset "nope" in the registry; it has: bench, broken, mixed, renamed/
    );
    const version = await runJob(`version-${suffix}`, { registry: { url: http.url }, name: 'bench', version: '9' });
    assert.equal(version.run.code, 2, version.run.stderr);
    assert.match(
      version.run.stderr,
      /datasets\.0\.version: dataset "bench" has no version "9"; it has: 1\.0, head, latest, short/
    );
    const glob = await runJob(`glob-${suffix}`, {
      registry: { url: http.url },
      name: 'bench',
      version: '1.0',
      task_names: ['tsak-*'],
    });
    assert.equal(glob.run.code, 2, glob.run.stderr);
    assert.match(glob.run.stderr, /datasets\.0\.task_names: "tsak-\*" matches no task of bench@1\.0/);
    await writeFile(path.join(root, 'bad-registry.json'), '[{"name": "x", "tasks": [{"git_url": "u"}]}]');
    const invalid = await runCli(['datasets', 'list', '--registry', 'bad-registry.json'], { cwd: root, env: env() });
    assert.equal(invalid.code, 2);
    assert.match(invalid.stderr, /bad-registry\.json: 0\.version: /);
    assert.match(invalid.stderr, /bad-registry\.json: 0\.tasks\.0\.name: /);
  });
});

describe('task selection', () => {
  const tasks = Array.from({ length: 20 }, (_, i) => ({ name: `t-${String(i).padStart(2, '0')}` }));

  it('n_tasks takes the first tasks; with sample_seed a deterministic sample', () => {
    assert.deepEqual(
      selectTasks(tasks, { n_tasks: 2 }).tasks.map((t) => t.name),
      ['t-00', 't-01']
    );
    const sample = selectTasks(tasks, { n_tasks: 5, sample_seed: 7 }).tasks.map((t) => t.name);
    assert.equal(sample.length, 5);
    assert.deepEqual(
      selectTasks(tasks, { n_tasks: 5, sample_seed: 7 }).tasks.map((t) => t.name),
      sample
    );
    assert.notDeepEqual(
      selectTasks(tasks, { n_tasks: 5, sample_seed: 8 }).tasks.map((t) => t.name),
      sample
    );
    assert.notDeepEqual(sample, ['t-00', 't-01', 't-02', 't-03', 't-04']);
  });

  it('globs include, then exclude; an include glob matching nothing is reported', () => {
    const picked = selectTasks(tasks, { task_names: ['t-0*', 't-1[01]'], exclude_task_names: ['t-0[2-9]'] });
    assert.deepEqual(
      picked.tasks.map((t) => t.name),
      ['t-00', 't-01', 't-10', 't-11']
    );
    assert.deepEqual(selectTasks(tasks, { task_names: ['x-*'] }).unmatched, ['x-*']);
  });
});
