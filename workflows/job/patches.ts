/**
 * The Job workflow's patches: each keeps jobs started before a change replaying as they ran. All are read once, at
 * the start of a run, into plain flags the other modules take.
 */
import { patched } from '@temporalio/workflow';

/** Jobs started before the job checked on its trials replay without the check's timers. */
const RECONCILE_PATCH = 'reconcile-running-trials';
/** Jobs started before a freed slot started the next trial at once wrote results and released images first. */
const SLOT_FIRST_PATCH = 'start-trials-before-housekeeping';
/** Jobs started before free slots were filled together waited for each trial's start before starting the next. */
const START_TOGETHER_PATCH = 'start-trials-together';
/** Jobs started before the final result was written once wrote it after the last trial's, then released images. */
const FINAL_WRITE_ONCE_PATCH = 'final-result-written-once';
/**
 * Jobs started before housekeeping was paced started (and cancelled) a reconcile timer at every wait, and wrote the
 * result at every trial's end.
 */
const PACED_HOUSEKEEPING_PATCH = 'paced-housekeeping';

export interface JobPatches {
  paced: boolean;
  finalWriteOnce: boolean;
  slotFirst: boolean;
  startTogether: boolean;
  /** Whether the job checks on running trials that did not report back. */
  reconciles(): boolean;
}

/**
 * Reads the flags in the order recorded histories hold their markers (on replay a marker must come where it was
 * recorded): `paced` first, then `afterPaced` (the reconcile clock's timer lies there when paced), then the rest.
 */
export function readJobPatches(afterPaced: (paced: boolean) => void): JobPatches {
  const paced = patched(PACED_HOUSEKEEPING_PATCH);
  afterPaced(paced);
  const finalWriteOnce = patched(FINAL_WRITE_ONCE_PATCH);
  const slotFirst = patched(SLOT_FIRST_PATCH);
  const startTogether = patched(START_TOGETHER_PATCH);
  // Runs started before the flags were read at start recorded this marker at their first wait for trials, after the
  // first workflow task: replaying, it reads false here and is read again there (where it reads as recorded).
  let reconciles = patched(RECONCILE_PATCH);
  return {
    paced,
    finalWriteOnce,
    slotFirst,
    startTogether,
    reconciles: () => (reconciles ||= patched(RECONCILE_PATCH)),
  };
}
