import type { JobResult } from '../src/results/job-result';
import { jobFiles, writeJsonAtomic } from '../src/results/files';
import type { TrialResult } from '../src/results/trial-result';
import type { TrialSpec } from '../src/trial/types';

export interface WriteTrialResultInput {
  spec: TrialSpec;
  result: TrialResult;
}

/** `<job>/<trial>/result.json`, written atomically by the worker that ran the trial, as the trial finishes. */
export async function writeTrialResult({ spec, result }: WriteTrialResultInput): Promise<void> {
  await writeJsonAtomic(jobFiles.trialResult(spec.jobDir, spec.trialName), result);
}

export interface WriteJobResultInput {
  jobDir: string;
  result: JobResult;
}

/** `<job>/result.json`, rewritten atomically as trials finish. */
export async function writeJobResult({ jobDir, result }: WriteJobResultInput): Promise<void> {
  await writeJsonAtomic(jobFiles.result(jobDir), result);
}
