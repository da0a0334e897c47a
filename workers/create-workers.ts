import { hostname } from 'node:os';

import type { Client } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';

import { createProviderActivities, jobActivities } from '../activities';
import type { Environment } from '../src/environments/environment';
import { createEnvironment } from '../src/environments';
import type { EnvironmentType } from '../src/job/schema';
import { JOB_TASK_QUEUE, hostQueue, providerQueue } from '../src/temporal/queues';
import { removeAbandonedEnvironments } from './janitor';
import { CountingTrialSlots } from './trial-slots';

export interface WorkerSetOptions {
  connection: NativeConnection;
  namespace: string;
  /** Names this host's task queues; stable across restarts so a restarted worker picks up its own trials. */
  hostId?: string;
  environmentTypes: EnvironmentType[];
  /** Trials this worker may hold at once (each holds a container between its steps). */
  maxTrials: number;
  /** Also run Job/Trial workflows and job activities (the `rollout` queue). */
  serveWorkflows: boolean;
  /** Pre-built workflow bundle (bundling takes a second or two; tests share one). */
  workflowBundle?: { code: string } | { codePath: string };
}

export function defaultHostId(): string {
  return process.env.ROLLOUT_HOST_ID ?? hostname();
}

/**
 * The workers of one process: per environment type, one on the shared provider queue (claims) and one on this
 * host's own queue (lifecycle steps); optionally the workflow worker.
 */
export async function createWorkers(options: WorkerSetOptions): Promise<Worker[]> {
  const hostId = options.hostId ?? defaultHostId();
  const identity = `${hostId}/${process.pid}`;
  const slots = new CountingTrialSlots(options.maxTrials);
  const environments = new Map<EnvironmentType, Environment>();
  const deps = {
    hostId,
    slots,
    environment(type: EnvironmentType) {
      let environment = environments.get(type);
      if (!environment) {
        environment = createEnvironment(type, hostId);
        environments.set(type, environment);
      }
      return environment;
    },
    hostQueue: (type: EnvironmentType) => hostQueue(type, hostId),
  };
  const activities = createProviderActivities(deps);
  const common = { connection: options.connection, namespace: options.namespace, identity, shutdownGraceTime: 5_000 };

  const workers: Promise<Worker>[] = [];
  for (const type of options.environmentTypes) {
    workers.push(
      Worker.create({
        ...common,
        taskQueue: providerQueue(type),
        activities: { claimHost: activities.claimHost },
        maxConcurrentActivityTaskExecutions: Math.max(2, options.maxTrials),
      }),
      Worker.create({
        ...common,
        taskQueue: hostQueue(type, hostId),
        activities,
        // One step per held trial, plus clean-ups and image removals that may overlap.
        maxConcurrentActivityTaskExecutions: options.maxTrials * 2 + 4,
      })
    );
  }
  if (options.serveWorkflows) {
    workers.push(
      Worker.create({
        ...common,
        taskQueue: JOB_TASK_QUEUE,
        activities: jobActivities,
        ...(options.workflowBundle
          ? { workflowBundle: options.workflowBundle }
          : { workflowsPath: require.resolve('../workflows') }),
      })
    );
  }
  return Promise.all(workers);
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
  /** Resolves when the workers stop (a shutdown signal, or stop()). */
  done: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts this process's workers: first removes environments this host holds for trials that no longer run (a crash
 * left them), then serves the queues until stopped.
 */
export async function startWorkers(
  options: Omit<WorkerSetOptions, 'connection'> & { address: string; client: Client }
): Promise<RunningWorkers> {
  const hostId = options.hostId ?? defaultHostId();
  for (const type of options.environmentTypes) {
    await removeAbandonedEnvironments(options.client, hostId, createEnvironment(type, hostId));
  }
  const connection = await NativeConnection.connect({ address: options.address });
  const workers = await createWorkers({ ...options, hostId, connection });
  const done = runWorkers(workers).finally(() => connection.close());
  return {
    done,
    async stop() {
      for (const worker of workers) if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
    },
  };
}
