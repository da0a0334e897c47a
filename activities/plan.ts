import { readPlanPage as readPlanFilePage } from '../src/job/plan-file';
import type { PlannedTrial } from '../src/contracts/trial';
import { readJobJson } from '../src/storage/job-folder';
import type { TrialResult } from '../src/results/trial-result';
import { summaryFromResult } from '../src/results/trial-result';
import type { TrialSummary } from '../src/contracts/trial';

export interface PlanPageInput {
  jobDir: string;
  offset: number;
  limit: number;
  /** Finished trials whose error is one of these run again (resume re-runs cancelled trials by default). */
  rerunErrorTypes: string[];
}

export interface PlanPageEntry {
  trial: PlannedTrial;
  /** Set when the trial already finished (its result.json is in the job folder): the job counts it and skips it. */
  finished: TrialSummary | null;
}

/** A page of the job's plan, each trial marked with its result when it already finished. */
export async function readPlanPage(input: PlanPageInput): Promise<PlanPageEntry[]> {
  const trials = await readPlanFilePage(input.jobDir, input.offset, input.limit);
  return Promise.all(
    trials.map(async (trial) => {
      const result = await readJobJson<TrialResult>(input.jobDir, `${trial.spec.trialName}/result.json`);
      const rerun = !result || (result.error !== null && input.rerunErrorTypes.includes(result.error.type));
      return { trial, finished: rerun ? null : summaryFromResult(trial.spec, result, []) };
    })
  );
}
