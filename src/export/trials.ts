/**
 * The trial folders of a job for `rollout export`, one at a time: the folder is read as a stream of entries and each
 * trial's files as it comes, so memory stays constant whatever the job's size. A folder without result.json (a trial
 * still running, the job's own files) is not a trial yet and is passed over.
 */
import { opendir, readFile } from 'node:fs/promises';
import path from 'node:path';

import { z } from 'zod';

import { InputError, zodProblems } from '../contracts/errors';
import { isFolderName } from '../files/inside';
import { primaryReward } from '../results/job-stats';
import type { TrialResult } from '../results/trial-result';
import { jobFiles } from '../results/files';

/** What produced a trial folder: a job's trial, a step-by-step session, or a remote rollout (`/init`). */
export type TrialKind = 'trial' | 'session' | 'rollout';

export interface ExportTrial {
  dir: string;
  kind: TrialKind;
  result: TrialResult;
}

export interface TrialFilter {
  /** Only trials whose primary reward is at least this (trials without a reward are left out). */
  minReward?: number;
  agent?: string;
}

/** The fields of result.json an export relies on; the rest is passed through as it is. */
const ExportedResultSchema = z.looseObject({
  trial_name: z.string(),
  task_name: z.string(),
  agent_name: z.string(),
  job_name: z.string(),
  rewards: z.record(z.string(), z.number()).nullable(),
  error: z.looseObject({ type: z.string(), message: z.string() }).nullable(),
});

export function kindOf(trialName: string): TrialKind {
  if (trialName.startsWith('session__')) return 'session';
  if (trialName.startsWith('rollout__')) return 'rollout';
  return 'trial';
}

export async function* jobTrials(jobDir: string, filter: TrialFilter): AsyncGenerator<ExportTrial> {
  for await (const entry of await opendir(jobDir)) {
    if (!entry.isDirectory() || !isFolderName(entry.name)) continue;
    const dir = path.join(jobDir, entry.name);
    const result = await readInputJson(jobFiles.trialResult(jobDir, entry.name), ExportedResultSchema);
    // A result copied or forged into another trial's folder is not that trial's.
    if (!result || result.trial_name !== entry.name) continue;
    if (filter.agent !== undefined && result.agent_name !== filter.agent) continue;
    if (filter.minReward !== undefined && !((primaryReward(result.rewards) ?? -Infinity) >= filter.minReward)) continue;
    yield { dir, kind: kindOf(entry.name), result: result as unknown as TrialResult };
  }
}

/**
 * A JSON file of a job folder checked against `schema`; undefined when missing. Anything else wrong is the user's
 * input: one problem naming the file (and the field).
 */
export async function readInputJson<S extends z.ZodType>(file: string, schema: S): Promise<z.infer<S> | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new InputError([{ file, message: `cannot be read (${(err as NodeJS.ErrnoException).code})` }]);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new InputError([{ file, message: `not valid JSON (${(err as Error).message})` }]);
  }
  const checked = schema.safeParse(parsed);
  if (!checked.success) throw new InputError(zodProblems(file, checked.error.issues).slice(0, 1));
  return checked.data;
}
