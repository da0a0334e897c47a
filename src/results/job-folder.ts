import { readdir, readFile, stat } from 'node:fs/promises';

import type { PlannedTrial } from '../job/plan';
import { jobFiles } from './files';
import type { TrialResult } from './trial-result';

/** A trial of a job folder: what was planned, and its result once it finished. */
export interface JobTrial {
  trialName: string;
  taskName: string;
  agentName: string;
  datasetName: string;
  attempt: number;
  result: TrialResult | null;
}

/** Trial results already parsed, by file: re-read only when the file changed (a job of 10,000 trials stays fast). */
const resultCache = new Map<string, { mtimeMs: number; result: TrialResult | null }>();
const PARALLEL_READS = 64;

/**
 * Every trial of a job folder, in plan order, with its result when `result.json` exists. A folder without
 * plan.jsonl (copied without it) lists the trial folders that hold a result.
 */
export async function readJobTrials(jobDir: string): Promise<JobTrial[]> {
  const planned = await readPlan(jobDir);
  const trials: JobTrial[] = planned
    ? planned.map(({ spec }) => ({
        trialName: spec.trialName,
        taskName: spec.taskName,
        agentName: spec.agentName,
        datasetName: spec.datasetName,
        attempt: spec.attempt,
        result: null,
      }))
    : [];
  const names = planned ? trials.map((t) => t.trialName) : await trialFolders(jobDir);
  const results: (TrialResult | null)[] = new Array<TrialResult | null>(names.length).fill(null);
  for (let start = 0; start < names.length; start += PARALLEL_READS) {
    await Promise.all(
      names.slice(start, start + PARALLEL_READS).map(async (name, i) => {
        results[start + i] = await readTrialResult(jobDir, name);
      })
    );
  }
  if (planned) return trials.map((trial, i) => ({ ...trial, result: results[i] ?? null }));
  return results.flatMap((result) =>
    result
      ? [
          {
            trialName: result.trial_name,
            taskName: result.task_name,
            agentName: result.agent_name,
            datasetName: result.dataset_name,
            attempt: result.attempt,
            result,
          },
        ]
      : []
  );
}

/** One trial's result.json, or null while it has none (or it is unreadable). */
export async function readTrialResult(jobDir: string, trialName: string): Promise<TrialResult | null> {
  const file = jobFiles.trialResult(jobDir, trialName);
  const mtimeMs = await stat(file).then(
    (s) => s.mtimeMs,
    () => undefined
  );
  if (mtimeMs === undefined) return null;
  const cached = resultCache.get(file);
  if (cached && cached.mtimeMs === mtimeMs) return cached.result;
  const result = await readFile(file, 'utf8').then(
    (text) => JSON.parse(text) as TrialResult,
    () => null
  );
  resultCache.set(file, { mtimeMs, result });
  return result;
}

async function readPlan(jobDir: string): Promise<PlannedTrial[] | undefined> {
  const text = await readFile(jobFiles.plan(jobDir), 'utf8').catch(() => undefined);
  if (text === undefined) return undefined;
  return text
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as PlannedTrial);
}

async function trialFolders(jobDir: string): Promise<string[]> {
  const entries = await readdir(jobDir, { withFileTypes: true });
  return entries
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort();
}
