import { hostname } from 'node:os';

import type { Client } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';

import { Context } from '@temporalio/activity';
import { createJobActivities, createLocalStepActivities, createProviderActivities } from '../activities';
import type { CaTrustMode } from '../src/environments/ca-trust';
import { hostCaBundle } from '../src/environments/ca-trust';
import type { Environment, EnvironmentOwner } from '../src/contracts/environment';
import { createEnvironment } from '../src/environments';
import type { EnvironmentType } from '../src/contracts/job-config';
import { ModelGateway } from '../src/gateway/gateway';
import { maxWaitMsFromEnv } from '../src/gateway/retry-wait';
import { TemporalRateLimits } from '../src/limits/shared-rate-limits';
import { TemporalConcurrencyShares } from '../src/limits/shared-concurrency';
import { TemporalCreationRate } from '../src/limits/creation-rate';
import { SandboxCreation } from '../src/environments/sandbox-creation';
import type { RateLimitRule } from '../src/contracts/job-config';
import { loadWorkerConfig, workerCaps } from '../src/job/worker-config';
import { ledgerBudgetResult, TemporalSpendLedgers } from '../src/budget/ledger-client';
import { TemporalPolicyVersions } from '../src/temporal/policy-versions';
import { deploymentId } from '../src/temporal/deployment';
import { JOB_TASK_QUEUE, hostQueue, isProviderQueue, providerQueue } from '../src/contracts/queues';
import type { TemporalConnectionOptions } from '../src/temporal/envconfig';
import { rolloutDataConverter } from '../src/temporal/payload-codec';
import type { LeaseHolder } from './host-lease';
import { bestEffort } from '../src/log';
import { leaseWorkerId } from './host-lease';
import { removeAbandonedEnvironments } from './janitor';
import { workflowBundle } from './workflow-bundle';
import { CountingTrialSlots } from './trial-slots';
import type { WorkerCaps } from '../src/task/worker-caps';
import { DEFAULT_WORKER_CAPS } from '../src/task/worker-caps';

export interface WorkerSetOptions {
  connection: NativeConnection;
  /**
   * For the gateway's shared rate limits (leases from the deployment's limiter workflows) and budgeted jobs' ledgers;
   * none: limits not shared, budgets not enforced.
   */
  client?: Client;
  /** The Temporal server's address and namespace: the deployment whose environments these workers own. */
  address: string;
  namespace: string;
  /** TLS, API key, gRPC metadata of the connection (Temporal's environment configuration, see src/temporal/envconfig.ts). */
  connectionOptions?: TemporalConnectionOptions;
  /** The host whose environments these workers create and its janitor looks after (`--host-id`). */
  hostId?: string;
  /**
   * Names this process's host task queue: stable across restarts so a restarted worker picks up its own trials, and
   * its own among processes sharing the host id (see host-lease.ts). Defaults to the host id.
   */
  workerId?: string;
  environmentTypes: EnvironmentType[];
  /** Trials this worker may hold at once (each holds a container between its steps). */
  maxTrials: number;
  /** Also run Job/Trial workflows and job activities (the `rollout` queue). */
  serveWorkflows: boolean;
  /** Containers trust the host's CA certificates (default `auto`: when the host has extra CAs installed). */
  containerCaTrust?: CaTrustMode;
  /** The trial slots of this process (default: `maxTrials` of them). */
  slots?: CountingTrialSlots;
  /** The worker config's `rate_limits` (src/job/worker-config.ts), applied with each job's. */
  rateLimits?: RateLimitRule[];
  /** The worker config's caps on trials (default: this host's defaults alone). */
  caps?: WorkerCaps;
  /**
   * How long steps on the shared provider queues may run on once this process stops (`rollout worker
   * --shutdown-grace`): steps of environments any worker reaches (pods, cloud sandboxes) finish here meanwhile, and
   * are handed back (cancelled, retried elsewhere) after it. Default 5 s.
   */
  shutdownGraceMs?: number;
  /** The workflow bundle (default: the host cache's, see workflow-bundle.ts; tests share one). */
  workflowBundle?: { code: string } | { codePath: string };
}

export function defaultHostId(): string {
  return process.env.ROLLOUT_HOST_ID ?? hostname();
}

/**
 * How long in-flight steps on this host's own queue and local activities may run on once the workers stop: by then a
 * draining worker has waited for its trials already (RunningWorkers.drain), so what is left is handed back.
 */
const HOST_QUEUE_GRACE_MS = 5_000;

/**
 * The workers of one process: per environment type, one on the shared provider queue (claims) and one on this
 * host's own queue (lifecycle steps); optionally the workflow worker.
 */
