/**
 * A job: expands into Trial child workflows from the plan file, read in pages, running at most
 * `concurrency` at once (a sliding window). Trials report back by signal, so the Job can continue-as-new before its
 * history grows large while trials keep running (they are started with ABANDON, never killed by a new run).
 */
import {
  ApplicationFailure,
  CancellationScope,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  startChild,
  workflowInfo,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';

import type { JobActivities, ProviderActivities } from '../activities';
import type { PlanPageEntry } from '../activities/plan';
import type { EnvironmentType, MetricType } from '../src/job/schema';
import { buildJobResult } from '../src/results/job-result';
import type { JobStats } from '../src/results/job-stats';
import { addTrial, emptyStats, finishedCount, primaryReward } from '../src/results/job-stats';
import {
  RolloutAgent,
  RolloutAttempt,
  RolloutDataset,
  RolloutJob,
  RolloutStatus,
  RolloutTask,
} from '../src/temporal/search-attributes';
import type { TrialSpec, TrialSummary } from '../src/trial/types';
import { CANCELLED_ERROR, INFRASTRUCTURE_ERROR } from '../src/trial/types';
import type { JobProgress, RunningTrialInfo } from './messages';
import { jobProgressQuery, trialFinishedSignal } from './messages';
import { HOUSEKEEPING_HEARTBEAT_MS, trialWorkflow } from './trial';

export interface JobInput {
  jobName: string;
  jobDir: string;
  totalTrials: number;
  concurrency: number;
  metrics: MetricType[];
  environmentType: EnvironmentType;
  /** Remove images the job built once no trial needs them (`environment.delete`). */
  deleteImages: boolean;
  /** Finished trials whose error is one of these run again. */
  rerunErrorTypes: string[];
  pageSize?: number;
  /** Continue-as-new once history passes this many events (Temporal's hard limit is 51,200). */
  maxHistoryEvents?: number;
  /** How often the job checks on running trials that did not report back (default 2 minutes). */
  reconcileIntervalSec?: number;
  /** State carried across continue-as-new. */
  carried?: JobCarry;
}

interface EnvUsage {
  running: number;
  /** The plan cursor has passed this environment's last trial: no more trials will need it. */
  dispatched: boolean;
  /** Host queue → image Rollout built there for this environment. */
  images: Record<string, string>;
}

interface JobCarry {
  cursor: number;
  startedAt: string;
  stats: JobStats;
  scoredRewardSum: number;
  scoredRewardCount: number;
  running: Record<string, RunningTrial>;
  envs: Record<string, EnvUsage>;
  /** Signals from trials this run did not start (an earlier run did): counted when the plan reaches them. */
  late: Record<string, TrialSummary>;
  continuedAsNew: number;
}

/** What the job keeps of a running trial: enough to count it should it end without reporting back. */
type RunningTrial = RunningTrialInfo &
  Pick<TrialSummary, 'envKey'> &
  Partial<Pick<TrialSummary, 'taskName' | 'datasetName' | 'agentName' | 'attempt'>>;

const DEFAULT_PAGE_SIZE = 100;
const DEFAULT_RECONCILE_INTERVAL_SEC = 120;
/** Jobs started before the job checked on its trials replay without the check's timers. */
const RECONCILE_PATCH = 'reconcile-running-trials';
/** Jobs started before a freed slot started the next trial at once wrote results and released images first. */
const SLOT_FIRST_PATCH = 'start-trials-before-housekeeping';
/** Jobs started before free slots were filled together waited for each trial's start before starting the next. */
const START_TOGETHER_PATCH = 'start-trials-together';
/** Jobs started before the final result was written once wrote it after the last trial's, then released images. */
const FINAL_WRITE_ONCE_PATCH = 'final-result-written-once';
/**
 * Jobs started before housekeeping was paced started (and cancelled) a reconcile timer at every wait, and wrote the
 * result at every trial's end.
 */
const PACED_HOUSEKEEPING_PATCH = 'paced-housekeeping';
/** While trials keep finishing, the job's result.json is written at most this often (the trials' own at once). */
const RESULT_WRITE_INTERVAL_MS = 1000;
const DEFAULT_MAX_HISTORY_EVENTS = 10_000;
const CANCEL_DRAIN_TIMEOUT = '10 minutes';

const { readPlanPage, writeJobResult, endedTrials } = proxyActivities<JobActivities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
  retry: { maximumAttempts: 5 },
});

