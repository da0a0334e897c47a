/**
 * Lifecycle steps as local activities: when the worker running a trial's workflow is also the host of its container
 * (the CLI's in-process worker, `rollout worker` serving both), a step runs in that process, recorded as one marker
 * in history instead of an activity task's three events and the workflow task that follows it.
 */
import { ActivityFailure, ApplicationFailure, patched } from '@temporalio/workflow';

import { NOT_THIS_HOST } from '../../src/contracts/session';

/** Trials started before their steps could run as local activities replay without them. */
const LOCAL_STEPS_PATCH = 'trial-steps-local-activities';

/** Where a trial's steps may run: `here` until a local step is refused (this workflow worker is not the host). */
export interface StepPlacement {
  hostQueue: string | null;
  here: boolean;
}

/** After a claim: a host-bound trial tries its steps here first. */
export function placeSteps(placement: StepPlacement, hostQueue: string, hostBound: boolean): void {
  placement.hostQueue = hostQueue;
  placement.here = hostBound && patched(LOCAL_STEPS_PATCH);
}

/** A step that runs as a local activity while the trial's steps may run here, else on the host queue. */
export function preferHere<I extends object, O>(
  placement: StepPlacement,
  here: (input: I & { hostQueue?: string }) => Promise<O>,
  remote: (input: I) => Promise<O>
): (input: I) => Promise<O> {
  return async (input) => {
    if (placement.here && placement.hostQueue) {
      try {
        return await here({ ...input, hostQueue: placement.hostQueue });
      } catch (err) {
        if (!notRunHere(err)) throw err;
        placement.here = false;
      }
    }
    return remote(input);
  };
}

/** The activity refused to run in this worker (not the host), or this worker does not have it (an older version). */
export function notRunHere(err: unknown): boolean {
  // A local activity's failure may reach the workflow unwrapped.
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && (cause.type === NOT_THIS_HOST || cause.type === 'NotFoundError');
}
