/** An export format: the JSONL text of one trial, in pieces (a row may be written as it is read), each row ending in \n. */
import { primaryReward } from '../results/job-stats';
import type { ExportTrial } from './trials';

export interface ExportContext {
  /** sharegpt: one row per agent step (Harbor's default) or only the last, whole conversation. */
  episodes: 'all' | 'last';
}

export type ExportFormat = (trial: ExportTrial, context: ExportContext) => AsyncGenerator<string>;

/** Who and how a trial did: in every row of every format. */
export function trialMetadata({ kind, result }: ExportTrial) {
  return {
    job_name: result.job_name,
    trial_name: result.trial_name,
    task_name: result.task_name,
    agent_name: result.agent_name,
    kind,
    reward: primaryReward(result.rewards),
    rewards: result.rewards,
    error: result.error ? { type: result.error.type, message: result.error.message } : null,
  };
}
