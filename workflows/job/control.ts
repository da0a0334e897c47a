/**
 * Live control of a running job (`rollout ctl`): the update's validator and effect, and where it shows. The state is
 * the job's (./state, carried across continue-as-new); the window (./dispatch) reads it at every start.
 */
import { setCurrentDetails, setHandler, upsertMemo, workflowInfo } from '@temporalio/workflow';

import type { JobControl, JobControlState } from '../messages';
import { jobControlUpdate } from '../messages';
import type { JobState } from './state';

/** Far above any real job's; a typo (an extra zero or three) is refused rather than taken. */
export const MAX_CONCURRENCY = 10_000;

/** Why a control cannot apply (one line), or undefined when it can. Pure: the CLI checks the same before sending. */
export function jobControlProblem(control: JobControl): string | undefined {
  switch (control.action) {
    case 'pause':
    case 'resume':
      return undefined;
    case 'concurrency':
      return Number.isInteger(control.value) && control.value >= 1 && control.value <= MAX_CONCURRENCY
        ? undefined
        : `concurrency must be a whole number from 1 to ${MAX_CONCURRENCY}, not ${String(control.value)}`;
    case 'policy-version':
      return Number.isSafeInteger(control.value) && control.value >= 0
        ? undefined
        : `policy-version must be a whole number from 0, not ${String(control.value)}`;
    default:
      return `unknown control ${JSON.stringify((control as { action?: unknown }).action)}`;
  }
}

function apply(state: JobControlState, control: JobControl): void {
  switch (control.action) {
    case 'pause':
      state.paused = true;
      return;
    case 'resume':
      state.paused = false;
      return;
    case 'concurrency':
      state.concurrency = control.value;
      return;
    case 'policy-version':
      state.policy_version = control.value;
      return;
  }
}

/**
 * Handles `jobControlUpdate`. Old histories hold no such update, so the handler adds nothing to their replay; a
 * control's effect is in the state, which the window reads, so it needs no patch either.
 */
export function handleJobControl(job: JobState): void {
  // The gateway reads the policy version from the memo (no worker needed): there from the start when job.yaml sets it.
  if (job.control.policy_version !== undefined && workflowInfo().memo?.control === undefined)
    upsertMemo({ control: { ...job.control } });
  setHandler(
    jobControlUpdate,
    (control) => {
      apply(job.control, control);
      // The result file (the viewer, `rollout status` of a folder) shows the control at its next write.
      job.dirty = true;
      setCurrentDetails(job.details());
      // The memo answers `rollout status` with no worker up, and shows in the Temporal UI.
      upsertMemo({ control: { ...job.control } });
      return { ...job.control };
    },
    {
      validator: (control: JobControl) => {
        const problem = jobControlProblem(control);
        if (problem) throw new Error(problem);
      },
    }
  );
}
