import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';

import type { Client } from '@temporalio/client';
import { WorkflowFailedError } from '@temporalio/client';

import type { jobWorkflow } from '../../workflows';
import type { JobProgress } from '../../workflows/messages';
import { jobProgressQuery } from '../../workflows/messages';
import { budgetLedgerId } from '../budget/workflow/ledger';
import { startWorkers } from '../../workers/create-workers';
import type { LeaseHolder } from '../../workers/host-lease';
import { workflowBundle } from '../../workers/workflow-bundle';
import { InputError } from '../contracts/errors';
import { checkProvider, createEnvironment } from '../environments';
import { importProvider } from '../environments/external';
import type { ResolvedJob } from '../job/load';
import { loadJobFile } from '../job/load';
import type { JobPlan } from '../job/plan';
import { jobDirOf, jobWorkflowId, planJob } from '../job/plan';
import { probeUpstreams, upstreamChecks } from '../job/preflight';
import { loadWorkerConfig, workerCaps } from '../job/worker-config';
import type { WorkerCaps } from '../task/worker-caps';
import { plannedCapProblems } from '../task/worker-caps';
import type { RateLimitRule } from '../contracts/job-config';
import type { BudgetLimits } from '../budget/workflow/spend';
import { startServices } from '../job/services';
import { jobInput, saveJobFolder, startJobWorkflow } from '../api/submit';
import { jobFiles } from '../results/files';
import { checkStore } from '../storage/check';
import { jobStore, readJobJson, readVerifiedJobConfig } from '../storage/job-folder';
import { isStoreUrl } from '../storage/location';
import { packLocalTasks } from '../task/archives';
import { workingJobDir } from '../storage/working-dir';
import { loadStoredJob } from './stored-jobs';
import type { JobResult } from '../results/job-result';
import type { TemporalEndpoint } from '../temporal/connect';
import {
  connectClient,
  ensureSearchAttributes,
  resolveTemporal,
  resultAcrossRestarts,
  workflowUiUrl,
} from '../temporal/connect';
import { ifWorkflowExists } from '../workflow-not-found';
import type { GateOptions } from './gate';
import { applyGate, gateRequested } from './gate';
import { installQuietRuntime } from '../temporal/runtime';
import { log } from '../log';
import { ProgressView } from './progress';
import { heldQueuesLines } from './held-queues';
import { renderReport } from './report';
import { JOB_FILES } from '../contracts/paths';

export interface RunOptions {
  /** Run no worker here: only submit and watch (workers run elsewhere with `rollout worker`). */
  worker: boolean;
  /** Error types of finished trials to run again (CancelledError always). */
  rerunErrorTypes?: string[];
  hostId?: string;
  maxTrials?: number;
  /** CI gate: thresholds, error bound and JUnit file, applied to the results once the job completed. */
  gate?: GateOptions;
  /** Start without checking each gateway agent's upstream (key present, one cheap authenticated call). */
  skipPreflight?: boolean;
}

const POLL_MS = 500;
const DETACHED = Symbol('detached');
/** 128 + SIGINT, as shells report an interrupted command. */
const EXIT_DETACHED = 130;

/** `rollout resume <job>`: the job as saved in its folder's config.json, run again; finished trials are skipped. */
export async function resumeJob(
  nameOrDir: string,
  jobsDir: string,
  options: RunOptions,
  budget?: BudgetLimits
): Promise<number> {
  // A budget given on the command line replaces the stored one's keys it names (a raised budget carries on).
  const withBudget = (job: ResolvedJob): ResolvedJob =>
    budget ? { ...job, budget: { ...job.budget, ...budget } } : job;
  if (isStoreUrl(nameOrDir) || isStoreUrl(jobsDir))
    return runJob(withBudget(await loadStoredJob(nameOrDir, jobsDir)), nameOrDir, options);
  const dir = existsSync(jobFiles.config(nameOrDir)) ? nameOrDir : jobDirOf({ jobs_dir: jobsDir, name: nameOrDir });
  const file = jobFiles.config(dir);
  if (!existsSync(file)) {
    throw new InputError([
      { file, message: `no job "${nameOrDir}" here (give its name with --jobs-dir, or its folder)` },
    ]);
  }
  // Verified before it is run and signed again: a config.json changed in the folder, or copied from another job's, is
  // refused (exit 2), never re-signed as the operator's. The job is the content verified, not a second read.
  const verified = await readVerifiedJobConfig<Record<string, unknown>>(dir);
  return runJob(withBudget(await loadJobFile(file, () => verified ?? {})), file, options);
}

/**
 * `rollout run`: validate, plan, start (or attach to) the Job workflow, run a worker, watch, report. `file` names the
 * job file (or the command line) in problems.
 */
