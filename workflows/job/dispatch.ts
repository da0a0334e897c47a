/**
 * The sliding window: start trials page by page from the plan while slots are free, at most `concurrency` at once;
 * housekeeping runs alongside (a freed slot starts the next trial at once, never after result writes or image
 * removals), and the run continues as new before its history grows long.
 */
import { ApplicationFailure, ParentClosePolicy, startChild, workflowInfo } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';

import { trialStartOptions } from '../trial/start-options';
import type { TrialSpec } from '../../src/contracts/trial';
import { trialWorkflow } from '../trial';
import { readPlanPage } from './activities';
import type { Housekeeper } from './housekeeping';
import type { JobPatches } from './patches';
import type { TrialWatch } from './reconcile';
import type { JobInput, JobState } from './state';

const DEFAULT_PAGE_SIZE = 100;
const DEFAULT_MAX_HISTORY_EVENTS = 10_000;

/** Thrown out of the window when the run should continue as new (caught by the workflow). */
export class ContinueAsNew extends Error {}

/** Thrown out of the window when job.yaml `budget` is spent and no trial runs any more: trials are left unstarted. */
export class BudgetExhausted extends Error {}

export interface Dispatch {
  input: JobInput;
  job: JobState;
  patches: JobPatches;
  housekeeper: Housekeeper;
  watch: TrialWatch;
}

// The phases below keep the awaits of the single function they came from, one for one: a command's place in the
// history depends on which coroutine runs first, so no await is added or removed around a start or a housekeeping call.
export async function dispatchTrials(dispatch: Dispatch): Promise<void> {
  const window = new TrialWindow(dispatch);
  const { input, job, patches, housekeeper, watch } = dispatch;
  const { carry } = job;
  while (carry.cursor < input.totalTrials) {
    const page = await readPlanPage({
      jobDir: input.jobDir,
      offset: carry.cursor,
      limit: input.pageSize ?? DEFAULT_PAGE_SIZE,
      rerunErrorTypes: input.rerunErrorTypes,
    });
    if (page.length === 0) {
      throw ApplicationFailure.nonRetryable(`plan.jsonl ends at ${carry.cursor} of ${input.totalTrials} trials`);
    }
    for (const entry of page) {
      const { spec } = entry.trial;
      const env = job.env(spec.envKey);
      const late = job.takeLate(spec.trialId);
      const finished = entry.finished ?? late;
      if (finished) {
        job.count(finished);
      } else {
        await window.untilSlotFree();
        if (input.budget) await window.whileBudgetSpent();
        if (patches.startTogether) window.startAlongside(spec);
        else await startTrial(spec);
        job.trialStarted(spec, env, new Date().toISOString());
      }
      if (entry.trial.envLast) env.dispatched = true;
      carry.cursor += 1;
    }
    if (patches.slotFirst) {
      housekeeper.start();
      await window.continueAsNewIfLong();
    } else {
      await window.checkpoint();
    }
  }
  await window.allStarted();
  // The tail: keep results fresh and images released while the last trials finish.
  while (job.runningCount > 0) {
    if (patches.paced) {
      await watch.waitForTrials(() => job.runningCount === 0 || (job.dirty && housekeeper.idle));
      if (job.runningCount === 0) break;
      housekeeper.start();
      await window.continueAsNewIfLong();
      continue;
    }
    await watch.waitForTrials(() => job.dirty);
    if (patches.finalWriteOnce && job.runningCount === 0) break;
    await window.checkpoint();
  }
  if (!patches.finalWriteOnce) return window.checkpoint();
  if (patches.paced) {
    // The final write follows: housekeeping under way need not write, nor wait to.
    job.dirty = false;
    housekeeper.writeNow = true;
    housekeeper.finishing = true;
  }
  await housekeeper.settled();
}

/** The window's phases over one run of the Job; every wait is on the workflow's own state (deterministic). */
class TrialWindow {
  /** The first trial start that failed (startTogether: starts run alongside), rethrown at the next phase. */
  private startFailure: Error | null = null;

  constructor(private readonly dispatch: Dispatch) {}

  async allStarted(): Promise<void> {
    await Promise.all(this.dispatch.job.starting.values());
    if (this.startFailure) throw this.startFailure;
  }

  async continueAsNewIfLong(): Promise<void> {
    const { input, housekeeper } = this.dispatch;
    housekeeper.throwIfFailed();
    if (this.startFailure) throw this.startFailure;
    const { continueAsNewSuggested, historyLength } = workflowInfo();
    if (continueAsNewSuggested || historyLength > (input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS)) {
      await this.allStarted();
      housekeeper.writeNow = true;
      await housekeeper.quiet();
      throw new ContinueAsNew();
    }
  }

  async checkpoint(): Promise<void> {
    const { job, patches, housekeeper } = this.dispatch;
    if (patches.slotFirst) {
      housekeeper.start();
      await housekeeper.settled();
    } else {
      if (job.dirty) await housekeeper.writeResult();
      await housekeeper.releaseImages(false);
    }
    await this.continueAsNewIfLong();
  }

  /**
   * While the window is full or the job paused (`rollout ctl`, read here at every start): a trial's end or a control
   * frees a slot, or gives housekeeping to do (in the background).
   */
  async untilSlotFree(): Promise<void> {
    const { job, patches, housekeeper, watch } = this.dispatch;
    if (!patches.slotFirst) {
      while (!job.slotFree) {
        await watch.waitForTrials(() => job.slotFree || job.dirty);
        await this.checkpoint();
      }
      return;
    }
    while (!job.slotFree) {
      await watch.waitForTrials(() => job.slotFree || (job.dirty && housekeeper.idle));
      housekeeper.start();
      await this.continueAsNewIfLong();
    }
  }

  /** While the budget is spent, no trial starts: the running ones finish (a raise lets trials start again). */
  async whileBudgetSpent(): Promise<void> {
    const { job, housekeeper, watch } = this.dispatch;
    const { carry } = job;
    while (carry.budgetExhausted) {
      if (job.runningCount === 0) {
        await this.allStarted();
        throw new BudgetExhausted();
      }
      await watch.waitForTrials(
        () => !carry.budgetExhausted || job.runningCount === 0 || (job.dirty && housekeeper.idle)
      );
      housekeeper.start();
      await this.continueAsNewIfLong();
    }
  }

  /** startTogether: the start runs alongside the next ones; its failure is rethrown at the next phase. */
  startAlongside(spec: TrialSpec): void {
    const { job } = this.dispatch;
    const start = startTrial(spec)
      .catch((err: unknown) => void (this.startFailure ??= err instanceof Error ? err : new Error(String(err))))
      .finally(() => job.starting.delete(spec.trialId));
    job.starting.set(spec.trialId, start);
  }
}

async function startTrial(spec: TrialSpec): Promise<void> {
  try {
    await startChild(trialWorkflow, {
      ...trialStartOptions(spec),
      // Trials outlive each run of the Job (continue-as-new closes the run): a new run must not kill them.
      parentClosePolicy: ParentClosePolicy.ABANDON,
      // The on-disk result decides what is finished, so a closed trial with the same id may run again.
      workflowIdReusePolicy: 'ALLOW_DUPLICATE',
    });
  } catch (err) {
    // Still running from an earlier run of this job: it will signal this run when it finishes.
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
  }
}
