/**
 * Results on disk are never lost: a read error is not a missing result, a stale job-result write never replaces a
 * newer one, and two trials never share a folder. Real files.
 */
import assert from 'node:assert/strict';
import { cp, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

import { readPlanPage } from '../../activities/plan';
import { writeJobResult } from '../../activities/results';
import { loadJobFile } from '../../src/job/load';
import { planJob } from '../../src/job/plan';
import { saveJobFolder } from '../../src/api/submit';
import { jobFiles, readJson } from '../../src/results/files';
import type { JobResult } from '../../src/results/job-result';
import { buildJobResult } from '../../src/results/job-result';
import { emptyStats } from '../../src/results/job-stats';
import { writeLocalJob } from '../support/local-job';
import { startTrialRun } from '../../src/results/earlier-runs';
import { recordSandbox, recordedSandboxes, sandboxRecordState } from '../../src/results/sandbox-record';
import { workingJobDir } from '../../src/storage/working-dir';
import { appendFile, writeFile } from 'node:fs/promises';

function jobResult(updatedAt: string, finished: number): JobResult {
  const stats = { ...emptyStats(10), n_completed: finished };
  const result = buildJobResult({
    jobName: 'j',
    workflowId: 'w',
    status: 'running',
    startedAt: '2026-01-01T00:00:00.000Z',
    now: updatedAt,
    running: 0,
    stats,
    metrics: ['mean'],
  });
  return result;
}

describe('results on disk', () => {
  it('reads a missing file as undefined, and fails naming the file on any other error', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'rollout-read-'));
    assert.equal(await readJson(path.join(dir, 'missing.json')), undefined);
    await mkdir(path.join(dir, 'unreadable.json'));
    await assert.rejects(readJson(path.join(dir, 'unreadable.json')), /unreadable\.json: cannot be read: EISDIR/);
  });

  it('stops, instead of re-running it, when a finished trial cannot be read', async () => {
    const jobFile = await writeLocalJob({ name: 'unreadable', attempts: 1, concurrency: 1 });
    const job = await loadJobFile(jobFile);
    const plan = await planJob(job);
    await saveJobFolder(plan);
    const trialName = plan.trials[0]!.spec.trialName;
    // A read error that is not "missing" (NFS, permissions): here, a folder where the file should be.
    await mkdir(jobFiles.trialResult(plan.jobDir, trialName), { recursive: true });
    await assert.rejects(
      readPlanPage({ jobDir: plan.jobDir, offset: 0, limit: 10, rerunErrorTypes: [] }),
      new RegExp(`${trialName}/result\\.json: cannot be read`)
    );
  });

  it('keeps the newer job result when an older write arrives late', async () => {
    const jobDir = await mkdtemp(path.join(tmpdir(), 'rollout-job-result-'));
    const write = writeJobResult(() => Promise.resolve(undefined));
    await write({ jobDir, result: jobResult('2026-01-01T00:00:02.000Z', 7) });
    await write({ jobDir, result: jobResult('2026-01-01T00:00:01.000Z', 3) });
    const kept = JSON.parse(await readFile(jobFiles.result(jobDir), 'utf8')) as JobResult;
    assert.equal(kept.n_completed_trials, 7);
    await write({ jobDir, result: jobResult('2026-01-01T00:00:03.000Z', 9) });
    assert.equal((JSON.parse(await readFile(jobFiles.result(jobDir), 'utf8')) as JobResult).n_completed_trials, 9);
  });

  it("puts a budgeted job's ledger spend in its result, and asks no ledger for a job without a budget", async () => {
    const jobDir = await mkdtemp(path.join(tmpdir(), 'rollout-job-result-'));
    const asked: string[] = [];
    const spent = { cost_usd: 0.25, tokens: 15, llm_calls: 1, unpriced_tokens: 0, unpriced_models: [] };
    const write = writeJobResult((jobName) => {
      asked.push(jobName);
      return Promise.resolve({ limits: { cost_usd: 1 }, spent, spent_by_agent: {}, exhausted: null });
    });
    await write({ jobDir, result: jobResult('2026-01-01T00:00:01.000Z', 1) });
    assert.deepEqual(asked, []);
    await write({ jobDir, result: jobResult('2026-01-01T00:00:02.000Z', 2), budgetOf: 'budgeted' });
    assert.deepEqual(asked, ['budgeted']);
    const written = JSON.parse(await readFile(jobFiles.result(jobDir), 'utf8')) as JobResult;
    assert.deepEqual(written.budget?.spent, spent);
  });

  it('gives two tasks whose names differ only in unsafe characters two trial folders', async () => {
    const jobFile = await writeLocalJob({ name: 'names', attempts: 1, concurrency: 1 });
    const tasks = path.join(path.dirname(jobFile), 'tasks');
    for (const name of ['t 2', 't_2'])
      await cp(path.join(tasks, 'trivial'), path.join(tasks, name), { recursive: true });
    await rm(path.join(tasks, 'trivial'), { recursive: true });
    const plan = await planJob(await loadJobFile(jobFile));
    const names = plan.trials.map((trial) => trial.spec.trialName);
    assert.equal(names.length, 2);
    assert.equal(new Set(names).size, 2, names.join(', '));
    assert.equal(new Set(plan.trials.map((trial) => trial.spec.trialId)).size, 2);
    assert.ok(names.includes('t_2__echo__1'), names.join(', '));
  });

  it("keeps the trial's sandbox record across a new run: what earlier runs created and did not remove", async () => {
    const jobDir = await mkdtemp(path.join(tmpdir(), 'rollout-record-'));
    const trialDir = jobFiles.trialDir(jobDir, 't1');
    await recordSandbox(jobDir, 't1', { event: 'creating', host: 'h1', labels: { 'rollout.trial': 'x' } });
    await recordSandbox(jobDir, 't1', { event: 'created', host: 'h1', id: 'aaa' });
    await recordSandbox(jobDir, 't1', { event: 'created', host: 'h2', id: 'bbb' });
    await recordSandbox(jobDir, 't1', { event: 'removed', id: 'aaa' });
    // A write cut short by a crash, then the trial's other files.
    await appendFile(path.join(trialDir, 'sandboxes.jsonl'), '{"event":"created","ho');
    await writeFile(path.join(trialDir, 'trial.log'), 'earlier run\n');
    await startTrialRun(trialDir);
    await assert.rejects(readFile(path.join(trialDir, 'trial.log')), { code: 'ENOENT' });
    assert.deepEqual(await recordedSandboxes(jobDir, 't1'), [{ id: 'bbb', host: 'h2' }]);
    assert.deepEqual(await recordedSandboxes(jobDir, 'never-ran'), []);
    await rm(jobDir, { recursive: true });
  });

  it('says when a record accounts for every sandbox, so that no listing by labels is needed', async () => {
    const jobDir = await mkdtemp(path.join(tmpdir(), 'rollout-record-'));
    const state = (trial: string) => sandboxRecordState(jobDir, trial);
    assert.deepEqual(await state('never-ran'), { live: [], empty: true, settled: true });
    const creating = { event: 'creating', host: 'h1', labels: { 'rollout.trial': 'x' } } as const;
    // Created and removed: settled.
    await recordSandbox(jobDir, 'done', creating);
    await recordSandbox(jobDir, 'done', { event: 'created', host: 'h1', id: 'aaa' });
    assert.deepEqual(await state('done'), { live: [{ id: 'aaa', host: 'h1' }], empty: false, settled: false });
    await recordSandbox(jobDir, 'done', { event: 'removed', id: 'aaa' });
    assert.deepEqual(await state('done'), { live: [], empty: false, settled: true });
    // A creation begun whose id never came back (a worker killed during the call): only its labels find it.
    await recordSandbox(jobDir, 'cut', creating);
    assert.deepEqual(await state('cut'), { live: [], empty: false, settled: false });
    // A line cut short by a crash: it may have been anything.
    await recordSandbox(jobDir, 'torn', creating);
    await recordSandbox(jobDir, 'torn', { event: 'created', host: 'h1', id: 'bbb' });
    await recordSandbox(jobDir, 'torn', { event: 'removed', id: 'bbb' });
    await appendFile(path.join(jobFiles.trialDir(jobDir, 'torn'), 'sandboxes.jsonl'), '{"event":"crea');
    assert.equal((await state('torn')).settled, false);
    await rm(jobDir, { recursive: true });
  });

  it('never calls the record of a job in an object store empty or settled: a dead host took its lines along', async () => {
    const jobUrl = `s3://bucket/record-${process.pid}/job`;
    await recordSandbox(jobUrl, 'done', { event: 'creating', host: 'h1', labels: { 'rollout.trial': 'x' } });
    await recordSandbox(jobUrl, 'done', { event: 'created', host: 'h1', id: 'aaa' });
    await recordSandbox(jobUrl, 'done', { event: 'removed', id: 'aaa' });
    assert.deepEqual(await sandboxRecordState(jobUrl, 'done'), { live: [], empty: false, settled: false });
    assert.deepEqual(await sandboxRecordState(jobUrl, 'never-ran'), { live: [], empty: false, settled: false });
    await rm(workingJobDir(jobUrl), { recursive: true });
  });
});
