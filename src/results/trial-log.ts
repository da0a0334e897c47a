import { appendFile, mkdir } from 'node:fs/promises';
import path from 'node:path';

import { jobFiles } from './files';

/**
 * `<trial>/trial.log`: one timestamped line per lifecycle event, appended as it happens so a running or crashed
 * trial can be followed. Activities write it through activities/secrets.ts `log`, which redacts the trial's secrets
 * first.
 */
export async function appendTrialLog(jobDir: string, trialName: string, step: string, message: string): Promise<void> {
  const file = jobFiles.trialLog(jobDir, trialName);
  await mkdir(path.dirname(file), { recursive: true });
  const lines = message
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => `${new Date().toISOString()} [${step}] ${line}\n`);
  await appendFile(file, lines.join(''));
}
