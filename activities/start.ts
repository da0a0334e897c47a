import { TaskEnvironmentError } from '../src/environments/environment';
import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, log, resolveWorkerEnv, taskFailure } from './context';

export interface StartInput {
  spec: TrialSpec;
  image: string;
}

export interface StartOutput {
  handle: EnvironmentHandle;
  unenforced: string[];
}

/**
 * Step 2: a fresh environment for the trial, with its resource limits and the instruction in
 * $ROLLOUT_TASK_INSTRUCTION. Whatever an earlier attempt of this trial left on this host is removed first.
 */
export function startEnvironment(deps: ActivityDeps) {
  return async function startEnvironment({ spec, image }: StartInput): Promise<StartOutput> {
    const task = await loadTrialTask(spec);
    try {
      const started = await heartbeating(() =>
        deps.environment(spec.environmentType).start({
          image,
          jobName: spec.jobName,
          trialId: spec.trialId,
          trialName: spec.trialName,
          workerId: deps.hostId,
          resources: spec.resources,
          env: { ...resolveWorkerEnv(task.config.environment.env), ROLLOUT_TASK_INSTRUCTION: task.instruction },
          workdir: task.config.environment.workdir,
        })
      );
      const unenforced = started.unenforced.length ? ` (not enforced here: ${started.unenforced.join(', ')})` : '';
      await log(spec, 'start', `environment ${started.handle.id.slice(0, 12)} started${unenforced}`);
      return started;
    } catch (err) {
      if (err instanceof TaskEnvironmentError) throw taskFailure(err.type, err.message);
      throw err;
    }
  };
}
