/** Signals and queries of the Job and Trial workflows, shared with the client (pure definitions). */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

import type { JobResult } from '../src/results/job-result';
import type { StepName, TrialStatus, TrialSummary } from '../src/contracts/trial';

/** A Trial tells its Job it finished; by workflow id, so it reaches the Job's newest run after continue-as-new. */
export const trialFinishedSignal = defineSignal<[TrialSummary]>('trialFinished');

export interface RunningTrialInfo {
  trialId: string;
  trialName: string;
  startedAt: string;
}

export interface JobProgress {
  jobName: string;
  status: JobResult['status'];
  total: number;
  finished: number;
  running: number;
  completed: number;
  errored: number;
  cancelled: number;
  infrastructureErrors: number;
  errorsByType: Record<string, number>;
  /** Mean of the primary reward over scored trials so far (null before the first). */
  meanReward: number | null;
  runningTrials: RunningTrialInfo[];
  continuedAsNew: number;
  /** Metrics so far per agent × dataset, as in the job's result.json. */
  evals: JobResult['evals'];
  /** Model usage per agent so far, with retried calls and time waited at the gateway (absent from older workers). */
  usageByAgent?: JobResult['usage_by_agent'];
  /** Live control (`rollout ctl`); absent from jobs started before it existed. */
  control?: JobControlState;
}

export const jobProgressQuery = defineQuery<JobProgress>('progress');

/**
 * `rollout ctl <job> <action>`: one variant per action, told apart by `action`. A new action is one more variant here
 * and one case in ./job/control (its validation and effect) and in src/cli/ctl (its arguments).
 */
export type JobControl =
  | { action: 'pause' }
  | { action: 'resume' }
  | { action: 'concurrency'; value: number }
  | { action: 'policy-version'; value: number };

/** What live control has set, carried across continue-as-new and shown by status, the viewer and the Temporal UI. */
export interface JobControlState {
  /** No trial starts while paused; running trials finish. */
  paused: boolean;
  /** The job's n_concurrent_trials now (job.yaml's until changed). */
  concurrency: number;
  /** The policy version stamped on model calls from now on (job.yaml `policy_version` until changed); docs/rl.md. */
  policy_version?: number;
}

/** Validated in the workflow (a rejected control leaves no trace in its history); returns the state after it. */
export const jobControlUpdate = defineUpdate<JobControlState, [JobControl]>('jobControl');

export interface TrialState {
  status: TrialStatus;
  step: StepName | null;
  hostQueue: string | null;
  restarts: number;
}

export const trialStateQuery = defineQuery<TrialState>('state');
