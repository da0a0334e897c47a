/**
 * `rollout tasks init` and `rollout tasks check` through the CLI on the real Docker engine: the skeleton passes the
 * check; a dataset with a task per kind of fault (tests that pass without work, a wrong solution, a Dockerfile that
 * does not build, a task folder that is not valid) fails it, each row saying why, and a task tagged `always-fails`
 * (as examples/tasks/impossible) says that it fails on purpose.
 */
import assert from 'node:assert/strict';
import { cp, mkdir, mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { CliRun } from '../support/cli';
import { runCli } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

let dir: string;
let initRun: CliRun;
let stepsInitRun: CliRun;
let skeletonCheck: CliRun;
let datasetCheck: CliRun;

async function write(root: string, files: Record<string, string>): Promise<void> {
  for (const [file, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await writeFile(path.join(root, file), content);
  }
}

/** The row of a task in the check's table. */
function row(run: CliRun, task: string): string {
  const line = run.stdout.split('\n').find((l) => l.startsWith(`${task} `));
  assert.ok(line, `no row for ${task} in:\n${run.stdout}`);
  return line;
}

describe('rollout tasks init and check', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-tasks-check-'));
    initRun = await runCli(['tasks', 'init', 'my-task'], { cwd: dir });
    stepsInitRun = await runCli(['tasks', 'init', 'steps-task', '--steps'], { cwd: dir });
    skeletonCheck = await runCli(['tasks', 'check', 'my-task', 'steps-task'], { cwd: dir });

    const dataset = path.join(dir, 'dataset');
    await cp(path.join(dir, 'my-task'), path.join(dataset, 'good'), { recursive: true });
    await cp(path.join(dir, 'my-task'), path.join(dataset, 'lenient-tests'), { recursive: true });
    await write(path.join(dataset, 'lenient-tests'), { 'tests/test.sh': 'echo 1 > /logs/verifier/reward.txt\n' });
    await cp(path.join(dir, 'my-task'), path.join(dataset, 'wrong-solution'), { recursive: true });
    await write(path.join(dataset, 'wrong-solution'), { 'solution/solve.sh': 'echo "Hello" > /app/hello.txt\n' });
    await cp(path.join(dataset, 'wrong-solution'), path.join(dataset, 'tagged-impossible'), { recursive: true });
    const toml = await readFile(path.join(dataset, 'tagged-impossible', 'task.toml'), 'utf8');
    assert.match(toml, /^tags = \[\]$/m);
    await write(path.join(dataset, 'tagged-impossible'), {
      'task.toml': toml.replace(/^tags = \[\]$/m, 'tags = ["always-fails"]'),
    });
    await cp(path.join(dir, 'my-task'), path.join(dataset, 'no-build'), { recursive: true });
    await write(path.join(dataset, 'no-build'), {
      'environment/Dockerfile': 'FROM debian:bookworm-slim\nRUN echo broken-on-purpose && exit 3\n',
    });
    await cp(path.join(dir, 'my-task'), path.join(dataset, 'invalid'), { recursive: true });
    await write(path.join(dataset, 'invalid'), { 'task.toml': '[agent]\ntimeout_sec = "soon"\n' });
    datasetCheck = await runCli(['tasks', 'check', 'dataset', '--n-concurrent', '4'], { cwd: dir });
  });
  after(async () => {
    for (const jobName of await readdir(path.join(dir, 'jobs')).catch(() => [])) await removeJobLeftovers(jobName);
  });

  it('init writes a skeleton and says how to check it', () => {
    assert.equal(initRun.code, 0, initRun.stderr);
    assert.match(initRun.stdout, /rollout tasks check my-task/);
  });

  it('the skeletons (single- and multi-step) pass the check: the oracle scores 1, doing nothing does not', async () => {
    assert.equal(stepsInitRun.code, 0, stepsInitRun.stderr);
    assert.ok((await readdir(path.join(dir, 'steps-task', 'steps'))).includes('extend'));
    assert.equal(skeletonCheck.code, 0, skeletonCheck.stdout + skeletonCheck.stderr);
    assert.match(row(skeletonCheck, 'my-task'), /ok\s+ok\s+1\s+0\s+pass$/);
    assert.match(row(skeletonCheck, 'steps-task'), /ok\s+ok\s+1\s+0\s+pass$/);
    assert.match(skeletonCheck.stdout, /2 of 2 tasks pass/);
  });

  it('init refuses a folder that is not empty (exit 2, naming it)', async () => {
    const again = await runCli(['tasks', 'init', 'my-task'], { cwd: dir });
    assert.equal(again.code, 2);
    assert.match(again.stderr, /^error: my-task: not empty/m);
  });

  it('a dataset with faulty tasks fails the check (exit 1), each row saying why', () => {
    assert.equal(datasetCheck.code, 1, datasetCheck.stdout + datasetCheck.stderr);
    const out = datasetCheck.stdout;
    assert.match(row(datasetCheck, 'dataset/good'), /pass$/);
    assert.match(row(datasetCheck, 'dataset/lenient-tests'), /ok\s+ok\s+1\s+1\s+FAIL$/);
    assert.match(out, /dataset\/lenient-tests: nop: scores 1 without doing anything/);
    assert.match(row(datasetCheck, 'dataset/wrong-solution'), /ok\s+ok\s+0\s+0\s+FAIL$/);
    assert.match(out, /dataset\/wrong-solution: oracle: must score 1, got reward 0/);
    assert.match(row(datasetCheck, 'dataset/no-build'), /ok\s+FAIL/);
    assert.match(out, /dataset\/no-build: build: EnvironmentBuildError: .*(exit code: 3|broken-on-purpose)/);
    assert.match(row(datasetCheck, 'dataset/invalid'), /invalid/);
    assert.match(out, /dataset\/invalid: .*task\.toml: agent\.timeout_sec: /);
    assert.match(row(datasetCheck, 'dataset/tagged-impossible'), /ok\s+ok\s+0\s+0\s+FAIL$/);
    assert.match(
      out,
      /^dataset\/tagged-impossible: oracle: must score 1, got reward 0 \(on purpose: the task is tagged always-fails\)$/m
    );
    assert.doesNotMatch(out, /wrong-solution: .*on purpose/);
    assert.match(out, /^1 of 6 tasks pass \(1 of the failing on purpose: tagged always-fails\)$/m);
  });
});
