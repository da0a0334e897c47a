import { createHash } from 'node:crypto';
import path from 'node:path';

import { agentInfo, catalogueAgent, installsNothing, isOracle } from '../agents/config';
import { envReferences } from '../env-vars';
import { creationPace } from '../environments/creation-rates';
import { environmentKey } from '../environments/env-key';
import { environmentRequirement, providerSettings } from '../environments';
import { importProvider } from '../environments/external';
import { healthcheckBudgetSec } from '../environments/healthcheck';
import { parseBytes, parseCpus } from '../contracts/quantity';
import type { Task } from '../task/load';
import { stepTaskConfig } from '../task/steps';
import { taskEnvProblems } from '../task/task-env';
import type { Problem } from '../contracts/errors';
import { InputError, formatProblem } from '../contracts/errors';
import { MAX_TIMER_SEC } from '../contracts/job-config';
import { overrideCapProblems } from '../task/caps';
import type { TaskResources } from '../contracts/task-config';
import type { MultiStepSpec, PlannedTrial, StepTimeouts, TrialResources, TrialSpec } from '../contracts/trial';
import { readVerifiedJobConfig } from '../storage/job-folder';
import { isStoreUrl, joinStoreUrl } from '../storage/location';
import { loadJobDatasets } from './datasets';
import type { ResolvedJob } from './load';
import type { AgentConfig } from '../contracts/job-config';
import { providerKeys } from '../contracts/job-config';
import { DEFAULT_RETRY_POLICY } from '../trial/retry';

export interface JobPlan {
  /** The job with its registry datasets pinned to full commits: what config.json keeps. */
  job: ResolvedJob;
  jobDir: string;
  jobWorkflowId: string;
  trials: PlannedTrial[];
  warnings: string[];
  /** `${VAR}` references without default that this process's environment does not set. */
  unsetEnvVars: string[];
}

/** Temporal's default maximum workflow id length (development-sql.yaml sets limit.maxIDLength: 255). */
const MAX_ID_LENGTH = 255;
const HOUSEKEEPING_SEC = 300;
const START_SEC = 120;
const ORACLE_INSTALL_SEC = 120;
const DEFAULT_HOST_LOST_SEC = 120;

export function jobWorkflowId(jobName: string): string {
  return `rollout-job/${jobName}`;
}

/** A job's folder: `<jobs_dir>/<name>`, any name made a safe, collision-free folder name (uniqueFolderName). */
export function jobDirOf(job: { jobs_dir: string; name: string }): string {
  if (isStoreUrl(job.jobs_dir)) return joinStoreUrl(job.jobs_dir, uniqueFolderName(job.name));
  return path.join(job.jobs_dir, uniqueFolderName(job.name));
}

/**
 * Expands agents × tasks × attempts into trial specs, validating every task first. Trial order is
 * task → attempt → agent, so trials of one environment run close together and share a warm image.
 */
