/**
 * One trial: an agent's attempt at a task. Each lifecycle step is an activity on the task queue of the host that
 * holds the trial's container; an infrastructure failure (a lost host, a Docker daemon that kept failing) restarts
 * the trial from scratch on a fresh container, possibly on another host. Cleanup always runs.
 */
import type { ActivityOptions } from '@temporalio/workflow';
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
  setCurrentDetails,
  sleep,
} from '@temporalio/workflow';

import type { JobActivities, LocalStepActivities, ProviderActivities } from '../activities';
import type { WrittenTrialResult } from '../activities/results';
import { primaryReward } from '../src/results/job-stats';
import { retryWaitMs } from '../src/trial/retry';
import { minRewardShortfall, multiStepRewards } from '../src/trial/step-rewards';
import type { TrialResult } from '../src/results/trial-result';
import { summaryFromResult } from '../src/results/trial-result';
import { JOB_TASK_QUEUE, providerQueue } from '../src/temporal/queues';
import { RolloutReward, RolloutStatus } from '../src/temporal/search-attributes';
import type {
  AgentInfo,
  CollectReport,
  BuiltImage,
  CleanupError,
  EnvironmentHandle,
  ExecuteOutcome,
  MultiStepSpec,
  Rewards,
  StepName,
  StepTiming,
  TaskStepResult,
  TaskStepSpec,
  TrialError,
  TrialSpec,
  TrialSummary,
} from '../src/trial/types';
import { CANCELLED_ERROR, INFRASTRUCTURE_ERROR, TASK_ERROR_TYPES, trialStatus } from '../src/trial/types';
import type { TrialState } from './messages';
import { trialFinishedSignal, trialStateQuery } from './messages';
import type { StepPlacement } from './local-steps';
import { placeSteps, preferHere } from './local-steps';

/** Extra time a step's activity gets over the limit enforced inside it: Temporal's timeout is only a backstop. */
const GRACE_SEC = 60;
const HEARTBEAT_TIMEOUT_MS = 10_000;
/** A trial that lost its host (or kept hitting infrastructure errors) starts over at most this many times. */
const MAX_RESTARTS = 2;
const HOUSEKEEPING_TIMEOUT_MS = 5 * 60_000;
/**
 * Housekeeping activities heartbeat while they run: a completion lost on its way (the server was down just then)
 * is retried after this, not after the start-to-close timeout.
 */
export const HOUSEKEEPING_HEARTBEAT_MS = 10_000;

export async function trialWorkflow(spec: TrialSpec): Promise<TrialSummary> {
  const state: TrialState = { status: 'running', step: null, hostQueue: null, restarts: 0 };
  setHandler(trialStateQuery, () => state);
  const steps: Partial<Record<StepName, StepTiming>> = {};
  const startedAt = new Date().toISOString();
  let outcome: Outcome = emptyOutcome();
  // Across restarts: every host's image must be released, and every failed clean-up reported.
  const builtImages: BuiltImage[] = [];
  const cleanupErrors: CleanupError[] = [];
  const placement: StepPlacement = { hostQueue: null, here: false };
  // The step a cancellation reached the trial in (clean-up then moves state.step on): what its result names.
  const cancelledIn: { step: StepName | null } = { step: null };
  let retries = 0;

  try {
    for (;;) {
      outcome = await runOnce(spec, state, steps, { builtImages, cleanupErrors, placement, cancelledIn });
      if (!outcome.restart) {
        // job.yaml `retry`: a task error the user chose to retry (e.g. a rate limit) runs the trial again.
        const wait = retryWaitMs(spec.retry, outcome.error, retries);
        if (wait === null) break;
        retries += 1;
        await sleep(wait);
        continue;
      }
      if (state.restarts >= MAX_RESTARTS) {
        outcome.error = {
          ...outcome.restart,
          message: `${outcome.restart.message} (after ${state.restarts} restarts)`,
        };
        break;
      }
      state.restarts += 1;
      log.warn(`trial ${spec.trialName}: ${outcome.restart.type} in ${outcome.restart.step}, restarting`);
    }
  } catch (err) {
    if (!isCancellation(err)) throw err;
    outcome.error = { type: CANCELLED_ERROR, message: 'the trial was cancelled', step: cancelledIn.step ?? 'trial' };
  }

  const result: TrialResult = {
    trial_name: spec.trialName,
    task_name: spec.taskName,
    dataset_name: spec.datasetName,
    agent_name: spec.agentName,
    agent: outcome.agent,
    attempt: spec.attempt,
    rewards: outcome.rewards,
    error: outcome.error,
    agent_exit_code: outcome.agentExitCode,
    started_at: startedAt,
    finished_at: new Date().toISOString(),
    steps,
    workflow_id: spec.trialId,
    job_name: spec.jobName,
    task_dir: spec.taskDir,
    environment_type: spec.environmentType,
    host: state.hostQueue,
    image: outcome.image,
    unenforced_limits: outcome.unenforced,
    restarts: state.restarts,
    collected: outcome.collected,
    cleanup_errors: cleanupErrors,
    retries,
    ...(outcome.stepResults ? { step_results: outcome.stepResults } : {}),
  };
  const summary = summaryFromResult(spec, result, builtImages);
  state.status = trialStatus(summary);
  const rewards = result.rewards ? JSON.stringify(result.rewards) : 'none';
  log.info(
    `trial ${spec.trialName}: ${state.status}, rewards ${rewards}${result.error ? `, ${result.error.type}` : ''}`
  );
  state.step = null;

  await CancellationScope.nonCancellable(async () => {
    // Histories recorded before the gateway returned nothing here.
    const usage = (await writeResult(spec, state.hostQueue, result, placement))?.usage;
    if (usage) summary.usage = usage;
    const reward = primaryReward(result.rewards);
    upsertSearchAttributes([
      { key: RolloutStatus, value: state.status },
      ...(reward === null ? [] : [{ key: RolloutReward, value: reward }]),
    ]);
    setCurrentDetails(describe(result));
    await getExternalWorkflowHandle(spec.jobWorkflowId)
      .signal(trialFinishedSignal, summary)
      .catch(() => undefined); // No running job (a trial started on its own, or a cancelled job): nothing to tell.
  });
  return summary;
}

