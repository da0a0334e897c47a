/**
 * The storage interface over a local folder (src/storage/local.ts): the copies between stores (what `rollout pull` and
 * `rollout push` do) take complete trial folders only, and task archives are the same bytes for the same content
 * wherever it lies. The S3 store is tested against a real server in e2e.storage.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { JobPlan } from '../../src/job/plan';
import { openStore } from '../../src/storage/store';
import { pullFromStore, pushToStore } from '../../src/storage/sync';
import { fetchTaskArchive, packLocalTasks } from '../../src/task/archives';

let dir: string;

async function write(file: string, content: string): Promise<void> {
  await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
  await writeFile(path.join(dir, file), content);
}

describe('storage over a local folder', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-storage-local-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('copies complete trial folders only, and only what changed when copied again', async () => {
    await write('jobs/job-a/config.json', '{}');
    await write('jobs/job-a/result.json', '{"n": 1}');
    await write('jobs/job-a/done__1/result.json', '{}');
    await write('jobs/job-a/done__1/agent/out.txt', 'done');
    // Being written (or uploaded): no result.json yet.
    await write('jobs/job-a/running__1/agent/out.txt', 'half');
    await write('jobs/stray/file.txt', 'not a job');
    const first = await pullFromStore(path.join(dir, 'jobs'), path.join(dir, 'copy'));
    assert.equal(first.files, 4);
    const copied = await readdir(path.join(dir, 'copy', 'job-a'));
    assert.deepEqual(copied.sort(), ['config.json', 'done__1', 'result.json']);
    assert.equal(await readFile(path.join(dir, 'copy', 'job-a', 'done__1', 'agent', 'out.txt'), 'utf8'), 'done');
    await assert.rejects(readdir(path.join(dir, 'copy', 'stray')), { code: 'ENOENT' });

    await write('jobs/job-a/running__1/result.json', '{}');
    await write('jobs/job-a/result.json', '{"n": 2}');
    await utimes(path.join(dir, 'jobs/job-a/result.json'), new Date(), new Date(Date.now() + 5_000));
    const second = await pullFromStore(path.join(dir, 'jobs'), path.join(dir, 'copy'));
    assert.equal(second.files, 3, 'the finished trial (2 files) and the job result');
    assert.equal(second.unchanged, 3);
    assert.equal(await readFile(path.join(dir, 'copy', 'job-a', 'result.json'), 'utf8'), '{"n": 2}');

    const results = await pullFromStore(path.join(dir, 'jobs'), path.join(dir, 'results'), 'results');
    assert.equal(results.files, 4, 'job files and the trials’ result.json files');
  });

  it('pushes the jobs of a folder, without the index of what a pull copied', async () => {
    const pushed = await pushToStore(path.join(dir, 'copy'), path.join(dir, 'shared'));
    assert.equal(pushed.files, 6);
    const store = await openStore(path.join(dir, 'shared'));
    const keys = (await store.list('')).map((file) => file.key);
    assert.ok(keys.includes('job-a/running__1/agent/out.txt'));
    assert.ok(!keys.some((key) => key.includes('.rollout-copied')));
    await assert.rejects(pushToStore(path.join(dir, 'jobs', 'stray'), path.join(dir, 'shared2')), /no job folder/);
  });

  it('packs a task once per content, the same digest wherever it lies, and fetches it by digest', async () => {
    for (const copy of ['one', 'two']) {
      await write(`${copy}/task/task.toml`, 'version = "1.0"\n');
      await write(`${copy}/task/tests/test.sh`, 'echo 1 > /logs/verifier/reward.txt\n');
    }
    await utimes(path.join(dir, 'two/task/task.toml'), new Date(0), new Date(0));
    await write('other/task/task.toml', 'version = "1.1"\n');
    const spec = (taskDir: string) => ({ spec: { taskDir } as JobPlan['trials'][number]['spec'], envLast: false });
    const plan = { trials: ['one', 'two', 'other'].map((copy) => spec(path.join(dir, copy, 'task'))) } as JobPlan;
    const jobsDir = path.join(dir, 'packed-jobs');
    const { packed, sent } = await packLocalTasks(plan.trials, jobsDir);
    assert.equal(packed, 3);
    const [one, two, other] = plan.trials.map((trial) => trial.spec.taskArchive!);
    assert.equal(one!.digest, two!.digest, 'same content, same archive (times do not count)');
    assert.notEqual(one!.digest, other!.digest);
    assert.ok(sent >= 2 && (await readdir(path.join(jobsDir, '.rollout', 'tasks'))).length === 2);
    const again = await packLocalTasks(plan.trials, jobsDir);
    assert.equal(again.sent, 0, 'nothing sent twice');

    process.env.XDG_CACHE_HOME = path.join(dir, 'cache');
    try {
      const fetched = await fetchTaskArchive(one!);
      assert.equal(
        await readFile(path.join(fetched, 'tests', 'test.sh'), 'utf8'),
        'echo 1 > /logs/verifier/reward.txt\n'
      );
      await writeFile(path.join(jobsDir, '.rollout', 'tasks', `${other!.digest}.tar`), 'tampered');
      await assert.rejects(fetchTaskArchive(other!), /corrupt/);
    } finally {
      delete process.env.XDG_CACHE_HOME;
    }
  });
});
