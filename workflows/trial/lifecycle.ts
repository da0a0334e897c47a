/** One pass through a trial's lifecycle on one host: build, start, install, execute, verify, collect; then release. */
import { CancellationScope, isCancellation, log, proxyActivities, setCurrentDetails } from '@temporalio/workflow';

import type { ProviderActivities } from '../../activities';
import { isStoreUrl } from '../../src/storage/location';
import { providerQueue } from '../../src/contracts/queues';
import type {
  CleanupError,
  BuiltImage,
  CollectReport,
  EnvironmentHandle,
  ExecuteOutcome,
  StepName,
  StepTiming,
  TrialSpec,
} from '../../src/contracts/trial';
import { INFRASTRUCTURE_ERROR } from '../../src/contracts/trial';
import type { TrialState } from '../messages';
import type { HostActivities } from './activities';
import { HOUSEKEEPING_HEARTBEAT_MS, hostActivities } from './activities';
import type { StepPlacement } from './local-steps';
import { placeSteps } from './local-steps';
import type { Outcome } from './outcome';
import { classify, emptyOutcome, executeError } from './outcome';
import { runTaskSteps } from './task-steps';

/** Runs one named lifecycle step, recording its timing. */
type StepRunner = <T>(name: StepName, run: () => Promise<T>) => Promise<T>;

/** One pass through the lifecycle on one host. Task errors end the pass; infrastructure errors ask for a restart. */
export async function runOnce(
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
  const { hostQueue, host } = await claimTrialHost(spec, state, placement);

  const step = stepRunner(spec, state, steps, hostQueue);

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
    await runAgent(spec, host, step, environment, outcome, steps);
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
  if (collected && isStoreUrl(spec.jobDir)) await uploadToStore(spec, host, outcome);
  return outcome;
}

/** Claims a host for this pass (the provider's shared queue answers) and places its steps there. */
async function claimTrialHost(
  spec: TrialSpec,
  state: TrialState,
  placement: StepPlacement
): Promise<{ hostQueue: string; host: HostActivities }> {
  const { claimHost } = proxyActivities<ProviderActivities>({
    taskQueue: providerQueue(spec.environmentType),
    startToCloseTimeout: '1 minute',
    heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
    retry: { initialInterval: '1s', maximumInterval: '10s' },
  });
  const { hostQueue, hostBound } = await claimHost({
    trialId: spec.trialId,
    environmentType: spec.environmentType,
    pinned: isStoreUrl(spec.jobDir),
  });
  state.hostQueue = hostQueue;
  placeSteps(placement, hostQueue, hostBound ?? true);
  const host = hostActivities(spec, hostQueue, hostBound ?? true, placement);
  return { hostQueue, host };
}

/** Runs one lifecycle step: the trial's state and details name it, and its timing is recorded. */
function stepRunner(
  spec: TrialSpec,
  state: TrialState,
  steps: Partial<Record<StepName, StepTiming>>,
  hostQueue: string
): StepRunner {
  return async <T>(name: StepName, run: () => Promise<T>): Promise<T> => {
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
}

/** The agent's steps (one execute, or the task's [[steps]]) and the verifier; a task error is kept in the outcome. */
async function runAgent(
  spec: TrialSpec,
  host: HostActivities,
  step: StepRunner,
  environment: EnvironmentHandle,
  outcome: Outcome,
  steps: Partial<Record<StepName, StepTiming>>
): Promise<void> {
  if (spec.multiStep) {
    await runTaskSteps(spec, spec.multiStep, host, step, environment, outcome, steps);
  } else {
    const execution: ExecuteOutcome = await step('execute', () => host.executeAgent({ spec, handle: environment }));
    outcome.agentExitCode = execution.exitCode;
    // A timeout killed the agent's processes already; the verifier still grades what it left.
    const executed = executeError(execution, spec.timeouts.execute);
    if (executed) outcome.error = executed;
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
}

/**
 * A job in an object store: the trial's folder exists only on its host until uploaded; a host lost meanwhile (or a
 * store that kept failing) runs the trial again, elsewhere if need be.
 */
async function uploadToStore(spec: TrialSpec, host: HostActivities, outcome: Outcome): Promise<void> {
  try {
    await host.uploadTrial({ spec });
  } catch (err) {
    if (isCancellation(err)) throw err;
    outcome.restart = classify(err, 'collect');
  }
}

/**
 * Collect (if not done yet), stop and clean up. A failure does not stop the rest, and is recorded in the result
 * (`cleanup_errors`) and trial.log: logs may be missing, or a container left for the host's janitor (a host that is
 * gone cannot be cleaned from here).
 */
async function releaseEnvironment(
  spec: TrialSpec,
  host: HostActivities,
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
