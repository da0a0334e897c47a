/**
 * A trial that runs again (job.yaml `retry` after an API error, or a restart after an infrastructure failure) starts
 * with an empty folder, but the model calls of its earlier runs were made and paid for: their gateway records are
 * kept in `<trial>/earlier-runs/<n>/llm-calls.jsonl`, and the trial's `usage` counts them. The trajectory is the
 * final run's.
 */
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent } from '../files/absent';
import { EARLIER_RUNS_DIR, LLM_CALLS_FILE, SANDBOX_RECORD_FILE, trialLayout } from '../contracts/paths';

/**
 * Empties the trial folder for a new run, keeping earlier runs' model-call records (the last run's moved in) and the
 * record of the sandboxes they created (what they left is removed by the new run's start).
 */
export async function startTrialRun(trialDir: string): Promise<void> {
  const earlier = trialLayout(trialDir).earlierRuns;
  const calls = trialLayout(trialDir).llmCalls;
  const kept = (await listRuns(trialDir)).length;
  // Only a run that made model calls leaves a record: no earlier-runs/ folder for the others (the first run above all).
  if (await ifPresent(stat(calls))) {
    await mkdir(path.join(earlier, String(kept + 1)), { recursive: true });
    await rename(calls, path.join(earlier, String(kept + 1), LLM_CALLS_FILE));
  }
  const entries = (await ifPresent(readdir(trialDir))) ?? [];
  await Promise.all(
    entries
      .filter((name) => name !== EARLIER_RUNS_DIR && name !== SANDBOX_RECORD_FILE)
      .map((name) => rm(path.join(trialDir, name), { recursive: true, force: true }))
  );
}

/** The calls files of earlier runs, oldest first. */
export async function earlierCallFiles(trialDir: string): Promise<string[]> {
  return (await listRuns(trialDir)).map((run) => path.join(trialDir, EARLIER_RUNS_DIR, run, LLM_CALLS_FILE));
}

async function listRuns(trialDir: string): Promise<string[]> {
  const names = (await ifPresent(readdir(trialLayout(trialDir).earlierRuns))) ?? [];
  return names.filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(a) - Number(b));
}
