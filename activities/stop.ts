import { sandboxRemoved } from '../src/metrics/rollout-metrics';
import { recordSandbox } from '../src/results/sandbox-record';
import type { EnvironmentHandle, TrialSpec } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';

export interface StopInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
}

/** Step 7: stops the environment (after its logs were collected). */
export function stopEnvironment(deps: ActivityDeps) {
  return async function stopEnvironment({ spec, handle }: StopInput): Promise<void> {
    const environment = deps.environment(spec.environmentType);
    await heartbeating(() => environment.stop(handle));
    sandboxRemoved(spec.environmentType, spec.trialId, !environment.hostBound);
    // Recorded, so that clean-up knows the sandbox is gone and need not list the trial's by their labels.
    if (environment.stopRemoves) await recordSandbox(spec.jobDir, spec.trialName, { event: 'removed', id: handle.id });
  };
}
