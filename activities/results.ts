import type { JobResult } from '../src/results/job-result';
import { jobFiles, readJson, writeJsonAtomic } from '../src/results/files';
import { appendTrialLog } from '../src/results/trial-log';
import type { TrialResult } from '../src/results/trial-result';
import type { TrialSpec } from '../src/trial/types';

export interface WriteTrialResultInput {
  spec: TrialSpec;
  result: TrialResult;
}

/**
 * `<job>/<trial>/result.json`, written atomically by the worker that ran the trial, as the trial finishes; failed
 * clean-up steps also go to trial.log.
 */
export async function writeTrialResult({ spec, result }: WriteTrialResultInput): Promise<void> {
  for (const error of result.cleanup_errors ?? []) {
    await appendTrialLog(
      spec.jobDir,
      spec.trialName,
      error.step,
      `failed on ${error.host ?? 'no host'}: ${error.type}: ${error.message}`
    );
  }
  await writeJsonAtomic(jobFiles.trialResult(spec.jobDir, spec.trialName), result);
}

export interface WriteJobResultInput {
  jobDir: string;
  result: JobResult;
}

/**
 * `<job>/result.json`, rewritten atomically as trials finish. An attempt that timed out may still run after a newer
 * result was written: it must not put its older one back. Results are ordered by `updated_at` (workflow time, which
 * only moves forward, across continue-as-new and later runs of the job too).
 */
export async function writeJobResult({ jobDir, result }: WriteJobResultInput): Promise<void> {
  const file = jobFiles.result(jobDir);
  await writeJsonAtomic(file, result, async () => {
    const current = await readJson<JobResult>(file);
    return !current || current.updated_at <= result.updated_at;
  });
}
