/**
 * The library API: what a trainer or an optimisation loop uses from its own process instead of job.yaml and the
 * CLI. Everything durable lives in Temporal and the job folder, so a process that restarts picks up where it was.
 */
import { appendFile, mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client, Connection, WorkflowHandle } from '@temporalio/client';

import type { jobWorkflow, trialWorkflow } from '../../workflows';
import type { JobControlState, JobProgress } from '../../workflows/messages';
import { jobControlUpdate, jobProgressQuery } from '../../workflows/messages';
import { jobControlProblem } from '../../workflows/job/control';
import type { RunningWorkers } from '../../workers/create-workers';
import { defaultHostId, startWorkers } from '../../workers/create-workers';
import { InputError } from '../contracts/errors';
import { parseJobConfig } from '../job/load';
import { readPlanPage } from '../job/plan-file';
import { boundedId, jobWorkflowId, planJob, sanitize, uniqueFolderName } from '../job/plan';
import type { AgentSchema, EnvironmentType, JobConfigInput } from '../contracts/job-config';
import { PROVIDERS } from '../environments/registry';
import { jobInput, saveJobConfig, saveJobFolder, startJobWorkflow, startTrialWorkflow } from './submit';
import { jobFiles, readJson } from '../results/files';
import type { JobResult } from '../results/job-result';
import type { TrialResult } from '../results/trial-result';
import type { TemporalEndpoint } from '../temporal/connect';
import { connectClient, ensureSearchAttributes, resolveTemporal } from '../temporal/connect';
import type { TemporalConnectionOptions } from '../temporal/envconfig';
import { ifWorkflowExists } from '../workflow-not-found';
import { installQuietRuntime } from '../temporal/runtime';
import type { TrialSpec } from '../contracts/trial';
import type { z } from 'zod';

/** What an embedded worker serves unless told: the providers that run on its own host (no cluster or cloud to set up). */
const DEFAULT_WORKER_TYPES = PROVIDERS.filter((provider) => provider.capabilities.hostBound).map((p) => p.type);

export interface WorkerOptions {
  /** Environment types this process runs trials on (default: all built-in ones). */
  environmentTypes?: EnvironmentType[];
  /** Trials this process may hold at once (default 8). */
  maxTrials?: number;
  /** Names this host's task queues (default: ROLLOUT_HOST_ID or the hostname). */
  hostId?: string;
}

export interface ConnectOptions {
  /**
   * Temporal frontend; default Temporal's environment configuration (TEMPORAL_ADDRESS, TEMPORAL_PROFILE, a
   * temporal.toml profile, with its TLS and API key), else the embedded dev server (started when needed).
   */
  address?: string;
  namespace?: string;
  /** With `address`: its TLS, API key, gRPC metadata (without `address` they come from the configuration). */
  connection?: TemporalConnectionOptions;
  /**
   * Run workers in this process (default), with these options; `false` when workers run elsewhere
   * (`rollout worker`).
   */
  worker?: boolean | WorkerOptions;
}

/** A job config as in job.yaml, with its name required (it names the job folder and the workflow). */
export type JobConfig = JobConfigInput & { name: string };
export type AgentConfigInput = z.input<typeof AgentSchema>;

export interface SubmitOptions {
  /** Relative dataset paths resolve against this folder (default: the working folder). */
  baseDir?: string;
}

export interface TrialRequest {
  /** A task folder. */
  task: string;
  agent: AgentConfigInput;
  /** Job folder the trial's results go to, and its name (default "trials"). */
  job?: string;
  jobsDir?: string;
  environment?: EnvironmentType;
  /**
   * Identifies the trial: submitting the same id again attaches to the first (default: a fresh one). Letters,
   * digits, ".", "_" and "-".
   */
  id?: string;
}

const POLL_MS = 250;

export class Rollout {
  private constructor(
    readonly client: Client,
    private readonly connection: Connection,
    readonly endpoint: TemporalEndpoint,
    private readonly workers: RunningWorkers | undefined
  ) {}