interface Outcome {
  rewards: Rewards | null;
  error: TrialError | null;
  agentExitCode: number | null;
  agent: AgentInfo | null;
  image: string | null;
  unenforced: string[];
  collected: CollectReport | null;
  /** Set when this run hit an infrastructure failure and the trial should start over. */
  restart: TrialError | null;
  /** A multi-step task's steps that ran, and the last of them (whose logs collect files under its name). */
  stepResults?: TaskStepResult[];
  taskStep?: string;
}

function emptyOutcome(): Outcome {
  return {
    rewards: null,
    error: null,
    agentExitCode: null,
    agent: null,
    image: null,
    unenforced: [],
    collected: null,
    restart: null,
  };
}

/** One pass through the lifecycle on one host. Task errors end the pass; infrastructure errors ask for a restart. */
async function runOnce(
  spec: TrialSpec,
  state: TrialState,
  steps: Partial<Record<StepName, StepTiming>>,
  {
    builtImages,
    cleanupErrors,
    placement,
    cancelledIn,
  }: {
    builtImages: BuiltImage[];
    cleanupErrors: CleanupError[];
    placement: StepPlacement;
    cancelledIn: { step: StepName | null };
  }
): Promise<Outcome> {
  const outcome = emptyOutcome();
  const { claimHost } = proxyActivities<ProviderActivities>({
    taskQueue: providerQueue(spec.environmentType),
    startToCloseTimeout: '1 minute',
    heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
    retry: { initialInterval: '1s', maximumInterval: '10s' },
  });
  const { hostQueue, hostBound } = await claimHost({ trialId: spec.trialId, environmentType: spec.environmentType });
  state.hostQueue = hostQueue;
  placeSteps(placement, hostQueue, hostBound ?? true);
  const host = hostActivities(spec, hostQueue, hostBound ?? true, placement);

  const step = async <T>(name: StepName, run: () => Promise<T>): Promise<T> => {
    state.step = name;
    setCurrentDetails(`**${spec.trialName}**: ${name} on \`${hostQueue}\``);
    log.debug(`trial ${spec.trialName}: ${name} on ${hostQueue}`);
    const timing: StepTiming = { started_at: new Date().toISOString(), finished_at: null };
    steps[name] = timing;
    try {
      return await run();
    } finally {
      timing.finished_at = new Date().toISOString();
    }
  };

  let handle: EnvironmentHandle | null = null;
  let collected = false;
  try {
    const image = await step('build', () => host.buildEnvironment({ spec }));
    outcome.image = image.image;
    // Recorded at once: a trial cancelled later still reports it, so its job releases it.
    if (image.built) builtImages.push({ hostQueue, image: image.image });
    const started = await step('start', () => host.startEnvironment({ spec, image: image.image }));
    handle = started.handle;
    outcome.unenforced = started.unenforced;
    const environment = handle;
    // Histories recorded before installs reported the agent return nothing here.
    outcome.agent =
      spec.agentWithoutInstall ??
      (await step('install', () => host.installAgent({ spec, handle: environment }))) ??
      null;
    if (spec.multiStep) {
      await runTaskSteps(spec, spec.multiStep, host, step, environment, outcome, steps);
    } else {
      const execution: ExecuteOutcome = await step('execute', () => host.executeAgent({ spec, handle: environment }));
      outcome.agentExitCode = execution.exitCode;
      if (execution.timedOut) {
        // The agent's processes are already dead; the verifier still grades what it left.
        outcome.error = {
          type: 'AgentTimeoutError',
          message: `agent exceeded ${spec.timeouts.execute} s`,
          step: 'execute',
        };
      }
      if (spec.verify) {
        try {
          outcome.rewards = await step('verify', () => host.runVerifier({ spec, handle: environment }));
        } catch (err) {
          const error = classify(err, 'verify');
          if (error.type === INFRASTRUCTURE_ERROR || isCancellation(err)) throw err;
          outcome.error ??= error;
        }
      }
    }
    // The agent ran and was graded: logs that cannot be collected are reported, never a reason to run it again.
    await step('collect', () => host.collectLogs({ spec, handle: environment, taskStep: outcome.taskStep })).then(
      (report) => (outcome.collected = report),
      (err: unknown) => {
        if (isCancellation(err)) throw err;
        cleanupErrors.push({ ...classify(err, 'collect'), host: hostQueue });
      }
    );
    collected = true;
  } catch (err) {
    if (isCancellation(err)) {
      cancelledIn.step = state.step;
      throw err;
    }
    const error = classify(err, state.step ?? 'trial');
    if (error.type === INFRASTRUCTURE_ERROR) outcome.restart = error;
    else outcome.error ??= error;
  } finally {
    await CancellationScope.nonCancellable(() =>
      releaseEnvironment(spec, host, handle, collected, steps, state, {
        taskStep: outcome.taskStep,
        onCollected: (report) => (outcome.collected = report),
        cleanupErrors,
      })
    );
  }
  return outcome;
}