export async function createWorkers(options: WorkerSetOptions): Promise<Worker[]> {
  const owner = {
    hostId: options.hostId ?? defaultHostId(),
    deployment: deploymentId(options.address, options.namespace),
  };
  const workerId = options.workerId ?? owner.hostId;
  const identity = `${workerId}/${process.pid}`;
  const deps = await activityDeps(options, owner, workerId);
  const activities = createProviderActivities(deps);
  const common = {
    connection: options.connection,
    namespace: options.namespace,
    identity,
    shutdownGraceTime: HOST_QUEUE_GRACE_MS,
    // Encrypts what the workers write (ROLLOUT_PAYLOAD_KEY); codecs run outside the workflow sandbox.
    dataConverter: rolloutDataConverter(),
  };

  const workers: Promise<Worker>[] = [];
  for (const type of options.environmentTypes) {
    const hostBound = deps.environment(type).hostBound;
    workers.push(
      // Reachable from any worker (pods, cloud sandboxes): every step is served on the shared queue too.
      Worker.create({
        ...common,
        shutdownGraceTime: options.shutdownGraceMs ?? HOST_QUEUE_GRACE_MS,
        taskQueue: providerQueue(type),
        activities: hostBound ? { claimHost: activities.claimHost } : activities,
        maxConcurrentActivityTaskExecutions: hostBound ? Math.max(2, options.maxTrials) : options.maxTrials * 2 + 4,
      }),
      // The host's own queue: every trial of a host-bound environment, and the trials of a job in an object store
      // (pinned to the worker that writes their folder).
      Worker.create({
        ...common,
        taskQueue: hostQueue(type, workerId),
        activities,
        // One step per held trial, plus clean-ups and image removals that may overlap.
        maxConcurrentActivityTaskExecutions: options.maxTrials * 2 + 4,
      })
    );
  }
  if (options.serveWorkflows) {
    // The activity's own client: a worker set built without one (tests) still reads budgeted jobs' ledgers.
    const jobActivities = createJobActivities((jobName) => ledgerBudgetResult(Context.current().client, jobName));
    workers.push(
      Worker.create({
        ...common,
        taskQueue: JOB_TASK_QUEUE,
        // A trial's lifecycle steps, a session's steps and liveness checks run here as local activities when this
        // process is the container's host.
        activities: {
          ...jobActivities,
          ...createLocalStepActivities(deps, activities, jobActivities),
          runSessionCommandHere: activities.runSessionCommandHere,
          checkSessionAliveHere: activities.checkSessionAliveHere,
        },
        workflowBundle: options.workflowBundle ?? (await workflowBundle()),
      })
    );
  }
  return Promise.all(workers);
}

/** What the activities of one process share: its trial slots, CA bundle, model gateway, creation pace, providers. */
async function activityDeps(options: WorkerSetOptions, owner: EnvironmentOwner, workerId: string) {
  const slots = options.slots ?? new CountingTrialSlots(options.maxTrials);
  const environments = new Map<EnvironmentType, Environment>();
  return {
    hostId: workerId,
    slots,
    caBundle: await hostCaBundle(options.containerCaTrust ?? 'auto'),
    gateway: new ModelGateway({
      maxWaitMs: maxWaitMsFromEnv(),
      rateLimits: options.rateLimits ?? [],
      ...(options.client
        ? {
            sharedLimits: new TemporalRateLimits(options.client, owner.deployment),
            sharedConcurrency: new TemporalConcurrencyShares(options.client, owner.deployment),
            spendLedgers: new TemporalSpendLedgers(options.client),
          }
        : {}),
    }),
    creation: new SandboxCreation(
      options.client ? new TemporalCreationRate(options.client, owner.deployment) : undefined
    ),
    ...(options.client ? { policyVersions: new TemporalPolicyVersions(options.client) } : {}),
    environment(type: EnvironmentType) {
      let environment = environments.get(type);
      if (!environment) {
        environment = createEnvironment(type, owner);
        environments.set(type, environment);
      }
      return environment;
    },
    hostQueue: (type: EnvironmentType) => hostQueue(type, workerId),
    caps: options.caps ?? DEFAULT_WORKER_CAPS,
  };
}

/** Runs workers until they shut down (signal, or `shutdown()`); one failing stops the others. */
export async function runWorkers(workers: Worker[]): Promise<void> {
  try {
    await Promise.all(workers.map((worker) => worker.run()));
  } finally {
    for (const worker of workers) {
      if (worker.getState() === 'RUNNING') worker.shutdown();
    }
  }
}

export interface RunningWorkers {
  /** The host id this process's queue is named after (the host id, or `<host id>~<n>` when others share it). */
  workerId: string;
  /** Live processes of this host holding the worker ids before this one's: their trials' steps wait for them. */
  heldBy: LeaseHolder[];
  /** Resolves when the workers stop (a shutdown signal, or stop()). */
  done: Promise<void>;
  stop(): Promise<void>;
  /**
   * Stops after the trials this process holds have ended. A CLI whose own job is done may still hold trials of other
   * jobs on the same server (its worker took them); leaving at once would strand them until their host counts as lost.
   * Takes no new trials meanwhile (claims are refused and the shared provider queues no longer polled); `onWait` hears
   * how many it waits for, each time that changes. Past `deadline` (epoch ms) it stops anyway: the trials still held
   * are handed back (their steps cancelled; each restarts on another worker). Resolves with how many were.
   */
  drain(onWait: (trials: number) => void, deadline?: number): Promise<number>;
  /** Whether it is draining (since drain() was called). */
  draining(): boolean;
  /** The state of each of its Temporal workers (RUNNING while polling). */
  states(): string[];
}

