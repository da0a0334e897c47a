/**
 * A job: expands into Trial child workflows from the plan file, read in pages, running at most `concurrency` at once
 * (a sliding window, ./dispatch). Trials report back by signal, so the Job can continue-as-new before its history
 * grows large while trials keep running (they are started with ABANDON, never killed by a new run); those that never
 * report are found by ./reconcile. The state is ./state; results and images are ./housekeeping's.
 */
import {
  CancellationScope,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  setHandler,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';

import { JOB_BUDGET_ERROR } from '../../src/contracts/trial-errors';
import type { JobProgress } from '../messages';
import { jobProgressQuery, trialFinishedSignal } from '../messages';
import { budgetChangedSignal } from '../../src/budget/workflow/ledger';
import { budgetLedgerId, closeLedgerSignal } from '../../src/budget/workflow/ledger';
import { handleJobControl } from './control';
import { BudgetExhausted, ContinueAsNew, dispatchTrials } from './dispatch';
import { Housekeeper } from './housekeeping';
import { readJobPatches } from './patches';
import { cancelRunningTrials, ReconcileClock, TrialWatch } from './reconcile';
import type { JobInput } from './state';
import { JobState } from './state';

const DEFAULT_RECONCILE_INTERVAL_SEC = 120;
const CANCEL_DRAIN_TIMEOUT = '10 minutes';

const now = () => new Date().toISOString();

export async function jobWorkflow(input: JobInput): Promise<JobProgress> {
  const job = new JobState(input, workflowInfo().workflowId, now());
  setHandler(jobProgressQuery, () => job.progress(now()));
  setHandler(trialFinishedSignal, (summary) => job.trialEnded(summary));
  setHandler(budgetChangedSignal, ({ exhausted }) => void (job.carry.budgetExhausted = exhausted));
  handleJobControl(job);

  const clock = new ReconcileClock((input.reconcileIntervalSec ?? DEFAULT_RECONCILE_INTERVAL_SEC) * 1000);
  const patches = readJobPatches((paced) => {
    if (paced) clock.start();
  });
  const watch = new TrialWatch(job, clock, patches);
  const housekeeper = new Housekeeper(job, input, patches.paced);

  try {
    await dispatchTrials({ input, job, patches, housekeeper, watch });
    // Trials the budget's end refused mid-run run again on resume, like those it left unstarted.
    job.status = job.carry.stats.errors_by_type[JOB_BUDGET_ERROR] ? 'budget_exhausted' : 'completed';
  } catch (err) {
    if (err instanceof ContinueAsNew) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof jobWorkflow>(job.continued());
    }
    if (err instanceof BudgetExhausted) {
      job.status = 'budget_exhausted';
      // No more trials will run: every image the job built goes, as after a full run.
      job.dispatchedAll();
      await CancellationScope.nonCancellable(() => housekeeper.releaseImages());
    } else {
      if (!isCancellation(err)) throw err;
      job.status = 'cancelled';
      await CancellationScope.nonCancellable(async () => {
        await cancelRunningTrials(job);
        const drained = () => job.runningCount === 0;
        if (!patches.reconciles()) return void (await condition(drained, CANCEL_DRAIN_TIMEOUT));
        await Promise.race([watch.waitForTrials(drained), sleep(CANCEL_DRAIN_TIMEOUT)]);
        // No more trials will run: every image the job built (and no trial still holds) goes, as after a full run.
        job.dispatchedAll();
        await housekeeper.releaseImages();
      });
    }
  }
  if (patches.finalWriteOnce && job.status === 'completed') {
    // The last trial's end is written once, with the final status, while the images no trial needs go.
    await CancellationScope.nonCancellable(() => Promise.all([housekeeper.writeResult(), housekeeper.releaseImages()]));
  } else {
    await CancellationScope.nonCancellable(() => housekeeper.writeResult());
  }
  if (input.budget) {
    // After the final write, which took the ledger's totals: the next run of the job starts a ledger from them.
    await CancellationScope.nonCancellable(() =>
      getExternalWorkflowHandle(budgetLedgerId(input.jobName))
        .signal(closeLedgerSignal)
        .catch((err: unknown) => log.warn('could not close the budget ledger', { error: String(err) }))
    );
  }
  return job.progress(now());
}
