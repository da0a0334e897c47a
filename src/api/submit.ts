import { isDeepStrictEqual } from 'node:util';

import type { Client, WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';

import type { jobWorkflow, JobInput } from '../../workflows/job';
import type { trialWorkflow } from '../../workflows/trial';
import { InputError } from '../contracts/errors';
import { jobFiles } from '../results/files';
import { readJobJson, writeSignedJobFile } from '../storage/job-folder';
import { isStoreUrl, joinStoreUrl } from '../storage/location';
import { JOB_TASK_QUEUE } from '../contracts/queues';
import { RolloutJob } from '../../workflows/search-attributes';
import { trialStartOptions } from '../../workflows/trial/start-options';
import type { TrialSpec } from '../contracts/trial';
import { CANCELLED_ERROR } from '../contracts/trial';
import { JOB_BUDGET_ERROR } from '../contracts/trial-errors';
import { startLedger } from '../budget/ledger-client';
import type { JobResult } from '../results/job-result';
import type { ResolvedJob } from '../job/load';
import type { JobPlan } from '../job/plan';
import { writePlanFile } from '../job/plan-file';
import { JOB_FILES } from '../contracts/paths';

/**
 * config.json (the job as resolved, registry datasets pinned to full commits; secrets stay `${VAR}`) and plan.jsonl. An existing job folder with a different
 * configuration is never overwritten: its results would no longer match.
 */
export async function saveJobFolder(plan: JobPlan): Promise<void> {
  await saveJobConfig(plan.job, plan.jobDir);
  await writePlanFile(plan.jobDir, plan.trials);
}

/** config.json alone (single trials and remote rollouts add trials to a job folder without a plan). */
export async function saveJobConfig(job: ResolvedJob, jobDir: string): Promise<void> {
  // Named in messages as users know it: a path, or a URL in an object store.
  const configFile = isStoreUrl(jobDir) ? joinStoreUrl(jobDir, 'config.json') : jobFiles.config(jobDir);
  const existing = await readJobJson<ResolvedJob>(jobDir, 'config.json');
  // Concurrency (max_sandboxes too), log level, the budget and where the job file lies may change between runs of the
  // same job.
  const comparable = (config: ResolvedJob) => ({
    ...config,
    environment: { ...config.environment, max_sandboxes: 0 },
    n_concurrent_trials: 0,
    log_level: 'info',
    file: '',
    budget: undefined,
  });
  if (existing && existing.name !== job.name) {
    // Folder names are derived from job names without collisions (uniqueFolderName); this guards the hash's odds.
    throw new InputError([
      {
        file: configFile,
        message: `${jobDir} holds job "${existing.name}", not "${job.name}": give the job another name`,
      },
    ]);
  }
  if (
    existing &&
    !isDeepStrictEqual(comparable(existing), comparable(JSON.parse(JSON.stringify(job)) as ResolvedJob))
  ) {
    throw new InputError([
      {
        file: configFile,
        message: `job "${job.name}" already exists with a different configuration: give the job another name, or remove ${jobDir}`,
      },
    ]);
  }
  // Where the job file lay is not part of the job: config.json is itself a job file (`rollout resume`).
  const { file: _file, ...saved } = job;
  // Signed: workers act on it (agent commands and env) and refuse it unsigned or changed (src/secrets/job-file-signature.ts).
  await writeSignedJobFile(jobDir, 'config.json', `${JSON.stringify(saved, null, 2)}\n`);
}

export function jobInput(
  job: ResolvedJob,
  plan: JobPlan,
  options: { rerunErrorTypes?: string[]; maxHistoryEvents?: number; reconcileIntervalSec?: number } = {}
): JobInput {
  return {
    jobName: job.name,
    jobDir: plan.jobDir,
    totalTrials: plan.trials.length,
    concurrency: Math.min(job.n_concurrent_trials, job.environment.max_sandboxes ?? Infinity),
    metrics: job.metrics.map((m) => m.type),
    environmentType: job.environment.type,
    deleteImages: job.environment.delete,
    // Trials the job's budget refused run again too: a raised budget carries the job on.
    rerunErrorTypes: [CANCELLED_ERROR, JOB_BUDGET_ERROR, ...(options.rerunErrorTypes ?? [])],
    ...(job.policy_version !== undefined ? { policyVersion: job.policy_version } : {}),
    ...(options.maxHistoryEvents ? { maxHistoryEvents: options.maxHistoryEvents } : {}),
    ...(options.reconcileIntervalSec ? { reconcileIntervalSec: options.reconcileIntervalSec } : {}),
  };
}

/**
 * Starts the Job workflow, or attaches to it when it is already running (never a duplicate). A running job of the
 * same name writing to another folder is refused: attaching would send this run's results there.
 */
export async function startJobWorkflow(
  client: Client,
  plan: JobPlan,
  input: JobInput
): Promise<WorkflowHandleWithFirstExecutionRunId<typeof jobWorkflow>> {
  const { budget } = plan.job;
  if (budget) {
    // The ledger first: the job's first trial's first call is checked against it. A new ledger carries on from what
    // earlier runs spent; a running one (the job resumed while running) takes job.yaml's budget, raised or not.
    const before = (await readJobJson<JobResult>(plan.jobDir, JOB_FILES.result))?.budget;
    const view = await startLedger(client, { name: input.jobName, workflowId: plan.jobWorkflowId, budget }, before);
    input = { ...input, budget: { exhausted: view.exhausted !== null } };
  }
  const handle = await client.workflow.start<typeof jobWorkflow>('jobWorkflow', {
    workflowId: plan.jobWorkflowId,
    taskQueue: JOB_TASK_QUEUE,
    args: [input],
    workflowIdConflictPolicy: 'USE_EXISTING',
    // A finished job may run again: the results on disk decide which trials still need to.
    workflowIdReusePolicy: 'ALLOW_DUPLICATE',
    typedSearchAttributes: [{ key: RolloutJob, value: input.jobName }],
    memo: { jobDir: plan.jobDir },
    staticSummary: `Rollout job ${input.jobName}: ${input.totalTrials} trials`,
  });
  const { memo } = await handle.describe();
  if (memo?.jobDir !== plan.jobDir) {
    throw new InputError([
      {
        file: plan.jobDir,
        message: `job "${input.jobName}" is already running with its results in ${String(memo?.jobDir)}; run it from there or rename this one`,
      },
    ]);
  }
  return handle;
}

/**
 * Starts one Trial workflow on its own (no Job workflow: the library's single trials, `rollout serve`'s remote
 * rollouts). Its id is the idempotency key: starting the same trial twice attaches to the first.
 */
export async function startTrialWorkflow(
  client: Client,
  spec: TrialSpec,
  /** Kept with the workflow for its starter (not passed to it): e.g. a remote rollout's Eval Protocol metadata. */
  memo?: Record<string, unknown>
): Promise<WorkflowHandle<typeof trialWorkflow>> {
  const start = client.workflow.start<typeof trialWorkflow>('trialWorkflow', {
    ...trialStartOptions(spec),
    ...(memo ? { memo } : {}),
    taskQueue: JOB_TASK_QUEUE,
    workflowIdConflictPolicy: 'USE_EXISTING',
    // A finished trial keeps its result: the same id again returns it rather than running anew.
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
  });
  try {
    return await start;
  } catch (err) {
    // Already finished: the same trial, not a new one.
    if (err instanceof WorkflowExecutionAlreadyStartedError) return client.workflow.getHandle(spec.trialId);
    throw err;
  }
}