export async function planJob(job: ResolvedJob, options: { hostLostTimeoutSec?: number } = {}): Promise<JobPlan> {
  importProvider(job.environment, job.file);
  const overCaps = overrideCapProblems(job.environment, job.file);
  if (overCaps.length > 0) throw new InputError(overCaps);
  const loaded = await loadJobDatasets(job, {
    requirement: environmentRequirement(job.environment),
    // An earlier run of this job pinned its registry tasks: keep those commits, as signed (a pin changed in the folder
    // is refused, never signed again as the operator's).
    previous: await readVerifiedJobConfig<ResolvedJob>(jobDirOf(job)),
  });
  const datasets = loaded.datasets;

  const jobDir = jobDirOf(job);
  const workflowId = jobWorkflowId(job.name);
  const taskCounts = new Map<string, number>();
  for (const task of datasets.flatMap((d) => d.tasks)) taskCounts.set(task.name, (taskCounts.get(task.name) ?? 0) + 1);

  const warnings: string[] = [...loaded.warnings];
  const allow = job.environment.task_env_allow;
  const trials: TrialSpec[] = [];
  for (const dataset of datasets) {
    for (const task of dataset.tasks) {
      const envKey = await environmentKey(path.join(task.dir, 'environment'), task.config.environment.docker_image);
      // Two datasets may hold tasks of the same name: their trial names then carry the dataset.
      const prefix = (taskCounts.get(task.name) ?? 0) > 1 ? `${dataset.name}__` : '';
      for (let attempt = 1; attempt <= job.n_attempts; attempt++) {
        for (const agent of job.agents) {
          const trialName = uniqueFolderName(`${prefix}${task.name}__${agent.name}__${attempt}`);
          trials.push({
            jobName: job.name,
            jobDir,
            jobWorkflowId: workflowId,
            trialId: boundedId(`${job.name}/${trialName}`),
            trialName,
            taskName: task.name,
            taskDir: task.dir,
            ...(task.source ? { taskSource: task.source } : {}),
            datasetName: dataset.name,
            agentName: agent.name,
            ...(installsNothing(agent) ? { agentWithoutInstall: agentInfo(agent) } : {}),
            attempt,
            environmentType: job.environment.type,
            envKey,
            timeouts: stepTimeouts(job, task, agent),
            resources: trialResources(job.environment, task.resources),
            collectLimits: {
              maxBytes: parseBytes(job.environment.collect_max_bytes),
              maxFiles: job.environment.collect_max_files,
            },
            forceBuild: job.environment.force_build,
            verify: !job.verifier.disable,
            hostLostTimeoutSec: options.hostLostTimeoutSec ?? DEFAULT_HOST_LOST_SEC,
            environmentSettings: providerSettings(job.environment.type, providerKeys(job.environment)),
            ...creationPace(job.environment.type, job.environment.creates_per_second),
            ...(job.environment.task_env_allow.length ? { taskEnvAllow: job.environment.task_env_allow } : {}),
            ...(task.config.steps ? { multiStep: multiStepSpec(job, task, agent) } : {}),
            ...(job.rate_limits.length > 0 ? { rateLimits: job.rate_limits } : {}),
            ...(job.budget ? { budgeted: true } : {}),
            ...(job.policy_version !== undefined || agent.tokens ? { policyVersion: job.policy_version ?? null } : {}),
            retry: job.retry
              ? {
                  errorTypes: job.retry.error_types,
                  maxRetries: job.retry.max_retries,
                  minWaitSec: job.retry.min_wait_sec,
                  maxWaitSec: job.retry.max_wait_sec,
                }
              : DEFAULT_RETRY_POLICY,
          });
        }
      }
      for (const problem of taskEnvProblems(task.config, path.join(task.dir, 'task.toml'), allow)) {
        warnings.push(`${formatProblem(problem)}: its trials end in MissingEnvironmentVariableError before they build`);
      }
      if (!task.hasSolution && job.agents.some(isOracle)) {
        warnings.push(`${task.dir}: no solution/solve.sh, so its oracle trials will end in SolutionNotFoundError`);
      }
    }
  }

  const overflow = timerOverflow(trials, job.file);
  if (overflow) throw new InputError([overflow]);

  const lastIndexOfEnv = new Map<string, number>();
  trials.forEach((spec, index) => lastIndexOfEnv.set(spec.envKey, index));
  const unsetEnvVars = [
    ...new Set(
      job.agents
        .flatMap((agent) => envReferences(agent.env))
        .filter((ref) => !ref.hasDefault && !process.env[ref.name])
        .map((ref) => ref.name)
    ),
  ].sort();

  return {
    job: loaded.job,
    jobDir,
    jobWorkflowId: workflowId,
    trials: trials.map((spec, index) => ({ spec, envLast: lastIndexOfEnv.get(spec.envKey) === index })),
    warnings,
    unsetEnvVars,
  };
}

/** task.toml limits × timeout_multiplier, with the job's verifier override and ceiling applied. */
export function stepTimeouts(job: ResolvedJob, task: Task, agent: AgentConfig): StepTimeouts {
  const scale = (seconds: number) => seconds * job.timeout_multiplier;
  let verifier =
    job.verifier.override_timeout_sec > 0 ? job.verifier.override_timeout_sec : task.config.verifier.timeout_sec;
  if (job.verifier.max_timeout_sec > 0) verifier = Math.min(verifier, job.verifier.max_timeout_sec);
  return {
    build: scale(task.config.environment.build_timeout_sec),
    // A catalogue agent's start may wait for another trial on the host to finish installing it (install snapshots).
    // Its healthcheck (task.toml) must pass within it too.
    start: scale(
      START_SEC +
        (catalogueAgent(agent)?.kind === 'installed' ? agent.install_timeout_sec : 0) +
        healthcheckBudgetSec(task.config.environment.healthcheck)
    ),
    install: scale(isOracle(agent) ? ORACLE_INSTALL_SEC : agent.install_timeout_sec),
    execute: scale(task.config.agent.timeout_sec),
    verify: scale(verifier),
    collect: scale(HOUSEKEEPING_SEC),
    stop: scale(HOUSEKEEPING_SEC),
    cleanup: scale(HOUSEKEEPING_SEC),
  };
}

