/** The activities a trial's workflow calls, on its host's queue or here, each with a timeout from the trial's limits. */
import type { ActivityOptions } from '@temporalio/workflow';
import { log, proxyActivities, proxyLocalActivities } from '@temporalio/workflow';

import type { JobActivities, LocalStepActivities, ProviderActivities } from '../../activities';
import type { WrittenTrialResult } from '../../activities/results';
import type { TrialResult } from '../../src/results/trial-result';
import { JOB_TASK_QUEUE } from '../../src/contracts/queues';
import type { TaskStepSpec, TrialSpec } from '../../src/contracts/trial';
import { TASK_ERROR_TYPES } from '../../src/contracts/trial';
import type { StepPlacement } from './local-steps';
import { preferHere } from './local-steps';

/** Extra time a step's activity gets over the limit enforced inside it: Temporal's timeout is only a backstop. */
const GRACE_SEC = 60;
const HEARTBEAT_TIMEOUT_MS = 10_000;
const HOUSEKEEPING_TIMEOUT_MS = 5 * 60_000;
/**
 * Housekeeping activities heartbeat while they run: a completion lost on its way (the server was down just then)
 * is retried after this, not after the start-to-close timeout.
 */
export const HOUSEKEEPING_HEARTBEAT_MS = 10_000;

export type HostActivities = ReturnType<typeof hostActivities>;

/**
 * The lifecycle activities, bound to the host queue (or the shared provider queue when the environment is not bound
 * to a host), each with a timeout derived from the trial's limits. All but the agent's own steps run as local
 * activities while this workflow worker is the host (see local-steps.ts), with the same timeouts and retries.
 */
export function hostActivities(spec: TrialSpec, hostQueue: string, hostBound: boolean, placement: StepPlacement) {
  const base: ActivityOptions = {
    taskQueue: hostQueue,
    heartbeatTimeout: HEARTBEAT_TIMEOUT_MS,
    // Only host-specific queues may use this: a host that stopped polling fails the step fast, and the trial
    // restarts elsewhere instead of waiting forever.
    ...(hostBound ? { scheduleToStartTimeout: spec.hostLostTimeoutSec * 1000 } : {}),
  };
  const retried = { maximumAttempts: 3, initialInterval: 1000, nonRetryableErrorTypes: [...TASK_ERROR_TYPES] };
  // Agent scripts are not idempotent: never re-run one in the same container; the trial restarts instead.
  const once = { maximumAttempts: 1 };
  const proxy = (seconds: number, retry: ActivityOptions['retry']) =>
    proxyActivities<ProviderActivities>({ ...base, startToCloseTimeout: (seconds + GRACE_SEC) * 1000, retry });
  const here = (seconds: number) =>
    proxyLocalActivities<LocalStepActivities>({ startToCloseTimeout: (seconds + GRACE_SEC) * 1000, retry: retried });
  const { timeouts } = spec;
  return {
    buildEnvironment: preferHere(
      placement,
      here(timeouts.build).buildEnvironment,
      proxy(timeouts.build, retried).buildEnvironment
    ),
    startEnvironment: preferHere(
      placement,
      here(timeouts.start).startEnvironment,
      proxy(timeouts.start, retried).startEnvironment
    ),
    installAgent: proxy(timeouts.install, once).installAgent,
    executeAgent: proxy(timeouts.execute, once).executeAgent,
    runVerifier: preferHere(placement, here(timeouts.verify).runVerifier, proxy(timeouts.verify, retried).runVerifier),
    collectLogs: preferHere(
      placement,
      here(timeouts.collect).collectLogs,
      proxy(timeouts.collect, retried).collectLogs
    ),
    stopEnvironment: preferHere(
      placement,
      here(timeouts.stop).stopEnvironment,
      proxy(timeouts.stop, retried).stopEnvironment
    ),
    cleanupEnvironment: preferHere(
      placement,
      here(timeouts.cleanup).cleanupEnvironment,
      proxy(timeouts.cleanup, retried).cleanupEnvironment
    ),
    /** A store job's trial folder, uploaded from this host (as long as collect may take). */
    uploadTrial: preferHere(
      placement,
      here(timeouts.collect).uploadTrial,
      proxy(timeouts.collect, retried).uploadTrial
    ),
    /** A multi-step task's step, under its own limits. */
    forTaskStep: ({ prepare, execute, verify }: TaskStepSpec['timeouts']) => ({
      executeAgent: proxy(prepare + execute, once).executeAgent,
      runVerifier: preferHere(placement, here(verify).runVerifier, proxy(verify, retried).runVerifier),
    }),
  };
}

/** Writes result.json on the trial's host (where its logs are); any worker of the provider if that host is gone. */
export async function writeResult(
  spec: TrialSpec,
  hostQueue: string | null,
  result: TrialResult,
  placement: StepPlacement
): Promise<WrittenTrialResult | undefined> {
  const options = {
    startToCloseTimeout: HOUSEKEEPING_TIMEOUT_MS,
    heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
    retry: { maximumAttempts: 3 },
  };
  if (hostQueue) {
    const onHost = proxyActivities<ProviderActivities>({
      ...options,
      taskQueue: hostQueue,
      scheduleToStartTimeout: 30_000,
    });
    const here = proxyLocalActivities<LocalStepActivities>({
      startToCloseTimeout: HOUSEKEEPING_TIMEOUT_MS,
      retry: { maximumAttempts: 3 },
    });
    try {
      return await preferHere(placement, here.writeTrialResult, onHost.writeTrialResult)({ spec, result });
    } catch (err) {
      // The host is gone: any worker writes it instead.
      log.warn(`trial ${spec.trialName}: writing its result on ${hostQueue} failed, writing it elsewhere`, {
        error: String(err),
      });
    }
  }
  const anywhere = proxyActivities<JobActivities>({ ...options, taskQueue: JOB_TASK_QUEUE });
  return anywhere.writeTrialResult({ spec, result });
}
