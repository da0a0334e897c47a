/** `rollout status <job>`: a job folder's results on disk, or a job's live progress from the Temporal server. */
import { existsSync } from 'node:fs';

import { InputError } from '../contracts/errors';
import { jobWorkflowId } from '../job/plan';
import { jobFiles } from '../results/files';
import { checkStore } from '../storage/check';
import { jobStore, readJobJson } from '../storage/job-folder';
import { isStoreUrl, joinStoreUrl } from '../storage/location';
import type { JobResult } from '../results/job-result';
import { connectClient, resolveTemporal } from '../temporal/connect';
import type { GateOptions } from './gate';
import { applyGate, gateRequested } from './gate';
import { jobExists, queryProgress, runningTrialSteps } from './inspect';
import { ledgerBudgetResult } from '../budget/ledger-client';
import { renderBudget, renderEvals, renderReport, renderUsage } from './report';
import { describeControlState } from './ctl';
import { JOB_FILES } from '../contracts/paths';

/** The status of a job folder (when it holds a result) or of a job on the server; the exit code (the gate's). */
export async function jobStatus(job: string, gate: GateOptions): Promise<number> {
  return isStoreUrl(job) || existsSync(jobFiles.result(job)) ? folderStatus(job, gate) : serverStatus(job, gate);
}

/** `rollout status <job folder or s3:// URL>`: the job's result.json (alone) as the final report, then the gate. */
async function folderStatus(jobDir: string, gate: GateOptions): Promise<number> {
  if (isStoreUrl(jobDir)) await checkStore(await jobStore(jobDir), 'read');
  const result = await readJobJson<JobResult>(jobDir, JOB_FILES.result);
  if (!result) throw new InputError([{ file: resultFile(jobDir), message: 'not a readable job result' }]);
  console.log(
    `job ${result.job_name}: ${result.status} · ${result.n_finished_trials}/${result.n_total_trials} finished`
  );
  printSavedControl(result);
  console.log(renderReport(result));
  return gateRequested(gate) ? applyGate(jobDir, result.job_name, result, gate) : 0;
}

/** Live control (`rollout ctl`) as the result file last recorded it, while the job runs. */
function printSavedControl(result: JobResult): void {
  if (result.status !== 'running' || !result.control) return;
  const { paused, n_concurrent_trials } = result.control;
  console.log(describeControlState(result.job_name, { paused, concurrency: n_concurrent_trials }));
}

/** `rollout status <job name>`: live from the Temporal server; the gate reads the job's folder (from its memo). */
async function serverStatus(job: string, gate: GateOptions): Promise<number> {
  const endpoint = await resolveTemporal({ startDevServer: false });
  const { connection, client } = await connectClient(endpoint);
  try {
    if (!(await jobExists(client, job)))
      throw new InputError([{ file: job, message: 'no such job on this Temporal server (or give its folder)' }]);
    const progress = await queryProgress(client, job);
    const { memo } = await client.workflow.getHandle(jobWorkflowId(job)).describe();
    const jobDir = String(memo?.jobDir);
    if (!progress) {
      // No worker runs the Job workflow: its result.json (written as trials finish) has the counts and metrics.
      const saved = await readJobJson<JobResult>(jobDir, JOB_FILES.result);
      console.log(
        `job ${job}: no worker answered (start one, or run the job again to attach)` +
          (saved ? `; as of ${saved.updated_at}, from ${resultFile(jobDir)}:` : '')
      );
      if (saved) {
        console.log(`job ${job}: ${saved.status} · ${saved.n_finished_trials}/${saved.n_total_trials} finished`);
        printSavedControl(saved);
        console.log(renderReport(saved));
      }
    } else {
      const errors = Object.entries(progress.errorsByType).map(([type, n]) => `${type} ×${n}`);
      console.log(
        `job ${job}: ${progress.status} · ${progress.finished}/${progress.total} finished · ${progress.running} running · ` +
          `${progress.completed} completed · ${progress.errored} errored · ${progress.infrastructureErrors} infrastructure errors · ` +
          `${progress.cancelled} cancelled · mean reward ${progress.meanReward?.toFixed(4) ?? '–'}`
      );
      if (progress.control && progress.status === 'running') console.log(describeControlState(job, progress.control));
      if (errors.length) console.log(`errors: ${errors.join(', ')}`);
      if (Object.keys(progress.evals).length) console.log(renderEvals(progress.evals));
      const usage = Object.entries(progress.usageByAgent ?? {});
      if (usage.length) console.log(`\n${renderUsage(usage)}`);
      // Live from the job's ledger: what every worker has reported so far.
      const budget = await ledgerBudgetResult(client, job);
      if (budget) console.log(renderBudget(budget));
    }
    for (const trial of await runningTrialSteps(client, job)) {
      console.log(`  ${trial.trialId}  ${trial.step}${trial.attempt > 1 ? ` (attempt ${trial.attempt})` : ''}`);
    }
    if (!gateRequested(gate)) return 0;
    const result = await readJobJson<JobResult>(jobDir, JOB_FILES.result);
    if (!result) throw new InputError([{ file: resultFile(jobDir), message: 'no job result saved yet' }]);
    if (result.status === 'running')
      console.log(`gate on ${result.n_finished_trials}/${result.n_total_trials} finished trials`);
    return await applyGate(jobDir, job, result, gate);
  } finally {
    await connection.close();
  }
}

/** A job's result.json as users name it (a path, or a URL in an object store). */
function resultFile(jobDir: string): string {
  return isStoreUrl(jobDir) ? joinStoreUrl(jobDir, JOB_FILES.result) : jobFiles.result(jobDir);
}
