/**
 * A verifier scores an attempt once. The verify step records, in the trial folder, that it started on a sandbox (and
 * task step) and then what it scored, each line synced to disk before it goes on. A retry of the step (its worker
 * died after the tests ran, or before Temporal recorded the step's end) finds that record: a score or a task failure
 * is returned as it was, never measured again; a run that started and left no outcome (its tests may still be running
 * in the sandbox) is not run a second time beside it: the trial restarts on a fresh sandbox instead.
 */
import { mkdir, open, readFile } from 'node:fs/promises';

import { z } from 'zod';

import { ifPresent } from '../files/absent';
import { trialLayout } from '../contracts/paths';
import { TASK_ERROR_TYPES } from '../contracts/trial';

const RunState = z.discriminatedUnion('state', [
  z.object({ state: z.literal('started') }),
  z.object({ state: z.literal('scored'), rewards: z.record(z.string(), z.number()) }),
  z.object({ state: z.literal('failed'), error: z.object({ type: z.enum(TASK_ERROR_TYPES), message: z.string() }) }),
  /** Ended by an infrastructure error the step caught (its tests no longer run): a retry runs them. */
  z.object({ state: z.literal('aborted') }),
]);
export type VerifierRunState = z.infer<typeof RunState>;

const RunKey = z.object({
  /** The sandbox's id: a restart gets a fresh one, and with it a verifier run of its own. */
  sandbox: z.string(),
  /** A multi-step task's step; null for a task of one step. */
  step: z.string().nullable(),
});
export type VerifierRunKey = z.infer<typeof RunKey>;

const RunLine = z.intersection(RunKey.extend({ at: z.string() }), RunState);
export type VerifierRun = z.infer<typeof RunLine>;

/** The last record of this sandbox's (and step's) verifier run; undefined when none started. */
export async function lastVerifierRun(trialDir: string, key: VerifierRunKey): Promise<VerifierRun | undefined> {
  const text = await ifPresent(readFile(trialLayout(trialDir).verifierRuns, 'utf8'));
  let last: VerifierRun | undefined;
  for (const line of (text ?? '').split('\n')) {
    // A line cut by a crash mid-write is no record: the one before it stands.
    const run = parsed(line);
    if (run && run.sandbox === key.sandbox && run.step === key.step) last = run;
  }
  return last;
}

/** Appends a record and syncs it to disk before returning: what a retry reads must have survived the crash. */
export async function recordVerifierRun(trialDir: string, key: VerifierRunKey, state: VerifierRunState): Promise<void> {
  const run: VerifierRun = { ...key, ...state, at: new Date().toISOString() };
  await mkdir(trialDir, { recursive: true });
  const file = await open(trialLayout(trialDir).verifierRuns, 'a');
  try {
    await file.write(`${JSON.stringify(run)}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
}

function parsed(line: string): VerifierRun | undefined {
  if (!line.trim()) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined; // a line cut short by a crash
  }
  const run = RunLine.safeParse(value);
  return run.success ? run.data : undefined;
}
