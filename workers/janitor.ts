import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';

import type { Environment, HeldEnvironment } from '../src/contracts/environment';
import type { EnvironmentType } from '../src/contracts/job-config';
import { hostQueue } from '../src/contracts/queues';
import { log } from '../src/log';
import { trialStateQuery } from '../workflows/messages';

const QUERY_TIMEOUT_MS = 10_000;

/**
 * Removes what this host holds, for this deployment only, that no trial needs any more: environments of trials that
 * are no longer running (their worker crashed before cleanup, the trial was terminated, or its job is gone: on a
 * backend other hosts share, theirs too) and, with
 * `checkRunningTrials`, those of running trials that restarted on another worker (this host was lost for a while, and
 * the trial moved on). Environments a running trial may still use are left to it: its next attempt replaces them.
 */
export async function removeAbandonedEnvironments(
  client: Client,
  environment: Environment,
  options: { type: EnvironmentType; checkRunningTrials: boolean }
): Promise<number> {
  let removed = 0;
  const all = await environment.heldEnvironments();
  for (const held of all) {
    if (await isAbandoned(client, held, options)) {
      await environment.remove({ id: held.id, workdir: '/' });
      removed += 1;
    }
  }
  const pass = `janitor (${options.type}): ${all.length} environment(s) held, ${removed} of ended trials removed`;
  if (removed > 0) log.info(pass);
  else log.debug(pass);
  return removed;
}

async function isAbandoned(
  client: Client,
  held: HeldEnvironment,
  options: { type: EnvironmentType; checkRunningTrials: boolean }
): Promise<boolean> {
  const handle = client.workflow.getHandle(held.trialId);
  const status = await handle.describe().then(
    (description) => description.status.name,
    (err: unknown) => {
      if (err instanceof WorkflowNotFoundError) return 'NOT_FOUND';
      throw err;
    }
  );
  if (status !== 'RUNNING') return true;
  // Another host's, of a trial still running: that host, or the trial's cleanup, looks after it.
  if (held.elsewhere || !options.checkRunningTrials || held.workerId === null) return false;
  // Only a trial that answers can say where it runs now; one that does not (no workflow worker yet) keeps its own.
  const state = await Promise.race([
    handle.query(trialStateQuery).catch(() => undefined),
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), QUERY_TIMEOUT_MS).unref()),
  ]);
  return (
    state?.hostQueue !== undefined &&
    state.hostQueue !== null &&
    state.hostQueue !== hostQueue(options.type, held.workerId)
  );
}