/**
 * Collect (if not done yet), stop and clean up. A failure does not stop the rest, and is recorded in the result
 * (`cleanup_errors`) and trial.log: logs may be missing, or a container left for the host's janitor (a host that is
 * gone cannot be cleaned from here).
 */
async function releaseEnvironment(
  spec: TrialSpec,
  host: ReturnType<typeof hostActivities>,
  handle: EnvironmentHandle | null,
  collected: boolean,
  steps: Partial<Record<StepName, StepTiming>>,
  state: TrialState,
  {
    taskStep,
    onCollected,
    cleanupErrors,
  }: { taskStep?: string; onCollected: (report: CollectReport) => void; cleanupErrors: CleanupError[] }
): Promise<void> {
  const attempt = async (name: StepName, run: () => Promise<void>) => {
    state.step = name;
    const timing: StepTiming = { started_at: new Date().toISOString(), finished_at: null };
    steps[name] = timing;
    try {
      await run();
    } catch (err) {
      cleanupErrors.push({ ...classify(err, name), host: state.hostQueue });
    }
    timing.finished_at = new Date().toISOString();
  };
  if (handle && !collected) {
    await attempt('collect', async () => onCollected(await host.collectLogs({ spec, handle, taskStep })));
  }
  if (handle) await attempt('stop', () => host.stopEnvironment({ spec, handle }));
  await attempt('cleanup', () => host.cleanupEnvironment({ spec }));
}

/**
 * The lifecycle activities, bound to the host queue (or the shared provider queue when the environment is not bound
 * to a host), each with a timeout derived from the trial's limits. All but the agent's own steps run as local
 * activities while this workflow worker is the host (see local-steps.ts), with the same timeouts and retries.
 */
