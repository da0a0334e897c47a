import path from 'node:path';

import { TaskEnvironmentError } from '../src/environments/environment';
import { startTrialRun } from '../src/results/earlier-runs';
import { jobFiles } from '../src/results/files';
import { separateVerifierEnvironment } from '../src/task/schema';
import { taskAtStep } from '../src/task/steps';
import type { TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, log, taskFailure, tail } from './context';
import { verifierBuild } from './verify';

export interface BuildInput {
  spec: TrialSpec;
}

export interface BuildOutput {
  image: string;
  built: boolean;
}

/** Step 1: the trial's image, built from environment/ once per content hash (or the task's docker_image). */
export function buildEnvironment(deps: ActivityDeps) {
  return async function buildEnvironment({ spec }: BuildInput): Promise<BuildOutput> {
    // A trial that starts (or runs again) begins with an empty folder: no stale logs from an earlier run, whose
    // model calls alone are kept (they were paid for; the trial's usage counts them).
    await startTrialRun(jobFiles.trialDir(spec.jobDir, spec.trialName));
    const task = await loadTrialTask(spec);
    await log(spec, 'build', `building environment ${spec.envKey} on ${deps.hostId}`);
    const output: string[] = [];
    try {
      const result = await heartbeating((signal) =>
        deps.environment(spec.environmentType).build({
          contextDir: path.join(task.dir, 'environment'),
          envKey: spec.envKey,
          dockerImage: task.config.environment.docker_image,
          force: spec.forceBuild,
          jobName: spec.jobName,
          timeoutMs: spec.timeouts.build * 1000,
          signal,
          onOutput: (line) => output.push(line),
          ...(spec.kubernetes ? { kubernetes: spec.kubernetes } : {}),
        })
      );
      await log(spec, 'build', `image ${result.image}${result.built ? '' : ' (pre-built)'}`);
      // A multi-step task's steps may each have their own.
      const views = task.steps.length ? task.steps.map((step) => taskAtStep(task, step.name)) : [task];
      for (const view of views) {
        if (!separateVerifierEnvironment(view.config) || spec.environmentType !== 'docker') continue;
        // Built now rather than in the verify step, whose time limit is the tests'.
        const verifier = await heartbeating(async (signal) =>
          deps.environment(spec.environmentType).build(await verifierBuild(spec, view, signal))
        );
        await log(spec, 'build', `separate verifier image ${verifier.image}`);
      }
      return result;
    } catch (err) {
      if (err instanceof TaskEnvironmentError) {
        await log(spec, 'build', `${err.type}: ${tail(err.message)}`);
        throw taskFailure(err.type, err.message);
      }
      throw err;
    }
  };
}
