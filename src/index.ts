/** The `rollout` package: the library API (docs/api.md). The CLI is bin/rollout.js. */
export { Rollout, JobRun, TrialRun } from './api/rollout';
export type {
  AgentConfigInput,
  ConnectOptions,
  JobConfig,
  SubmitOptions,
  TrialRequest,
  WorkerOptions,
} from './api/rollout';
export { formatProblem, InputError } from './errors';
export type { Problem } from './errors';
export type { JobResult } from './results/job-result';
export type { TrialResult } from './results/trial-result';
export type { JobProgress } from '../workflows/messages';
export type { EnvironmentType } from './job/schema';