export async function runJob(job: ResolvedJob, file: string, options: RunOptions): Promise<number> {
  // The worker's slowest part to start: its bundle is looked up (a digest of the compiled code) while the job is
  // planned. A failure surfaces when the worker asks for it.
  if (options.worker) workflowBundle().catch(() => undefined);
  // The provider checks its configuration, and its backend (the Docker daemon) answers, while the tasks are read; a
  // failure counts only once the input is known valid.
  // A provider from outside the repository (environment.import) is loaded first, to check it and run its trials.
  importProvider(job.environment, job.file);
  const preflight = options.worker
    ? checkProvider(job.environment).then(() =>
        createEnvironment(job.environment.type, { hostId: 'preflight', deployment: 'none' }).ping()
      )
    : Promise.resolve();
  preflight.catch(() => undefined);
  // A job in an object store: the store answers (one line naming it, exit 3, otherwise) before anything is planned.
  if (isStoreUrl(job.jobs_dir)) {
    await checkStore(await jobStore(job.jobs_dir));
  }
  const plan = await planJob(job, { hostLostTimeoutSec: numberFromEnv('ROLLOUT_HOST_LOST_TIMEOUT_SEC') });
  if (isStoreUrl(job.jobs_dir)) {
    const { packed, sent } = await packLocalTasks(plan.trials, job.jobs_dir);
    if (packed > 0)
      log.info(`${packed} local task(s) packed into ${job.jobs_dir} (${sent} sent, the rest already there)`);
  }
  installQuietRuntime(job.log_level, { ownsWorkflow: (id) => ofJob(job.name, id) });
  for (const warning of plan.warnings) log.warn(warning);
  if (options.worker && plan.unsetEnvVars.length > 0) {
    throw new InputError(
      plan.unsetEnvVars.map((name) => ({
        file,
        field: 'agents[].env',
        message: `\${${name}} is not set in this environment`,
      }))
    );
  }
  const upstreams = options.worker && !options.skipPreflight ? upstreamChecks(job.agents, file) : [];
  // ROLLOUT_WORKER_CONFIG is read (and its problems reported) before anything starts.
  const workerConfig = options.worker ? await loadWorkerConfig() : undefined;
  const caps = workerConfig && workerCaps(workerConfig);
  // The embedded worker would refuse these trials one by one: the job is refused now instead.
  const overCaps = caps
    ? plannedCapProblems(
        plan.trials.map((trial) => trial.spec),
        caps,
        job
      )
    : [];
  if (overCaps.length > 0) throw new InputError(overCaps);
  await preflight;
  await saveJobFolder(plan);
  const services = await startServices(job.services, path.join(workingJobDir(plan.jobDir), 'services'));
  try {
    // After the job's services: one of them may be the model server.
    await probeUpstreams(upstreams);
    return await watchJob(job, file, plan, { ...options, rateLimits: workerConfig?.rate_limits, caps });
  } finally {
    await services.stop();
  }
}

async function watchJob(
  job: ResolvedJob,
  file: string,
  plan: JobPlan,
  options: RunOptions & { rateLimits?: RateLimitRule[]; caps?: WorkerCaps }
): Promise<number> {
  const endpoint = await resolveTemporal({ startDevServer: true });
  const { connection, client } = await connectClient(endpoint);

  // The worker starts (its slowest part: a second or more under load) while the job is submitted: its first
  // workflow task should find a worker polling.
  const workerStart = options.worker ? startJobWorkers(endpoint, client, job, options) : undefined;
  const handle = await ensureSearchAttributes(connection, endpoint.namespace)
    .then(() => startJobWorkflow(client, plan, jobInput(job, plan, options)))
    .catch(async (err: unknown) => {
      await (await workerStart?.catch(() => undefined))?.stop();
      throw err;
    });
  log.info(`job ${job.name}: ${plan.trials.length} trials → ${plan.jobDir}`);
  const uiUrl = workflowUiUrl(endpoint, plan.jobWorkflowId);
  if (uiUrl) log.info(`Temporal UI: ${uiUrl}`);

  const workerRun = await workerStart;
  const view = new ProgressView();
  // Aborted once the job ended: the last poll's wait must not hold the exit.
  const finished = new AbortController();
  const held = heldQueuesNotice(workerRun?.heldBy ?? [], plan, job.environment.delete);
  const poll = (async () => {
    while (!finished.signal.aborted) {
      const progress = await handle.query(jobProgressQuery).catch(() => undefined);
      if (progress) held(progress);
      if (progress && !finished.signal.aborted) view.update(progress);
      await sleep(POLL_MS, undefined, { signal: finished.signal }).catch(() => undefined);
    }
  })();

  // Ctrl-C (or SIGTERM) stops the in-process worker: the job itself lives on in Temporal, so detach and say how to
  // carry on, instead of waiting for a result no worker here will produce.
  const detached = workerRun?.done.then(
    (): typeof DETACHED => DETACHED,
    (): typeof DETACHED => DETACHED
  );
  let final: JobProgress | typeof DETACHED;
  try {
    final = await Promise.race([resultAcrossRestarts(handle), ...(detached ? [detached] : [])]);
  } catch (err) {
    await workerRun?.stop();
    await connection.close();
    if (err instanceof WorkflowFailedError) {
      throw new Error(`job ${job.name} failed: ${err.cause?.message ?? err.message}`, { cause: err });
    }
    throw err;
  } finally {
    finished.abort();
  }
  if (final === DETACHED) {
    view.done();
    console.error(
      `detached: job ${job.name} is paused until a worker runs. Continue with ` +
        `${existsSync(file) ? `\`rollout ${file}\` (or \`rollout resume ${job.name}\`)` : `\`rollout resume ${job.name}\``}` +
        `, or cancel it with \`rollout cancel ${job.name}\`.`
    );
    await connection.close();
    return EXIT_DETACHED;
  }
  await poll;
  // The workflow's return value is its final progress: no query (which would replay the whole closed workflow).
  view.update(final);
  view.done();
  await workerRun?.drain((trials) =>
    log.info(
      `waiting for ${trials} trial(s) of other jobs that this process's worker is running (Ctrl-C leaves them to other workers)`
    )
  );
  await connection.close();

  const result = await readJobJson<JobResult>(plan.jobDir, JOB_FILES.result);
  if (result) console.log(renderReport(result));
  console.log(`results: ${plan.jobDir}`);
  if (uiUrl) console.log(`Temporal UI: ${uiUrl}`);
  const code = final.status === 'completed' ? 0 : 1;
  if (!options.gate || !gateRequested(options.gate)) return code;
  if (!result) throw new Error(`${plan.jobDir}: its result.json is missing: no verdict`);
  const gateCode = await applyGate(plan.jobDir, job.name, result, options.gate);
  return code === 0 ? gateCode : code;
}

