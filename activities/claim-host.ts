import { ApplicationFailure, sleep } from '@temporalio/activity';

import type { EnvironmentType } from '../src/contracts/job-config';
import { providerQueue } from '../src/contracts/queues';
import type { ActivityDeps } from './context';

export interface ClaimHostInput {
  trialId: string;
  environmentType: EnvironmentType;
  /**
   * The trial's folder is uploaded from one worker (a job in an object store): its steps stay on the worker that
   * claims it even where any worker could reach its environment (a pod, a cloud sandbox).
   */
  pinned?: boolean;
}

export interface ClaimHostOutput {
  hostQueue: string;
  hostId: string;
  /**
   * False when the environment is reachable from any worker (a pod): the trial's steps then go to the shared provider
   * queue, where no host can be lost. Absent in histories recorded before it existed: host-bound.
   */
  hostBound?: boolean;
}

const WAIT_FOR_SLOT_MS = 5_000;

/**
 * Runs on the shared provider queue: whichever worker takes it owns the trial from here on, if it has a free trial
 * slot. A full worker hands the claim back (retryable) so another worker's poll can take it.
 */
export function claimHost(deps: ActivityDeps) {
  return async function claimHost(input: ClaimHostInput): Promise<ClaimHostOutput> {
    // Any worker serves such a trial's steps: no host (and none of its slots) is held; the job bounds concurrency.
    if (!deps.environment(input.environmentType).hostBound && !input.pinned) {
      return { hostQueue: providerQueue(input.environmentType), hostId: deps.hostId, hostBound: false };
    }
    const deadline = Date.now() + WAIT_FOR_SLOT_MS;
    while (!deps.slots.tryAcquire(input.trialId)) {
      if (Date.now() > deadline) {
        throw ApplicationFailure.create({
          message: `host ${deps.hostId} is full`,
          type: 'HostFull',
          nextRetryDelay: '1s',
        });
      }
      await sleep(250);
    }
    return { hostQueue: deps.hostQueue(input.environmentType), hostId: deps.hostId };
  };
}