export async function jobWorkflow(input: JobInput): Promise<JobProgress> {
  const info = workflowInfo();
  const state: JobCarry = input.carried ?? {
    cursor: 0,
    startedAt: new Date().toISOString(),
    stats: emptyStats(input.totalTrials),
    scoredRewardSum: 0,
    scoredRewardCount: 0,
    running: {},
    envs: {},
    late: {},
    continuedAsNew: 0,
  };
  let status: JobProgress['status'] = 'running';
  let dirty = true;
  /** Trials whose start is not confirmed yet: the free slots are filled in one workflow task, not one each. */
  const starting = new Map<string, Promise<void>>();

  const progress = (): JobProgress => ({
    jobName: input.jobName,
    status,
    total: input.totalTrials,
    finished: finishedCount(state.stats),
    running: Object.keys(state.running).length,
    completed: state.stats.n_completed,
    errored: state.stats.n_errored,
    cancelled: state.stats.n_cancelled,
    infrastructureErrors: state.stats.n_infrastructure_errors,
    errorsByType: { ...state.stats.errors_by_type },
    meanReward: state.scoredRewardCount > 0 ? state.scoredRewardSum / state.scoredRewardCount : null,
    runningTrials: Object.values(state.running).map(({ trialId, trialName, startedAt }) => ({
      trialId,
      trialName,
      startedAt,
    })),
    continuedAsNew: state.continuedAsNew,
    evals: currentResult().evals,
  });

  const currentResult = () =>
    buildJobResult({
      jobName: input.jobName,
      workflowId: info.workflowId,
      status,
      startedAt: state.startedAt,
      now: new Date().toISOString(),
      running: Object.keys(state.running).length,
      stats: state.stats,
      metrics: input.metrics,
    });

  const count = (summary: TrialSummary) => {
    addTrial(state.stats, summary);
    const reward = primaryReward(summary.rewards);
    const scored = summary.error?.type !== INFRASTRUCTURE_ERROR && summary.error?.type !== CANCELLED_ERROR;
    if (scored) {
      state.scoredRewardSum += reward ?? 0;
      state.scoredRewardCount += 1;
    }
    dirty = true;
  };

  /** A trial ended: by its signal or, when none came, found by reconcile(). */
  const trialEnded = (summary: TrialSummary) => {
    const running = state.running[summary.trialId];
    if (!running) {
      state.late[summary.trialId] = summary;
      return;
    }
    delete state.running[summary.trialId];
    count(summary);
    const env = state.envs[running.envKey];
    if (env) {
      env.running -= 1;
      // Summaries of older trials name one image; newer ones every image of every host the trial ran on.
      const images =
        summary.builtImages ??
        (summary.builtImage && summary.hostQueue ? [{ hostQueue: summary.hostQueue, image: summary.builtImage }] : []);
      for (const { hostQueue, image } of images) env.images[hostQueue] = image;
    }
  };
  setHandler(jobProgressQuery, progress);
  setHandler(trialFinishedSignal, trialEnded);

  /**
   * A trial terminated (from the UI), timed out or failed writing its result never signals: ask the server about
   * running trials now and then, and count those that ended (as errors unless they returned a summary).
   */
  const reconcile = async () => {
    // A trial whose start is not confirmed yet is not found on the server either: not ended.
    const trials = Object.values(state.running).filter((trial) => !starting.has(trial.trialId));
    if (trials.length === 0) return;
    for (const ended of await endedTrials({ trialIds: trials.map((trial) => trial.trialId) })) {
      const running = state.running[ended.trialId];
      if (!running) continue; // its signal came in the meantime
      trialEnded(
        ended.summary ?? {
          trialId: running.trialId,
          trialName: running.trialName,
          taskName: running.taskName ?? running.trialName,
          datasetName: running.datasetName ?? '',
          agentName: running.agentName ?? '',
          attempt: running.attempt ?? 1,
          rewards: null,
          error: {
            type: INFRASTRUCTURE_ERROR,
            message: `the trial workflow ended (${ended.status.toLowerCase()}) without reporting a result`,
            step: 'trial',
          },
          hostQueue: null,
          builtImage: null,
          envKey: running.envKey,
        }
      );
    }
  };

  const reconcileIntervalMs = (input.reconcileIntervalSec ?? DEFAULT_RECONCILE_INTERVAL_SEC) * 1000;
  // One timer for the whole run says when to check on the trials: a timer per wait, started and cancelled, cost two
  // events and a server timer at every trial's end.
  const paced = patched(PACED_HOUSEKEEPING_PATCH);
  let reconcileDue = false;
  if (paced) {
    // Not cancellable: a cancelled job still checks on the trials it waits for.
    void CancellationScope.nonCancellable(async () => {
      for (;;) {
        await sleep(reconcileIntervalMs);
        reconcileDue = true;
      }
    });
  }

  /** Waits until `ready` holds, checking on running trials every reconcile interval meanwhile. */
  const waitForTrials = async (ready: () => boolean) => {
    if (!patched(RECONCILE_PATCH)) return void (await condition(ready));
    if (!paced) {
      while (!(await condition(ready, reconcileIntervalMs))) await reconcile();
      return;
    }
    for (;;) {
      await condition(() => ready() || reconcileDue);
      if (reconcileDue) {
        reconcileDue = false;
        await reconcile();
      }
      if (ready()) return;
    }
  };

  const writeResult = async () => {
    dirty = false;
    const result = currentResult();
    setCurrentDetails(
      `**${input.jobName}**: ${result.n_finished_trials}/${result.n_total_trials} finished, ${result.n_running_trials} running`
    );
    await writeJobResult({ jobDir: input.jobDir, result });
  };

  const finalWriteOnce = patched(FINAL_WRITE_ONCE_PATCH);
  try {
    await dispatchTrials();
    status = 'completed';
  } catch (err) {
    if (err instanceof ContinueAsNew) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof jobWorkflow>({
        ...input,
        carried: { ...state, continuedAsNew: state.continuedAsNew + 1 },
      });
    }
    if (!isCancellation(err)) throw err;
    status = 'cancelled';
    await CancellationScope.nonCancellable(async () => {
      await cancelRunningTrials(state);
      const drained = () => Object.keys(state.running).length === 0;
      if (!patched(RECONCILE_PATCH)) return void (await condition(drained, CANCEL_DRAIN_TIMEOUT));
      await Promise.race([waitForTrials(drained), sleep(CANCEL_DRAIN_TIMEOUT)]);
      // No more trials will run: every image the job built (and no trial still holds) goes, as after a full run.
      for (const env of Object.values(state.envs)) env.dispatched = true;
      await releaseImages(input, state, paced);
    });
  }
  if (finalWriteOnce && status === 'completed') {
    // The last trial's end is written once, with the final status, while the images no trial needs go.
    await CancellationScope.nonCancellable(() => Promise.all([writeResult(), releaseImages(input, state, paced)]));
  } else {
    await CancellationScope.nonCancellable(writeResult);
  }
  return progress();

  /**
   * The sliding window: start trials page by page while slots are free; write results and release images as trials
   * finish, alongside: a freed slot starts the next trial at once, never after result writes or image removals.
   */
  async function dispatchTrials(): Promise<void> {
    const pageSize = input.pageSize ?? DEFAULT_PAGE_SIZE;
    const runningCount = () => Object.keys(state.running).length;
    const slotFirst = patched(SLOT_FIRST_PATCH);
    const startTogether = patched(START_TOGETHER_PATCH);
    let startFailure: Error | null = null;
    const allStarted = async () => {
      await Promise.all(starting.values());
      if (startFailure) throw startFailure;
    };
    let housekeeping: Promise<void> | null = null;
    let housekeepingFailure: Error | null = null;
    /** Workflow time of the last result write, and whether the next may not wait for its interval. */
    let lastWrite = -Infinity;
    let writeNow = false;
    /** The last trial ended: the final write and release follow. */
    let finishing = false;
    /**
     * Writes the result (again while trials keep finishing, at most once per RESULT_WRITE_INTERVAL_MS) and releases
     * images, unless already under way.
     */
    const housekeep = () => {
      housekeeping ??= (async () => {
        // Images go at once; only the result write is paced.
        if (paced && !finishing) await releaseImages(input, state, paced);
        while (dirty) {
          const wait = lastWrite + RESULT_WRITE_INTERVAL_MS - Date.now();
          if (paced && wait > 0 && !writeNow) await condition(() => writeNow, wait);
          if (!dirty) break; // the final write, which follows, says it all
          await writeResult();
          lastWrite = Date.now();
          // Written at once before continuing-as-new: once (the next run writes what came since), not again for
          // every trial that ends meanwhile.
          if (paced && writeNow) break;
        }
        // Those freed meanwhile; at the end, the final write's release takes them, alongside it.
        if (!(paced && finishing)) await releaseImages(input, state, paced);
      })()
        .catch((err: unknown) => void (housekeepingFailure ??= err instanceof Error ? err : new Error(String(err))))
        .finally(() => (housekeeping = null));
    };
    const continueAsNewIfLong = async () => {
      if (housekeepingFailure) throw housekeepingFailure;
      if (startFailure) throw startFailure;
      const { continueAsNewSuggested, historyLength } = workflowInfo();
      if (continueAsNewSuggested || historyLength > (input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS)) {
        await allStarted();
        writeNow = true;
        await housekeeping;
        throw new ContinueAsNew();
      }
    };
    /** Waits for housekeeping under way, if any; its failure fails the job. */
    const housekept = async () => {
      await housekeeping;
      if (housekeepingFailure) throw housekeepingFailure;
    };
    const checkpoint = async () => {
      if (slotFirst) {
        housekeep();
        await housekept();
      } else {
        if (dirty) await writeResult();
        await releaseImages(input, state);
      }
      await continueAsNewIfLong();
    };
    /** While the window is full: a trial's end frees a slot, or gives housekeeping to do (in the background). */
    const untilSlotFree = async () => {
      if (!slotFirst) {
        while (runningCount() >= input.concurrency) {
          await waitForTrials(() => runningCount() < input.concurrency || dirty);
          await checkpoint();
        }
        return;
      }
      while (runningCount() >= input.concurrency) {
        await waitForTrials(() => runningCount() < input.concurrency || (dirty && housekeeping === null));
        housekeep();
        await continueAsNewIfLong();
      }
    };

    while (state.cursor < input.totalTrials) {
      const page: PlanPageEntry[] = await readPlanPage({
        jobDir: input.jobDir,
        offset: state.cursor,
        limit: pageSize,
        rerunErrorTypes: input.rerunErrorTypes,
      });
      if (page.length === 0) {
        throw ApplicationFailure.nonRetryable(`plan.jsonl ends at ${state.cursor} of ${input.totalTrials} trials`);
      }
      for (const entry of page) {
        const { spec } = entry.trial;
        const env = (state.envs[spec.envKey] ??= { running: 0, dispatched: false, images: {} });
        const finished = entry.finished ?? state.late[spec.trialId];
        delete state.late[spec.trialId];
        if (finished) {
          count(finished);
        } else {
          await untilSlotFree();
          if (startTogether) {
            const start = startTrial(spec)
              .catch((err: unknown) => void (startFailure ??= err instanceof Error ? err : new Error(String(err))))
              .finally(() => starting.delete(spec.trialId));
            starting.set(spec.trialId, start);
          } else {
            await startTrial(spec);
          }
          env.running += 1;
          state.running[spec.trialId] = {
            trialId: spec.trialId,
            trialName: spec.trialName,
            startedAt: new Date().toISOString(),
            envKey: spec.envKey,
            taskName: spec.taskName,
            datasetName: spec.datasetName,
            agentName: spec.agentName,
            attempt: spec.attempt,
          };
        }
        if (entry.trial.envLast) env.dispatched = true;
        state.cursor += 1;
      }
      if (slotFirst) {
        housekeep();
        await continueAsNewIfLong();
      } else {
        await checkpoint();
      }
    }
    await allStarted();
    // The tail: keep results fresh and images released while the last trials finish.
    while (runningCount() > 0) {
      if (paced) {
        await waitForTrials(() => runningCount() === 0 || (dirty && housekeeping === null));
        if (runningCount() === 0) break;
        housekeep();
        await continueAsNewIfLong();
        continue;
      }
      await waitForTrials(() => dirty);
      if (finalWriteOnce && runningCount() === 0) break;
      await checkpoint();
    }
    if (!finalWriteOnce) return checkpoint();
    if (paced) {
      // The final write follows: housekeeping under way need not write, nor wait to.
      dirty = false;
      writeNow = true;
      finishing = true;
    }
    await housekept();
  }
}