/** `rollout cancel <job>`: cancels the Job workflow and, with a worker here, runs the trials' clean-up. */
export async function cancelJob(jobName: string, options: { worker: boolean; hostId?: string }): Promise<number> {
  const endpoint = await resolveTemporal({ startDevServer: false });
  const { connection, client } = await connectClient(endpoint);
  const handle = client.workflow.getHandle<typeof jobWorkflow>(jobWorkflowId(jobName));
  const description = await ifWorkflowExists(handle.describe());
  if (!description) throw new InputError([{ file: jobName, message: 'no such job on this Temporal server' }]);
  if (description.status.name !== 'RUNNING') {
    console.log(`job ${jobName} is not running (${description.status.name.toLowerCase()})`);
    await connection.close();
    return 0;
  }
  const config = await readJobJson<ResolvedJob>(description.memo?.jobDir as string, 'config.json');
  const workerRun =
    options.worker && config ? await startJobWorkers(endpoint, client, config, { hostId: options.hostId }) : undefined;
  try {
    await handle.cancel();
    const final = await resultAcrossRestarts(handle);
    console.log(`job ${jobName} cancelled: ${final.finished}/${final.total} trials finished, partial results kept`);
  } finally {
    await workerRun?.stop();
    await connection.close();
  }
  return 0;
}

/** This process's workers for one job: its environment type, workflows too, as many trials as the job runs at once. */
function startJobWorkers(
  endpoint: TemporalEndpoint,
  client: Client,
  job: ResolvedJob,
  {
    hostId,
    maxTrials,
    rateLimits,
    caps,
  }: { hostId?: string; maxTrials?: number; rateLimits?: RateLimitRule[]; caps?: WorkerCaps }
) {
  return startWorkers({
    address: endpoint.address,
    namespace: endpoint.namespace,
    connectionOptions: endpoint.connection,
    client,
    hostId,
    environmentTypes: [job.environment.type],
    maxTrials: maxTrials ?? job.n_concurrent_trials,
    serveWorkflows: true,
    rateLimits,
    caps,
  });
}

/**
 * Live processes of this host hold the queues before ours: a resumed job's running trials, then the removal of the
 * images they built, may wait for them. One line for each wait, when it starts.
 */
function heldQueuesNotice(heldBy: LeaseHolder[], plan: JobPlan, deleteImages: boolean) {
  let told: 'nothing' | 'trials' | 'all' = heldBy.length > 0 ? 'nothing' : 'all';
  return (progress: JobProgress) => {
    if (told === 'nothing' && progress.running > 0) {
      log.info(heldQueuesLines(heldBy, new Date()).trials(plan.trials[0]?.spec.hostLostTimeoutSec ?? 0));
      told = 'trials';
    } else if (told === 'trials' && progress.finished === progress.total) {
      if (deleteImages) log.info(heldQueuesLines(heldBy, new Date()).images());
      told = 'all';
    }
  };
}

function numberFromEnv(name: string): number | undefined {
  const value = process.env[name];
  return value ? Number(value) : undefined;
}

/** A workflow of this job: its Job workflow, its trials (`<job>/<trial>`), its budget ledger. */
function ofJob(jobName: string, workflowId: string): boolean {
  return (
    workflowId.startsWith(`${jobName}/`) ||
    workflowId === jobWorkflowId(jobName) ||
    workflowId === budgetLedgerId(jobName)
  );
}
