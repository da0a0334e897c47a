/** Updates, signals and queries of the Session workflow, shared with the server (pure definitions). */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

import type { SessionClaim, SessionRecord, StepOutcome, ToolCall } from '../../src/contracts/session';

/** Completes once the session's container runs (fails if the session ended before). */
export const sessionReadyUpdate = defineUpdate<{ ready_at: string }>('ready');
/**
 * One tool call, executed in the container; rejected once the session ended. The optional second argument sets the
 * policy version from this step on (absent in histories from before it existed).
 */
export const sessionStepUpdate = defineUpdate<StepOutcome, [ToolCall, { policyVersion?: number }?]>('step');
/** Hands a ready warm-pool session to a client, after checking its container is alive. */
export const sessionClaimUpdate = defineUpdate<{ ready_at: string }, [SessionClaim]>('claim');
export const endSessionSignal = defineSignal('end');
export const sessionRecordQuery = defineQuery<SessionRecord>('record');
