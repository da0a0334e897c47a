import { installGate } from '../src/agents/install-gate';
import { sandboxRemoved } from '../src/metrics/rollout-metrics';
import type { TrialSpec } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';
import { sandboxRecordState } from '../src/results/sandbox-record';
import { log } from './secrets';
import { removeRecordedSandboxes } from './sandbox-record';

export interface CleanupInput {
  spec: TrialSpec;
}

/**
 * Step 8, always run (after failures and cancellation too): removes everything this host holds for the trial,
 * found by its `rollout.trial` label (so a container from a crashed attempt goes as well), and what the trial's
 * sandbox record says attempts on other hosts left, and frees its slot.
 */
export function cleanupEnvironment(deps: ActivityDeps) {
  return async function cleanupEnvironment({ spec }: CleanupInput): Promise<void> {
    try {
      const environment = deps.environment(spec.environmentType);
      const removed = await heartbeating(async () => {
        // A record that accounts for every sandbox (each removed by its stop) needs no listing, an API call.
        const settled = environment.stopRemoves && (await sandboxRecordState(spec.jobDir, spec.trialName)).settled;
        const labelled = settled ? 0 : await environment.removeTrial(spec.trialId, spec.environmentSettings);
        // What an attempt on another host left (on a Docker daemon it shares, or a cloud listing had not shown yet):
        // by its recorded id. This host's own went by their labels just now.
        const elsewhere = await removeRecordedSandboxes(
          environment,
          spec,
          'cleanup',
          ({ host }) => host !== deps.hostId
        );
        return labelled + elsewhere;
      });
      // Counted here when its stop step did not remove it (it failed, or never ran); roaming ones count at stop only.
      if (removed > 0) sandboxRemoved(spec.environmentType, spec.trialId, false);
      await log(spec, 'cleanup', `removed ${removed} environment(s)`);
    } finally {
      deps.slots.release(spec.trialId);
      installGate.release(spec.trialId); // a trial that failed before its install step never released it
    }
  };
}
