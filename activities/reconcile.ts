import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError } from '@temporalio/client';

import type { TrialSummary } from '../src/contracts/trial';

export interface EndedTrialsInput {
  trialIds: string[];
}

export interface EndedTrial {
  trialId: string;
  /** The workflow's status name (COMPLETED, TERMINATED, TIMED_OUT, FAILED, …; NOT_FOUND when the server lost it). */
  status: string;
  /** What a trial that completed returned; null when it ended otherwise. */
  summary: TrialSummary | null;
}

/** Which of these trials are no longer running, asked of the server (for trials that never reported back). */
export async function endedTrials({ trialIds }: EndedTrialsInput): Promise<EndedTrial[]> {
  const { client } = Context.current();
  const ended: EndedTrial[] = [];
  for (const trialId of trialIds) {
    const handle = client.workflow.getHandle(trialId);
    const status = await handle.describe().then(
      (description) => description.status.name,
      (err: unknown) => {
        if (err instanceof WorkflowNotFoundError) return 'NOT_FOUND';
        throw err;
      }
    );
    if (status === 'RUNNING') continue;
    ended.push({ trialId, status, summary: status === 'COMPLETED' ? ((await handle.result()) as TrialSummary) : null });
  }
  return ended;
}
