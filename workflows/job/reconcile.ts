/**
 * A trial terminated (from the UI), timed out or failed writing its result never signals its job: the job asks the
 * server about running trials now and then, and counts those that ended (as errors unless they returned a summary).
 */
import { CancellationScope, condition, getExternalWorkflowHandle, log, sleep } from '@temporalio/workflow';

import { INFRASTRUCTURE_ERROR } from '../../src/contracts/trial';
import { endedTrials } from './activities';
import type { JobPatches } from './patches';
import type { JobState } from './state';

/**
 * One timer for the whole run says when to check on the trials: a timer per wait, started and cancelled, cost two
 * events and a server timer at every trial's end.
 */
export class ReconcileClock {
  /** The interval has passed since the last check. */
  due = false;
  started = false;

  constructor(readonly intervalMs: number) {}

  start(): void {
    this.started = true;
    // Not cancellable: a cancelled job still checks on the trials it waits for.
    void CancellationScope.nonCancellable(async () => {
      for (;;) {
        await sleep(this.intervalMs);
        this.due = true;
      }
    });
  }
}

export class TrialWatch {
  constructor(
    private readonly job: JobState,
    private readonly clock: ReconcileClock,
    private readonly patches: Pick<JobPatches, 'reconciles'>
  ) {}

  /** Waits until `ready` holds, checking on running trials every reconcile interval meanwhile. */
  async waitForTrials(ready: () => boolean): Promise<void> {
    if (!this.patches.reconciles()) return void (await condition(ready));
    if (!this.clock.started) {
      while (!(await condition(ready, this.clock.intervalMs))) await this.reconcile();
      return;
    }
    for (;;) {
      await condition(() => ready() || this.clock.due);
      if (this.clock.due) {
        this.clock.due = false;
        await this.reconcile();
      }
      if (ready()) return;
    }
  }

  /** Counts the running trials the server says ended. */
  async reconcile(): Promise<void> {
    // A trial whose start is not confirmed yet is not found on the server either: not ended.
    const trials = this.job.runningTrials().filter((trial) => !this.job.starting.has(trial.trialId));
    if (trials.length === 0) return;
    for (const ended of await endedTrials({ trialIds: trials.map((trial) => trial.trialId) })) {
      const running = this.job.running(ended.trialId);
      if (!running) continue; // its signal came in the meantime
      this.job.trialEnded(
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
  }
}

/** On cancel: ask every running trial to cancel (their cleanup runs); the caller waits for them to report back. */
export async function cancelRunningTrials(job: JobState): Promise<void> {
  await Promise.all(
    job.runningTrials().map(({ trialId }) =>
      getExternalWorkflowHandle(trialId)
        .cancel()
        // Best effort: a trial that ended meanwhile cannot be cancelled, and is counted by its signal or reconcile.
        .catch((err: unknown) => log.warn('could not cancel a running trial', { trialId, error: String(err) }))
    )
  );
}
