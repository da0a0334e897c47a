import { readFile, stat } from 'node:fs/promises';

import { jobFiles, writeFileAtomic } from '../results/files';
import type { PlannedTrial } from './plan';

/**
 * `<job>/plan.jsonl`: one planned trial per line. The Job workflow reads it in pages through an activity, so trial
 * specs never travel as one huge workflow input.
 */
export async function writePlanFile(jobDir: string, trials: PlannedTrial[]): Promise<void> {
  await writeFileAtomic(jobFiles.plan(jobDir), trials.map((trial) => JSON.stringify(trial)).join('\n') + '\n');
}

let cached: { file: string; mtimeMs: number; trials: PlannedTrial[] } | undefined;

export async function readPlanPage(jobDir: string, offset: number, limit: number): Promise<PlannedTrial[]> {
  const file = jobFiles.plan(jobDir);
  const { mtimeMs } = await stat(file);
  if (!cached || cached.file !== file || cached.mtimeMs !== mtimeMs) {
    const lines = (await readFile(file, 'utf8')).split('\n').filter((line) => line.length > 0);
    cached = { file, mtimeMs, trials: lines.map((line) => JSON.parse(line) as PlannedTrial) };
  }
  return cached.trials.slice(offset, offset + limit);
}
