import { ApplicationFailure, Context } from '@temporalio/activity';

import { NOT_THIS_HOST } from '../src/contracts/session';
import type { TrialSpec } from '../src/contracts/trial';
import type { ActivityDeps } from './context';

/** What a lifecycle step run as a local activity adds to its input: the host queue the trial claimed. */
export interface OnHostInput {
  spec: TrialSpec;
  hostQueue?: string;
}

/**
 * A lifecycle step that may run as a local activity of the workflow worker: only when this process is the trial's
 * host (its host queue is the one the trial claimed), else it refuses before doing anything and the workflow sends
 * the step to the host's queue. Run as an ordinary activity it runs as is.
 */
export function onHost<I extends OnHostInput, O>(deps: ActivityDeps, activity: (input: I) => Promise<O>) {
  return async (input: I): Promise<O> => {
    if (Context.current().info.isLocal && input.hostQueue !== deps.hostQueue(input.spec.environmentType)) {
      throw ApplicationFailure.nonRetryable(`this worker is not ${input.hostQueue ?? 'the host'}`, NOT_THIS_HOST);
    }
    return activity(input);
  };
}
