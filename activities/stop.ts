import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';

export interface StopInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
}

/** Step 7: stops the environment (after its logs were collected). */
export function stopEnvironment(deps: ActivityDeps) {
  return async function stopEnvironment({ spec, handle }: StopInput): Promise<void> {
    await heartbeating(() => deps.environment(spec.environmentType).stop(handle));
  };
}
