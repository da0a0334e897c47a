/** The `rollout-agents` package: the library API (docs/api.md). The CLI is bin/rollout.js. */
export { Rollout, JobRun, TrialRun } from './api/rollout';
export type { TemporalConnectionOptions } from './temporal/envconfig';
export { TemporalConfigError } from './temporal/envconfig';
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

// The environment provider contract (docs/providers.md): what a provider from outside the repository implements.
export type { Capability, EnvironmentProvider, ProviderCapabilities, RequirementTask } from './environments/provider';
export { ProviderConfigError } from './environments/provider';
export type {
  BuildRequest,
  BuildResult,
  Environment,
  EnvironmentOwner,
  ExecRequest,
  ExecResult,
  HeldEnvironment,
  ProviderSettings,
  StartFile,
  StartRequest,
  StartResult,
} from './environments/environment';
export { TaskEnvironmentError } from './environments/environment';
export type { CollectBudget } from './environments/host-files';
export type { EnvironmentHandle } from './trial/types';
