import path from 'node:path';

import { readCallRecords } from '../src/gateway/records';
import type { LlmCallRecord } from '../src/gateway/records';
import type { JobBudgetReader } from '../src/budget/workflow/spend';
import type { JobResult } from '../src/results/job-result';
import { earlierCallFiles } from '../src/results/earlier-runs';
import { jobFiles, readJson, writeJsonAtomic } from '../src/results/files';
import { scrubbedValue } from '../src/results/scrub';
import type { TrialResult } from '../src/results/trial-result';
import type { TrialUsage } from '../src/contracts/trial';
import { addCall, emptyUsage } from '../src/results/usage';
import { trialFinished } from '../src/metrics/rollout-metrics';
import { buildTrajectory } from '../src/trajectory/atif';
import { readJobJson, writeJobJson } from '../src/storage/job-folder';
import { isStoreUrl } from '../src/storage/location';
import { commitTrialFolder, restoreTrialFolder, uploadTrialFolder } from '../src/storage/trial-folder';
import type { TrialSpec } from '../src/contracts/trial';
import { log, settleCollected, trialSecrets } from './secrets';
import { JOB_FILES, TRIAL_FILES, trialLayout } from '../src/contracts/paths';

export interface WriteTrialResultInput {
  spec: TrialSpec;
  result: TrialResult;
}

export interface WrittenTrialResult {
  /** The usage written into result.json, for the job's sums; null when the agent did not use the gateway. */
  usage: TrialUsage | null;
}

/**
 * `<job>/<trial>/result.json`, written atomically by the worker that ran the trial, as the trial finishes; with the
 * model usage and cost from the gateway's records, and `agent/trajectory.json` (ATIF) built from the same records.
 */
export async function writeTrialResult({ spec, result }: WriteTrialResultInput): Promise<WrittenTrialResult> {
  const inStore = isStoreUrl(spec.jobDir);
  // A store job's result written away from its host: over what that host uploaded.
  if (inStore) await restoreTrialFolder(spec.jobDir, spec.trialName);
  const resultFile = jobFiles.trialResult(spec.jobDir, spec.trialName);
  // Written once: a retry of this step (its worker died after the write, before Temporal recorded the step's end)
  // keeps what the first write put there, whatever it would write now.
  const written = await readJson<TrialResult>(resultFile);
  if (written && sameTrialRun(written, result)) {
    await log(spec, 'result', 'result.json already written for this run: kept');
    if (inStore) await commitTrialFolder(spec.jobDir, spec.trialName, [TRIAL_FILES.log, TRIAL_FILES.trajectory]);
    return { usage: written.usage ?? null };
  }
  // A collect that died half-way left the container's files in place of the gateway's records, unscrubbed: settled
  // now, or this step fails. What is written here (error messages: a reward file's first bytes, an upstream's error
  // body) is scrubbed before it is written, and so is every trial.log line (`log`): none is written after the scrub
  // unredacted, and one whose secrets cannot be worked out fails this step instead.
  await settleCollected(spec);
  result = scrubbedValue(result, await trialSecrets(spec));
  for (const error of result.cleanup_errors ?? []) {
    await log(spec, error.step, `failed on ${error.host ?? 'no host'}: ${error.type}: ${error.message}`);
  }
  const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
  const agentDir = trialLayout(trialDir).agent;
  let usage: TrialUsage | null = null;
  // Calls of earlier runs (a retry after a rate limit, a restart) count in the usage: they were made and paid for.
  for (const file of await earlierCallFiles(trialDir)) {
    for await (const record of readCallRecords(file)) addCall((usage ??= emptyUsage()), record);
  }
  const records: LlmCallRecord[] = [];
  for await (const record of readCallRecords(trialLayout(trialDir).llmCalls)) records.push(record);
  if (records.length > 0) {
    for (const record of records) addCall((usage ??= emptyUsage()), record);
    const trajectory = buildTrajectory(records, {
      sessionId: spec.trialId,
      agentName: result.agent?.name ?? spec.agentName,
      agentVersion: result.agent?.version ?? null,
      model: result.agent?.model ?? records.find((r) => r.model)?.model ?? null,
    });
    if (trajectory) await writeJsonAtomic(path.join(agentDir, 'trajectory.json'), trajectory);
  }
  let first = true;
  await writeJsonAtomic(resultFile, { ...result, usage }, async () => {
    const current = await readJson<TrialResult>(resultFile);
    first = !current || !sameTrialRun(current, result);
    return first;
  });
  if (!first) return { usage: (await readJson<TrialResult>(resultFile))?.usage ?? null };
  trialFinished(spec.environmentType, result.error?.type ?? null, result.restarts);
  // What this step wrote, then result.json: the trial's folder is complete in the store.
  if (inStore) await commitTrialFolder(spec.jobDir, spec.trialName, [TRIAL_FILES.log, TRIAL_FILES.trajectory]);
  return { usage };
}

/** The same run of the same trial: its workflow, attempt, retry and start (a new run empties the folder first). */
function sameTrialRun(a: TrialResult, b: TrialResult): boolean {
  return (
    a.trial_name === b.trial_name &&
    a.attempt === b.attempt &&
    (a.retries ?? 0) === (b.retries ?? 0) &&
    a.workflow_id === b.workflow_id &&
    a.started_at === b.started_at
  );
}

export interface WriteJobResultInput {
  jobDir: string;
  result: JobResult;
  /** The job has a budget: its ledger's spend goes into the result (`budget`). */
  budgetOf?: string;
}

/**
 * `<job>/result.json`, rewritten atomically as trials finish. An attempt that timed out may still run after a newer
 * result was written: it must not put its older one back. Results are ordered by `updated_at` (workflow time, which
 * only moves forward, across continue-as-new and later runs of the job too).
 */
export function writeJobResult(jobBudget: JobBudgetReader) {
  return async ({ jobDir, result, budgetOf }: WriteJobResultInput): Promise<void> => {
    const budget = budgetOf ? await jobBudget(budgetOf) : undefined;
    if (budget) result = { ...result, budget };
    if (isStoreUrl(jobDir)) {
      // No rename in a store: read, compare, put (a late attempt racing a newer write is all this leaves to chance).
      const current = await readJobJson<JobResult>(jobDir, JOB_FILES.result);
      if (!current || current.updated_at <= result.updated_at) await writeJobJson(jobDir, JOB_FILES.result, result);
      return;
    }
    const file = jobFiles.result(jobDir);
    await writeJsonAtomic(file, result, async () => {
      const current = await readJson<JobResult>(file);
      return !current || current.updated_at <= result.updated_at;
    });
  };
}

export interface UploadTrialInput {
  spec: TrialSpec;
}

/**
 * A store job's trial folder uploaded from the host that ran it, once collected (all but result.json, which its
 * result step adds last). A host lost meanwhile restarts the trial elsewhere: its files exist only here.
 */
export async function uploadTrial({ spec }: UploadTrialInput): Promise<void> {
  await settleCollected(spec);
  const { files } = await uploadTrialFolder(spec.jobDir, spec.trialName);
  await log(spec, 'collect', `${files} files uploaded to ${spec.jobDir}/${spec.trialName}`);
}
