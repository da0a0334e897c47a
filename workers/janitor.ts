import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';

import type { Environment } from '../src/environments/environment';

/**
 * Run when a worker starts: removes what this host still holds for trials that are no longer running (their worker
 * crashed before cleanup, or the trial was terminated). Environments of running trials are left to the trials, which
 * replace them on their next attempt.
 */
export async function removeAbandonedEnvironments(
  client: Client,
  hostId: string,
  environment: Environment
): Promise<number> {
  let removed = 0;
  for (const trialId of await environment.heldTrials(hostId)) {
    const status = await client.workflow
      .getHandle(trialId)
      .describe()
      .then(
        (description) => description.status.name,
        (err: unknown) => {
          if (err instanceof WorkflowNotFoundError) return 'NOT_FOUND';
          throw err;
        }
      );
    if (status !== 'RUNNING') removed += await environment.removeTrial(trialId);
  }
  return removed;
}
