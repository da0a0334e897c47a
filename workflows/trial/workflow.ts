/**
 * One trial: an agent's attempt at a task. Each lifecycle step is an activity on the task queue of the host that
 * holds the trial's container (./lifecycle); an infrastructure failure (a lost host, a Docker daemon that kept
 * failing) restarts the trial from scratch on a fresh container, possibly on another host. Cleanup always runs.
 */
import {
  CancellationScope,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  setHandler,
  upsertSearchAttributes,
  setCurrentDetails,
  sleep,
} from '@temporalio/workflow';

import { primaryReward } from '../../src/results/job-stats';
import { retryWaitMs } from '../../src/trial/retry';
import type { TrialResult } from '../../src/results/trial-result';
import { summaryFromResult } from '../../src/results/trial-result';
import { RolloutReward, RolloutStatus } from '../search-attributes';
import type {
  BuiltImage,
  CleanupError,
  StepName,
  StepTiming,
  TrialSpec,
  TrialSummary,
} from '../../src/contracts/trial';
import { CANCELLED_ERROR, trialStatus } from '../../src/contracts/trial';
import type { TrialState } from '../messages';
import { trialFinishedSignal, trialStateQuery } from '../messages';
import { writeResult } from './activities';
import type { StepPlacement } from './local-steps';
import { runOnce } from './lifecycle';
import type { Outcome } from './outcome';
import { describe, emptyOutcome } from './outcome';

/** A trial that lost its host (or kept hitting infrastructure errors) starts over at most this many times. */
const MAX_RESTARTS = 2;

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
      log.warn(`trial ${spec.trialName}: ${outcome.restart.type} in ${outcome.restart.step}, restarting`, {
        error: outcome.restart.message,
      });
    }
  } catch (err) {
    if (!isCancellation(err)) throw err;
    outcome.error = { type: CANCELLED_ERROR, message: 'the trial was cancelled', step: cancelledIn.step ?? 'trial' };
  }

  const result = trialResult(spec, outcome, { startedAt, steps, state, cleanupErrors, retries });
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
      // No running job (a trial started on its own, or a job that ended): nothing to tell.
      .catch((err: unknown) => log.debug(`trial ${spec.trialName}: no job to tell`, { error: String(err) }));
  });
  return summary;
}

/** The trial's result.json, from its last attempt's outcome and what every attempt recorded. */
function trialResult(
  spec: TrialSpec,
  outcome: Outcome,
  recorded: {
    startedAt: string;
    steps: Partial<Record<StepName, StepTiming>>;
    state: TrialState;
    cleanupErrors: CleanupError[];
    retries: number;
  }
): TrialResult {
  const { startedAt, steps, state, cleanupErrors, retries } = recorded;
  return {
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
}