  static async connect(options: ConnectOptions = {}): Promise<Rollout> {
    const endpoint: TemporalEndpoint = options.address
      ? {
          address: options.address,
          namespace: options.namespace ?? 'default',
          uiUrl: null,
          connection: options.connection,
        }
      : {
          ...(await resolveTemporal({ startDevServer: true })),
          ...(options.namespace ? { namespace: options.namespace } : {}),
        };
    const { connection, client } = await connectClient(endpoint);
    await ensureSearchAttributes(connection, endpoint.namespace);
    const worker = options.worker ?? true;
    if (worker) installQuietRuntime();
    const workers = worker
      ? await startWorkers({
          address: endpoint.address,
          namespace: endpoint.namespace,
          connectionOptions: endpoint.connection,
          client,
          hostId: (worker === true ? undefined : worker.hostId) ?? defaultHostId(),
          environmentTypes: (worker === true ? undefined : worker.environmentTypes) ?? [...DEFAULT_WORKER_TYPES],
          maxTrials: (worker === true ? undefined : worker.maxTrials) ?? 8,
          serveWorkflows: true,
        })
      : undefined;
    return new Rollout(client, connection, endpoint, workers);
  }

  /** Validates the config (same schema and errors as job.yaml), saves the job folder and starts the job. */
  async submitJob(config: JobConfig, options: SubmitOptions = {}): Promise<JobRun> {
    // A config from JavaScript may lack the name its type requires: that is an InputError, as the docs say.
    const source = typeof config.name === 'string' ? `job ${config.name}` : 'submitJob config';
    const job = parseJobConfig(config, source, options.baseDir ?? process.cwd());
    const plan = await planJob(job);
    if (plan.unsetEnvVars.length > 0 && this.workers) {
      throw new InputError(
        plan.unsetEnvVars.map((name) => ({
          file: source,
          field: 'agents[].env',
          message: `\${${name}} is not set in this environment`,
        }))
      );
    }
    await saveJobFolder(plan);
    const handle = await startJobWorkflow(this.client, plan, jobInput(job, plan));
    return new JobRun(job.name, plan.jobDir, handle);
  }

  /** A job started earlier (by this process before a restart, or by the CLI): by name. */
  async job(name: string): Promise<JobRun> {
    const handle = this.client.workflow.getHandle<typeof jobWorkflow>(jobWorkflowId(name));
    const description = await ifWorkflowExists(handle.describe());
    const jobDir = description?.memo?.jobDir;
    if (typeof jobDir !== 'string')
      throw new InputError([{ file: name, message: 'no such job on this Temporal server' }]);
    return new JobRun(name, jobDir, handle);
  }

