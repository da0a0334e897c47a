import { readFileSync, statSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';

import { ifPresent } from '../files/absent';
import { childFolder } from '../files/inside';
import { log } from '../log';
import type { PlannedTrial } from '../contracts/trial';
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

/** Trial results already parsed, by file: re-read only when the file changed. */
const resultCache = new Map<string, { mtimeMs: number; result: TrialResult | null }>();
/**
 * A job's trials as last read, keyed by the mtimes of plan.jsonl and the job's result.json: the job result is
 * rewritten after every trial result is written, so while it is unchanged no trial changed either, and a finished
 * job of 10,000 trials is served without touching its 10,000 files again.
 */
const jobCache = new Map<string, { key: string; trials: JobTrial[] }>();

/**
 * Every trial of a job folder, in plan order, with its result when `result.json` exists. A folder without
 * plan.jsonl (copied without it) lists the trial folders that hold a result. Trial files are stat'ed and read
 * synchronously: for thousands of small files that is several times faster than a promise per file.
 */
export async function readJobTrials(jobDir: string): Promise<JobTrial[]> {
  const key = fingerprint(jobDir);
  const cached = jobCache.get(jobDir);
  if (key && cached?.key === key) return cached.trials;
  const planned = await readPlan(jobDir);
  let trials: JobTrial[];
  if (planned) {
    trials = planned
      .filter(({ spec }) => isTrialOf(jobDir, spec.trialName, 'plan.jsonl'))
      .map(({ spec }) => ({
        trialName: spec.trialName,
        taskName: spec.taskName,
        agentName: spec.agentName,
        datasetName: spec.datasetName,
        attempt: spec.attempt,
        result: readTrialResult(jobDir, spec.trialName),
      }));
  } else {
    trials = (await trialFolders(jobDir)).flatMap((name) => {
      const result = isTrialOf(jobDir, name, 'its folder') ? readTrialResult(jobDir, name) : null;
      return result
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
        : [];
    });
  }
  if (key) jobCache.set(jobDir, { key, trials });
  return trials;
}

function fingerprint(jobDir: string): string | undefined {
  const result = statSync(jobFiles.result(jobDir), { throwIfNoEntry: false });
  if (!result) return undefined;
  const plan = statSync(jobFiles.plan(jobDir), { throwIfNoEntry: false });
  return `${plan?.mtimeMs ?? 0}:${result.mtimeMs}:${result.size}`;
}

const refused = new Set<string>();

/** Says once per job folder and name why a trial is left out (readers read the same folders again and again). */
function refuse(jobDir: string, name: unknown, why: string): false {
  const key = `${jobDir}\u0000${String(name)}`;
  if (!refused.has(key)) {
    refused.add(key);
    log.warn(`${jobDir}: trial ${JSON.stringify(name)} left out: ${why}`);
  }
  return false;
}

/**
 * Whether `name` (from plan.jsonl or a folder's name) can be a trial of the job: a folder name (src/files/inside.ts)
 * inside the job folder. A job folder may come from anyone (a shared bucket, a CI artifact): its names become paths.
 */
function isTrialOf(jobDir: string, name: unknown, source: string): boolean {
  return childFolder(jobDir, name) !== undefined || refuse(jobDir, name, `the name in ${source} is not a folder name`);
}

/**
 * One trial's result.json, or null while it has none (or it is unreadable, or it names another trial than the folder
 * it was read from: a result copied or forged into another trial's folder).
 */
function readTrialResult(jobDir: string, trialName: string): TrialResult | null {
  const file = jobFiles.trialResult(jobDir, trialName);
  const mtimeMs = statSync(file, { throwIfNoEntry: false })?.mtimeMs;
  if (mtimeMs === undefined) return null;
  const cached = resultCache.get(file);
  if (cached && cached.mtimeMs === mtimeMs) return cached.result;
  let result: TrialResult | null = null;
  try {
    result = JSON.parse(readFileSync(file, 'utf8')) as TrialResult;
    if (result?.trial_name !== trialName) {
      refuse(jobDir, trialName, `its result.json names trial ${JSON.stringify(result?.trial_name)}`);
      result = null;
    }
  } catch {
    // Unreadable: shown as not finished until it is rewritten (writes are atomic, so this is rare).
  }
  resultCache.set(file, { mtimeMs, result });
  return result;
}

async function readPlan(jobDir: string): Promise<PlannedTrial[] | undefined> {
  const text = await ifPresent(readFile(jobFiles.plan(jobDir), 'utf8'));
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
