/** The life of a limiter workflow (rate-limiter.ts, concurrency-limiter.ts): serve its updates until idle or long. */
import { allHandlersFinished, condition, workflowInfo } from '@temporalio/workflow';

const UPDATES_PER_RUN = 1_000;
const IDLE_END = '10 minutes';

/**
 * Waits while updates keep coming (`handled()` counts them): false after ten idle minutes (the workflow ends: the
 * next ask starts it again), true once the run should continue as new (its handlers finished).
 */
export async function serveUntilIdleOrLong(handled: () => number): Promise<boolean> {
  for (;;) {
    const seen = handled();
    const busy = await condition(
      () => handled() >= UPDATES_PER_RUN || workflowInfo().continueAsNewSuggested || handled() !== seen,
      IDLE_END
    );
    if (!busy) return false;
    if (handled() >= UPDATES_PER_RUN || workflowInfo().continueAsNewSuggested) break;
  }
  await condition(allHandlersFinished);
  return true;
}
