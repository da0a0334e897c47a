/**
 * A trial that runs again (job.yaml `retry` after an API error, or a restart after an infrastructure failure) starts
 * with an empty folder, but the model calls of its earlier runs were made and paid for: their gateway records are
 * kept in `<trial>/earlier-runs/<n>/llm-calls.jsonl`, and the trial's `usage` counts them. The trajectory is the
 * final run's.
 */
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';

import { LLM_CALLS_FILE } from '../gateway/records';

export const EARLIER_RUNS_DIR = 'earlier-runs';

/** Empties the trial folder for a new run, keeping earlier runs' model-call records (the last run's moved in). */
export async function startTrialRun(trialDir: string): Promise<void> {
  const earlier = path.join(trialDir, EARLIER_RUNS_DIR);
  const calls = path.join(trialDir, 'agent', LLM_CALLS_FILE);
  const kept = (await listRuns(trialDir)).length;
  try {
    await mkdir(path.join(earlier, String(kept + 1)), { recursive: true });
    await rename(calls, path.join(earlier, String(kept + 1), LLM_CALLS_FILE));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    await rm(path.join(earlier, String(kept + 1)), { recursive: true, force: true });
  }
  const entries = await readdir(trialDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  await Promise.all(
    entries
      .filter((name) => name !== EARLIER_RUNS_DIR)
      .map((name) => rm(path.join(trialDir, name), { recursive: true, force: true }))
  );
}

/** The calls files of earlier runs, oldest first. */
export async function earlierCallFiles(trialDir: string): Promise<string[]> {
  return (await listRuns(trialDir)).map((run) => path.join(trialDir, EARLIER_RUNS_DIR, run, LLM_CALLS_FILE));
}

async function listRuns(trialDir: string): Promise<string[]> {
  const names = await readdir(path.join(trialDir, EARLIER_RUNS_DIR)).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  return names.filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(a) - Number(b));
}
