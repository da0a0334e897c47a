/** The trial's sandbox record (src/results/sandbox-record.ts) as the start and cleanup steps keep and act on it. */
import type { Environment } from '../src/contracts/environment';
import { LABEL_JOB, LABEL_TRIAL } from '../src/contracts/environment';
import type { EnvironmentHandle, TrialSpec } from '../src/contracts/trial';
import { bestEffort } from '../src/log';
import { recordSandbox, recordedSandboxes } from '../src/results/sandbox-record';
import { log } from './secrets';

/**
 * Creates the trial's sandbox with `create`, recorded in the trial folder before the call (the labels it will carry)
 * and after it returns (its id), so neither a crash during the call nor one before the step completes leaves a
 * sandbox that nothing knows of.
 */
export async function recordedCreation<T extends { handle: EnvironmentHandle }>(
  spec: TrialSpec,
  host: string,
  create: () => Promise<T>
): Promise<T> {
  const labels = { [LABEL_JOB]: spec.jobName, [LABEL_TRIAL]: spec.trialId };
  await recordSandbox(spec.jobDir, spec.trialName, { event: 'creating', host, labels });
  const result = await create();
  await recordSandbox(spec.jobDir, spec.trialName, { event: 'created', host, id: result.handle.id });
  return result;
}

/**
 * Removes the sandboxes the trial's record says earlier attempts created and nothing removed (`only`: those that
 * pass). One that cannot be removed now stays recorded for the next step to try; returns how many went.
 */
export async function removeRecordedSandboxes(
  environment: Environment,
  spec: TrialSpec,
  step: string,
  only: (sandbox: { id: string; host: string }) => boolean = () => true
): Promise<number> {
  let removed = 0;
  for (const sandbox of await recordedSandboxes(spec.jobDir, spec.trialName)) {
    if (only(sandbox)) {
      const what = `removing environment ${sandbox.id} an earlier attempt of trial ${spec.trialName} left`;
      const gone = await bestEffort(
        what,
        environment.remove({ id: sandbox.id, workdir: '/' }).then(() => true)
      );
      if (!gone) continue;
      removed += 1;
      await log(
        spec,
        step,
        `environment ${sandbox.id.slice(0, 12)} left by an attempt on ${sandbox.host}: removed or gone`
      );
    }
    await recordSandbox(spec.jobDir, spec.trialName, { event: 'removed', id: sandbox.id });
  }
  return removed;
}