/**
 * A timeout longer than a timer can wait (the caps bound each task's, but timeout_multiplier and job.yaml's own
 * timeouts scale them): a problem of the job file, since a timer asked for more fires at once.
 */
function timerOverflow(trials: readonly TrialSpec[], file: string): Problem | undefined {
  for (const spec of trials) {
    const stepTimeouts = (spec.multiStep?.steps ?? []).flatMap((step) => Object.entries(step.timeouts));
    for (const [phase, seconds] of [...Object.entries(spec.timeouts), ...stepTimeouts]) {
      if (seconds <= MAX_TIMER_SEC) continue;
      return {
        file,
        field: 'timeout_multiplier',
        message: `trial ${spec.trialName}'s ${phase} timeout would be ${Math.round(seconds)} s, over the ${MAX_TIMER_SEC} s a timer can wait: lower timeout_multiplier or the timeouts it scales`,
      };
    }
  }
  return undefined;
}

/** A multi-step task's steps, each with its own agent and verifier limits (the task's when unset), scaled alike. */
function multiStepSpec(job: ResolvedJob, task: Task, agent: AgentConfig): MultiStepSpec {
  return {
    strategy: task.config.multi_step_reward_strategy ?? 'mean',
    steps: (task.config.steps ?? []).map((step) => {
      const timeouts = stepTimeouts(job, { ...task, config: stepTaskConfig(task.config, step) }, agent);
      return {
        name: step.name,
        minReward: step.min_reward ?? null,
        // Before its agent, a step's workdir/setup.sh (bounded like the agent) and healthcheck run in the same step.
        timeouts: {
          prepare: timeouts.execute + job.timeout_multiplier * healthcheckBudgetSec(step.healthcheck),
          execute: timeouts.execute,
          verify: timeouts.verify,
        },
      };
    }),
  };
}

export function sanitize(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, '_');
}

/**
 * A job's or a trial's folder name: its name with unsafe characters (and a leading ".") replaced, and then a hash of the original so
 * that two names differing only there (`t 2`, `t_2`) never share a folder. A name the replacement left alone is
 * unique already (job names are; task folder names within a dataset, datasets prefixed when they share a task name)
 * and holds no `~`, unlike every replaced one.
 */
export function uniqueFolderName(name: string): string {
  // A leading "." would make `.`, `..` (a folder above) or a hidden folder; a leading "-" reads as an option.
  const safe = sanitize(name).replace(/^[.-]/, '_');
  if (safe === name) return name;
  return `${safe}~${createHash('sha256').update(name).digest('hex').slice(0, 8)}`;
}

/** Keeps workflow ids under the server's length limit; long ones end in a hash so they stay unique. */
export function boundedId(id: string): string {
  if (id.length <= MAX_ID_LENGTH) return id;
  const digest = createHash('sha256').update(id).digest('hex').slice(0, 12);
  return `${id.slice(0, MAX_ID_LENGTH - digest.length - 1)}~${digest}`;
}

/** A trial's resources: the task's, or the job's overrides (override_cpus, override_memory, override_storage, pids_limit). */
export function trialResources(
  environment: Pick<
    ResolvedJob['environment'],
    'override_cpus' | 'override_memory' | 'override_storage' | 'pids_limit'
  >,
  task: TaskResources
): TrialResources {
  return {
    cpus: environment.override_cpus ? parseCpus(environment.override_cpus) : task.cpus,
    memoryBytes: environment.override_memory ? parseBytes(environment.override_memory) : task.memoryBytes,
    storageBytes: environment.override_storage ? parseBytes(environment.override_storage) : task.storageBytes,
    pidsLimit: environment.pids_limit ?? task.pidsLimit,
  };
}
