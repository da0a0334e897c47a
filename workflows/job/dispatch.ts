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

export async function dispatchTrials({ input, job, patches, housekeeper, watch }: Dispatch): Promise<void> {
  const { slotFirst, startTogether, paced, finalWriteOnce } = patches;
  const pageSize = input.pageSize ?? DEFAULT_PAGE_SIZE;
  let startFailure: Error | null = null;
  const allStarted = async () => {
    await Promise.all(job.starting.values());
    if (startFailure) throw startFailure;
  };
  const continueAsNewIfLong = async () => {
    housekeeper.throwIfFailed();
    if (startFailure) throw startFailure;
    const { continueAsNewSuggested, historyLength } = workflowInfo();
    if (continueAsNewSuggested || historyLength > (input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS)) {
      await allStarted();
      housekeeper.writeNow = true;
      await housekeeper.quiet();
      throw new ContinueAsNew();
    }
  };
  const checkpoint = async () => {
    if (slotFirst) {
      housekeeper.start();
      await housekeeper.settled();
    } else {
      if (job.dirty) await housekeeper.writeResult();
      await housekeeper.releaseImages(false);
    }
    await continueAsNewIfLong();
  };
  /**
   * While the window is full or the job paused (`rollout ctl`, read here at every start): a trial's end or a control
   * frees a slot, or gives housekeeping to do (in the background).
   */
  const untilSlotFree = async () => {
    if (!slotFirst) {
      while (!job.slotFree) {
        await watch.waitForTrials(() => job.slotFree || job.dirty);
        await checkpoint();
      }
      return;
    }
    while (!job.slotFree) {
      await watch.waitForTrials(() => job.slotFree || (job.dirty && housekeeper.idle));
      housekeeper.start();
      await continueAsNewIfLong();
    }
  };

  const { carry } = job;
  /** While the budget is spent, no trial starts: the running ones finish (a raise lets trials start again). */
  const whileBudgetSpent = async () => {
    while (carry.budgetExhausted) {
      if (job.runningCount === 0) {
        await allStarted();
        throw new BudgetExhausted();
      }
      await watch.waitForTrials(
        () => !carry.budgetExhausted || job.runningCount === 0 || (job.dirty && housekeeper.idle)
      );
      housekeeper.start();
      await continueAsNewIfLong();
    }
  };
  while (carry.cursor < input.totalTrials) {
    const page = await readPlanPage({
      jobDir: input.jobDir,
      offset: carry.cursor,
      limit: pageSize,
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
        await untilSlotFree();
        if (input.budget) await whileBudgetSpent();
        if (startTogether) {
          const start = startTrial(spec)
            .catch((err: unknown) => void (startFailure ??= err instanceof Error ? err : new Error(String(err))))
            .finally(() => job.starting.delete(spec.trialId));
          job.starting.set(spec.trialId, start);
        } else {
          await startTrial(spec);
        }
        job.trialStarted(spec, env, new Date().toISOString());
      }
      if (entry.trial.envLast) env.dispatched = true;
      carry.cursor += 1;
    }
    if (slotFirst) {
      housekeeper.start();
      await continueAsNewIfLong();
    } else {
      await checkpoint();
    }
  }
  await allStarted();
  // The tail: keep results fresh and images released while the last trials finish.
  while (job.runningCount > 0) {
    if (paced) {
      await watch.waitForTrials(() => job.runningCount === 0 || (job.dirty && housekeeper.idle));
      if (job.runningCount === 0) break;
      housekeeper.start();
      await continueAsNewIfLong();
      continue;
    }
    await watch.waitForTrials(() => job.dirty);
    if (finalWriteOnce && job.runningCount === 0) break;
    await checkpoint();
  }
  if (!finalWriteOnce) return checkpoint();
  if (paced) {
    // The final write follows: housekeeping under way need not write, nor wait to.
    job.dirty = false;
    housekeeper.writeNow = true;
    housekeeper.finishing = true;
  }
  await housekeeper.settled();
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