class ContinueAsNew extends Error {}

async function startTrial(spec: TrialSpec): Promise<void> {
  try {
    await startChild(trialWorkflow, {
      workflowId: spec.trialId,
      args: [spec],
      // Trials outlive each run of the Job (continue-as-new closes the run): a new run must not kill them.
      parentClosePolicy: ParentClosePolicy.ABANDON,
      // The on-disk result decides what is finished, so a closed trial with the same id may run again.
      workflowIdReusePolicy: 'ALLOW_DUPLICATE',
      staticSummary: `${spec.taskName} · ${spec.agentName} · attempt ${spec.attempt}`,
      typedSearchAttributes: [
        { key: RolloutJob, value: spec.jobName },
        { key: RolloutTask, value: spec.taskName },
        { key: RolloutAgent, value: spec.agentName },
        { key: RolloutDataset, value: spec.datasetName },
        { key: RolloutAttempt, value: spec.attempt },
        { key: RolloutStatus, value: 'running' },
      ],
    });
  } catch (err) {
    // Still running from an earlier run of this job: it will signal this run when it finishes.
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
}

/**
 * Removes images of environments no remaining trial needs, on every host that built one; `together`: all at once
 * (jobs started before paced housekeeping removed one environment's after another's).
 */
async function releaseImages(input: JobInput, state: JobCarry, together = false): Promise<void> {
  const removals: Promise<unknown>[] = [];
  for (const [envKey, env] of Object.entries(state.envs)) {
    if (!env.dispatched || env.running > 0) continue;
    delete state.envs[envKey];
    if (!input.deleteImages) continue;
    const removal = Promise.all(
      Object.entries(env.images).map(async ([hostQueue, image]) => {
        const { removeImage } = proxyActivities<ProviderActivities>({
          taskQueue: hostQueue,
          scheduleToStartTimeout: '1 minute',
          startToCloseTimeout: '5 minutes',
          heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
          retry: { maximumAttempts: 3 },
        });
        await removeImage({ environmentType: input.environmentType, image }).catch(() => false);
      })
    );
    if (together) removals.push(removal);
    else await removal;
  }
  await Promise.all(removals);
}

/** On cancel: ask every running trial to cancel (their cleanup runs); the caller waits for them to report back. */
async function cancelRunningTrials(state: JobCarry): Promise<void> {
  await Promise.all(
    Object.keys(state.running).map((trialId) =>
      getExternalWorkflowHandle(trialId)
        .cancel()
        .catch(() => undefined)
    )
  );
}
