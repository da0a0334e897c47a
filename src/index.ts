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
export { formatProblem, InputError } from './contracts/errors';
export type { Problem } from './contracts/errors';
export type { JobResult } from './results/job-result';
export type { TrialResult } from './results/trial-result';
export type { JobProgress } from '../workflows/messages';
export type { EnvironmentType } from './contracts/job-config';

// The environment provider contract (docs/providers.md): what a provider from outside the repository implements.
export type { Capability, EnvironmentProvider, ProviderCapabilities, RequirementTask } from './contracts/provider';
export { ProviderConfigError } from './contracts/provider';
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
} from './contracts/environment';
export { TaskEnvironmentError } from './contracts/environment';
export type { CollectBudget } from './environments/host-files';
export type { EnvironmentHandle } from './contracts/trial';
