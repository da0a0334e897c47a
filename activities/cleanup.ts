import { installGate } from '../src/agents/install-gate';
import { sandboxRemoved } from '../src/metrics/rollout-metrics';
import type { TrialSpec } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating, log } from './context';

export interface CleanupInput {
  spec: TrialSpec;
}

/**
 * Step 8, always run (after failures and cancellation too): removes everything this host holds for the trial,
 * found by its `rollout.trial` label (so a container from a crashed attempt goes as well), and frees its slot.
 */
export function cleanupEnvironment(deps: ActivityDeps) {
  return async function cleanupEnvironment({ spec }: CleanupInput): Promise<void> {
    try {
      const environment = deps.environment(spec.environmentType);
      const removed = await heartbeating(() => environment.removeTrial(spec.trialId, spec.environmentSettings));
      // Counted here when its stop step did not remove it (it failed, or never ran); roaming ones count at stop only.
      if (removed > 0) sandboxRemoved(spec.environmentType, spec.trialId, false);
      await log(spec, 'cleanup', `removed ${removed} environment(s)`);
    } finally {
      deps.slots.release(spec.trialId);
      installGate.release(spec.trialId); // a trial that failed before its install step never released it
    }
  };
}