function hostActivities(spec: TrialSpec, hostQueue: string, hostBound: boolean, placement: StepPlacement) {
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
    /** A multi-step task's step, under its own limits. */
    forTaskStep: ({ prepare, execute, verify }: TaskStepSpec['timeouts']) => ({
      executeAgent: proxy(prepare + execute, once).executeAgent,
      runVerifier: preferHere(placement, here(verify).runVerifier, proxy(verify, retried).runVerifier),
    }),
  };
}

/**
 * A multi-step task (task.toml `[[steps]]`), as Harbor runs it: execute then verify for each step, in order, in the
 * one environment. A step that failed without rewards, or whose rewards fall short of its `min_reward`, is the last;
 * the trial's rewards come from the steps' by the task's strategy, and its error is the first step error.
 */
async function runTaskSteps(
  spec: TrialSpec,
  multiStep: MultiStepSpec,
  host: ReturnType<typeof hostActivities>,
  step: <T>(name: StepName, run: () => Promise<T>) => Promise<T>,
  handle: EnvironmentHandle,
  outcome: Outcome,
  steps: Partial<Record<StepName, StepTiming>>
): Promise<void> {
  const results: TaskStepResult[] = (outcome.stepResults = []);
  for (const taskStep of multiStep.steps) {
    const result: TaskStepResult = {
      name: taskStep.name,
      rewards: null,
      error: null,
      agent_exit_code: null,
      execute: null,
      verify: null,
    };
    results.push(result);
    outcome.taskStep = taskStep.name;
    const activities = host.forTaskStep(taskStep.timeouts);
    const input = { spec, handle, taskStep: taskStep.name };
    // A task error ends the step (an infrastructure one the whole run, which starts over).
    const recordError = (err: unknown, name: StepName) => {
      const error = classify(err, name);
      if (error.type === INFRASTRUCTURE_ERROR || isCancellation(err)) throw err;
      result.error ??= error;
    };
    try {
      const execution = await step('execute', () => activities.executeAgent(input)).finally(
        () => (result.execute = steps.execute ?? null)
      );
      result.agent_exit_code = outcome.agentExitCode = execution.exitCode;
      if (execution.timedOut) {
        const limit = taskStep.timeouts.execute;
        result.error = { type: 'AgentTimeoutError', message: `agent exceeded ${limit} s`, step: 'execute' };
      }
      if (spec.verify) {
        try {
          result.rewards = await step('verify', () => activities.runVerifier(input));
        } catch (err) {
          recordError(err, 'verify');
        } finally {
          result.verify = steps.verify ?? null;
        }
      }
    } catch (err) {
      recordError(err, 'execute');
    }
    if (result.error) outcome.error ??= { ...result.error, message: `step ${taskStep.name}: ${result.error.message}` };
    if (result.error && !result.rewards) break;
    const shortfall =
      spec.verify && taskStep.minReward !== null ? minRewardShortfall(result.rewards, taskStep.minReward) : null;
    if (shortfall) {
      result.below_min_reward = shortfall;
      break;
    }
  }
  outcome.rewards = multiStepRewards(
    multiStep.strategy,
    results.map((result) => result.rewards)
  );
  // The trial's execute step spans every step's.
  const first = results[0]?.execute;
  if (first && steps.execute) steps.execute = { ...steps.execute, started_at: first.started_at };
}

/** Writes result.json on the trial's host (where its logs are); any worker of the provider if that host is gone. */
async function writeResult(
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
    } catch {
      // The host is gone: fall through to any worker.
    }
  }
  const anywhere = proxyActivities<JobActivities>({ ...options, taskQueue: JOB_TASK_QUEUE });
  return anywhere.writeTrialResult({ spec, result });
}

/** Task outcomes are non-retryable application failures of a known type; everything else is infrastructure. */
function classify(err: unknown, step: StepName | 'trial'): TrialError {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (
    cause instanceof ApplicationFailure &&
    cause.type &&
    (TASK_ERROR_TYPES as readonly string[]).includes(cause.type)
  ) {
    return { type: cause.type as TrialError['type'], message: cause.message, step };
  }
  const message = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return { type: INFRASTRUCTURE_ERROR, message, step };
}

function describe(result: TrialResult): string {
  const rewards = result.rewards ? JSON.stringify(result.rewards) : 'none';
  const error = result.error ? `\n\n**${result.error.type}** (${result.error.step}): ${result.error.message}` : '';
  return `**${result.trial_name}**: rewards ${rewards}${error}`;
}
