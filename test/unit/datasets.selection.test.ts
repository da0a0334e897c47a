/**
 * Selection means selection: a job that selects tasks of a dataset folder (task_names, exclude_task_names, n_tasks)
 * reads and validates only those, so one broken task (bytes that are not UTF-8 in its instruction.md, a dangling link)
 * never blocks the others; what it does not select is at most one warning line. Real files, the real loader and
 * planner (no server needed: planning happens before anything starts).
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { InputError } from '../../src/contracts/errors';
import { loadJobFile } from '../../src/job/load';
import { planJob } from '../../src/job/plan';

let dir: string;

async function writeTask(name: string, instruction: string | Buffer): Promise<void> {
  const task = path.join(dir, 'tasks', name);
  await mkdir(path.join(task, 'tests'), { recursive: true });
  await mkdir(path.join(task, 'environment'), { recursive: true });
  await mkdir(path.join(task, 'solution'), { recursive: true });
  await writeFile(path.join(task, 'solution', 'solve.sh'), 'true\n');
  await writeFile(path.join(task, 'task.toml'), 'version = "1.0"\n');
  await writeFile(path.join(task, 'instruction.md'), instruction);
  await writeFile(path.join(task, 'tests', 'test.sh'), 'true\n');
  await writeFile(path.join(task, 'environment', 'Dockerfile'), 'FROM debian:bookworm-slim\n');
}

/** Plans a job over tasks/ with these selection keys: the planned task names and warnings, or the problems. */
async function plan(name: string, selection: string[], extra: string[] = []) {
  const file = path.join(dir, `${name}.yaml`);
  const lines = [...extra, `jobs_dir: ${path.join(dir, 'jobs')}`, 'agents:', '  - name: oracle', 'datasets:'];
  await writeFile(file, [...lines, '  - path: tasks', ...selection.map((line) => `    ${line}`), ''].join('\n'));
  try {
    const planned = await planJob(await loadJobFile(file));
    return { tasks: planned.trials.map((trial) => trial.spec.taskName), warnings: planned.warnings, problems: [] };
  } catch (err) {
    if (!(err instanceof InputError)) throw err;
    return { tasks: [], warnings: [], problems: err.message.split('\n') };
  }
}

describe('task selection reads only the selected tasks', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-selection-'));
    await writeTask('good-a', 'Do a.');
    await writeTask('good-b', 'Do b.');
    await writeTask('zz-latin1', Buffer.from('Write caf\xe9 to a file.', 'latin1'));
    await symlink('nowhere', path.join(dir, 'tasks', 'zz-gone'));
  });

  it('without a selection every task must be valid: each problem is reported', async () => {
    const { problems } = await plan('all', []);
    assert.equal(problems.length, 2, problems.join('\n'));
    assert.match(problems.join('\n'), /zz-latin1\/instruction\.md: not valid UTF-8 \(first bad byte at offset 9\)/);
    assert.match(problems.join('\n'), /tasks\/zz-gone: broken symlink \(ENOENT\)/);
  });

  it('task_names: only the named task is read; the unusable entry it skips is one warning line', async () => {
    const result = await plan('named', ['task_names: [good-a]']);
    assert.deepEqual(result.problems, []);
    assert.deepEqual(result.tasks, ['good-a']);
    assert.equal(result.warnings.length, 1, result.warnings.join('\n'));
    assert.match(result.warnings[0]!, /tasks: 1 entry the job does not select left unread.*zz-gone: broken symlink/);
  });

  it('exclude_task_names: the excluded broken tasks are never read', async () => {
    const result = await plan('excluded', ['exclude_task_names: ["zz-*"]']);
    assert.deepEqual(result.problems, []);
    assert.deepEqual(result.tasks, ['good-a', 'good-b']);
    assert.equal(result.warnings.length, 1, result.warnings.join('\n'));
  });

  it('n_tasks: the first tasks only', async () => {
    const result = await plan('first-two', ['n_tasks: 2']);
    assert.deepEqual(result.tasks, ['good-a', 'good-b']);
    assert.deepEqual(result.problems, []);
  });

  it('a selected broken task is still refused, naming its file', async () => {
    const result = await plan('broken-named', ['task_names: [zz-latin1, good-b]']);
    assert.deepEqual(result.problems.length, 1, result.problems.join('\n'));
    assert.match(result.problems[0]!, /zz-latin1\/instruction\.md: not valid UTF-8/);
  });

  it('an invalid job file reports the problems of the tasks it selects only', async () => {
    const result = await plan('invalid', ['task_names: [good-a]'], ['colour: blue']);
    assert.equal(result.problems.length, 1, result.problems.join('\n'));
    assert.match(result.problems[0]!, /invalid\.yaml: colour: unknown key/);
  });
});