  /** One trial of one task, outside any Job workflow; its result goes to `<jobsDir>/<job>/<trial>/`. */
  async submitTrial(request: TrialRequest): Promise<TrialRun> {
    const jobName = request.job ?? 'trials';
    const job = parseJobConfig(
      {
        name: jobName,
        jobs_dir: request.jobsDir ?? 'jobs',
        environment: { type: request.environment ?? 'docker' },
        agents: [request.agent],
        datasets: [{ path: request.task }],
      },
      `trial ${request.task}`,
      process.cwd()
    );
    const [planned] = (await planJob(job)).trials;
    if (!planned) throw new InputError([{ file: request.task, message: 'not a task folder' }]);
    const id = request.id ?? `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    const spec = namedTrial(planned.spec, `${planned.spec.taskName}__${id}`);
    await saveJobConfig(job, spec.jobDir);
    const handle = await startTrialWorkflow(this.client, spec);
    return new TrialRun(spec, handle);
  }

  /** Stops this process's workers (trials they hold pause until a worker runs again) and disconnects. */
  async close(): Promise<void> {
    await this.workers?.stop();
    await this.connection.close();
  }
}

/** A planned trial renamed `trialName`: its own folder and workflow id (the same name is the same trial). */
export function namedTrial(spec: TrialSpec, trialName: string): TrialSpec {
  const name = uniqueFolderName(trialName);
  return { ...spec, trialName: name, trialId: boundedId(`${spec.jobName}/${name}`), attempt: 1 };
}

export class JobRun {
  constructor(
    readonly name: string,
    /** The job folder: config.json, plan.jsonl, result.json and one folder per trial. */
    readonly dir: string,
    private readonly handle: WorkflowHandle<typeof jobWorkflow>
  ) {}

  get workflowId(): string {
    return this.handle.workflowId;
  }

  /** Counts so far (needs a worker serving workflows to answer). */
  progress(): Promise<JobProgress> {
    return this.handle.query(jobProgressQuery);
  }

  /**
   * Each trial's result as it finishes (those already finished first), until the job ends. With `consumer`, what
   * that consumer took is remembered in the job folder (`delivered/<consumer>.jsonl`, written when it asks for the
   * next one): after a restart it gets only what it had not taken yet, including trials that finished meanwhile.
   */
  async *results(options: { consumer?: string; pollMs?: number } = {}): AsyncGenerator<TrialResult> {
    const trialNames = (await readPlanPage(this.dir, 0, Number.MAX_SAFE_INTEGER)).map((t) => t.spec.trialName);
    const deliveredFile = options.consumer
      ? path.join(this.dir, 'delivered', `${sanitize(options.consumer)}.jsonl`)
      : undefined;
    const delivered = deliveredFile ? await readLines(deliveredFile) : new Set<string>();
    const pending = trialNames.filter((name) => !delivered.has(name));
    if (deliveredFile) await mkdir(path.dirname(deliveredFile), { recursive: true });
    while (pending.length > 0) {
      // Read the status first: a result written before the job closed is still seen by the pass below.
      const closed = (await this.handle.describe()).status.name !== 'RUNNING';
      for (const name of [...pending]) {
        const result = await readJson<TrialResult>(jobFiles.trialResult(this.dir, name));
        if (!result) continue;
        pending.splice(pending.indexOf(name), 1);
        yield result;
        if (deliveredFile) await appendFile(deliveredFile, `${name}\n`);
      }
      if (closed) return;
      await sleep(options.pollMs ?? POLL_MS);
    }
  }

  /**
   * Stamps model calls that start from now on with policy version `version` (as `rollout ctl <job> policy-version N`;
   * docs/rl.md): a trainer calls it after loading new weights. Resolves once the job applied it; its control state.
   */
  async setPolicyVersion(version: number): Promise<JobControlState> {
    const control = { action: 'policy-version' as const, value: version };
    const problem = jobControlProblem(control);
    if (problem) throw new InputError([{ file: 'setPolicyVersion', field: 'version', message: problem }]);
    return this.handle.executeUpdate(jobControlUpdate, { args: [control] });
  }

  /** Waits for the job to end; its result.json. */
  async result(): Promise<JobResult> {
    await this.handle.result();
    const result = await readJson<JobResult>(jobFiles.result(this.dir));
    if (!result) throw new Error(`${jobFiles.result(this.dir)}: missing after the job ended`);
    return result;
  }

  /** Cancels the job: running trials clean up (a worker must run), finished results are kept. */
  async cancel(): Promise<JobProgress> {
    await this.handle.cancel();
    return this.handle.result();
  }
}

export class TrialRun {
  constructor(
    readonly spec: TrialSpec,
    private readonly handle: WorkflowHandle<typeof trialWorkflow>
  ) {}

  get trialName(): string {
    return this.spec.trialName;
  }

  get dir(): string {
    return jobFiles.trialDir(this.spec.jobDir, this.spec.trialName);
  }

  /** Waits for the trial to end; its result.json. */
  async result(): Promise<TrialResult> {
    await this.handle.result();
    const result = await readJson<TrialResult>(jobFiles.trialResult(this.spec.jobDir, this.spec.trialName));
    if (!result) throw new Error(`${this.dir}/result.json: missing after the trial ended`);
    return result;
  }

  async cancel(): Promise<void> {
    await this.handle.cancel();
    await this.handle.result();
  }
}

async function readLines(file: string): Promise<Set<string>> {
  try {
    return new Set((await readFile(file, 'utf8')).split('\n').filter((line) => line.length > 0));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Set();
    throw err;
  }
}