const DRAIN_POLL_MS = 1_000;

/** How often a running worker looks for environments of trials that moved on or ended without cleanup. */
const JANITOR_INTERVAL_MS = 60_000;

/**
 * Starts this process's workers: leases its own host queue, then serves the queues until stopped, meanwhile removing
 * environments this host holds for trials that no longer run (a crash left them), at once and now and then.
 */
export async function startWorkers(
  options: Omit<WorkerSetOptions, 'connection' | 'workerId'> & { client: Client }
): Promise<RunningWorkers> {
  const owner = {
    hostId: options.hostId ?? defaultHostId(),
    deployment: deploymentId(options.address, options.namespace),
  };
  const clean = async (checkRunningTrials: boolean) => {
    for (const type of options.environmentTypes) {
      await removeAbandonedEnvironments(options.client, createEnvironment(type, owner), { type, checkRunningTrials });
    }
  };
  const lease = await leaseWorkerId(owner.hostId, owner.deployment);
  const connection = await NativeConnection.connect({ address: options.address, ...options.connectionOptions });
  const slots = new CountingTrialSlots(options.maxTrials);
  // Every command that runs a worker honours ROLLOUT_WORKER_CONFIG unless given its settings.
  const config = options.rateLimits && options.caps ? undefined : await loadWorkerConfig();
  const workers = await createWorkers({
    ...options,
    rateLimits: options.rateLimits ?? config?.rate_limits,
    caps: options.caps ?? (config && workerCaps(config)),
    hostId: owner.hostId,
    workerId: lease.workerId,
    connection,
    slots,
  });
  const cleanUp = (checkRunningTrials: boolean) =>
    clean(checkRunningTrials).catch((err: unknown) => console.error(`warning: janitor: ${(err as Error).message}`));
  // Off the path to the first trial: what it removes belongs to trials no longer running, which nothing waits for.
  void cleanUp(false);
  const janitor = setInterval(() => void cleanUp(true), JANITOR_INTERVAL_MS);
  const done = runWorkers(workers).finally(async () => {
    clearInterval(janitor);
    await connection.close();
    await lease.release();
  });
  const stop = async () => {
    for (const worker of workers) if (worker.getState() === 'RUNNING') worker.shutdown();
    await done.catch(() => undefined);
  };
  let draining = false;
  return {
    workerId: lease.workerId,
    heldBy: lease.heldBy,
    done,
    stop,
    draining: () => draining,
    states: () => workers.map((worker) => worker.getState()),
    async drain(onWait, deadline = Infinity) {
      draining = true;
      let waitingFor = slots.close();
      // Claims go to other workers at once; roaming steps under way here finish within their grace.
      for (const worker of workers) {
        if (isProviderQueue(worker.options.taskQueue) && worker.getState() === 'RUNNING') worker.shutdown();
      }
      waitingFor = await waitForTrials(options.client, waitingFor, { done, deadline, onWait });
      await stop();
      if (waitingFor.length > 0) await removeHandedBack(options.environmentTypes, owner, waitingFor);
      return waitingFor.length;
    },
  };
}

/**
 * Waits until the trials a draining worker holds have ended, the workers stopped, or the deadline passed; tells
 * `onWait` how many it waits for, each time that changes. Resolves with the trials still running.
 */
async function waitForTrials(
  client: Client,
  trialIds: string[],
  until: { done: Promise<void>; deadline: number; onWait: (trials: number) => void }
): Promise<string[]> {
  let waitingFor = trialIds;
  let stopped = false;
  until.done.then(
    () => (stopped = true),
    () => (stopped = true)
  );
  let reported = -1;
  while (!stopped) {
    const running = await Promise.all(waitingFor.map((trialId) => trialRunning(client, trialId)));
    waitingFor = waitingFor.filter((_, index) => running[index]);
    if (waitingFor.length === 0 || Date.now() >= until.deadline) break;
    if (waitingFor.length !== reported) until.onWait((reported = waitingFor.length));
    await new Promise((resolve) =>
      setTimeout(resolve, Math.min(DRAIN_POLL_MS, Math.max(0, until.deadline - Date.now())))
    );
  }
  return waitingFor;
}

// Trials handed back restart elsewhere; their environments here are removed now (their own cleanup step waits for
// this host's queue until the host counts as lost, then reports it as a cleanup error).
async function removeHandedBack(types: EnvironmentType[], owner: EnvironmentOwner, trialIds: string[]): Promise<void> {
  for (const type of types) {
    const environment = createEnvironment(type, owner);
    if (!environment.hostBound) continue;
    for (const trialId of trialIds) {
      await bestEffort(`removing handed-back trial ${trialId}'s environment`, environment.removeTrial(trialId));
    }
  }
}

/** Whether a trial's workflow still runs; while the server cannot tell (down, restarting), it counts as running. */
async function trialRunning(client: Client, trialId: string): Promise<boolean> {
  try {
    return (await client.workflow.getHandle(trialId).describe()).status.name === 'RUNNING';
  } catch (err) {
    return (err as Error).name !== 'WorkflowNotFoundError';
  }
}
