import path from 'node:path';

import { TaskEnvironmentError } from '../src/contracts/environment';
import { startTrialRun } from '../src/results/earlier-runs';
import { jobFiles } from '../src/results/files';
import { taskComposeFile } from '../src/environments/docker/compose';
import type { TrialSpec } from '../src/contracts/trial';
import { formatProblem } from '../src/contracts/errors';
import { taskEnvProblems } from '../src/task/task-env';
import { verifierBuilds } from '../src/trial/verifier-build';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, taskFailure, tail, trialSecretEnv } from './context';
import { log } from './secrets';

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
    // Sealed secrets that are not this trial's (copied from another's input) end it here, before anything runs.
    trialSecretEnv(spec);
    const task = await loadTrialTask(spec);
    // A task that reads worker variables the job does not allow ends here, before anything of it runs.
    const refused = taskEnvProblems(task.config, path.join(task.dir, 'task.toml'), spec.taskEnvAllow);
    if (refused.length) throw taskFailure('MissingEnvironmentVariableError', refused.map(formatProblem).join('; '));
    await log(spec, 'build', `building environment ${spec.envKey} on ${deps.hostId}`);
    const output: string[] = [];
    const contextDir = path.join(task.dir, 'environment');
    const verifiers = await verifierBuilds(task, {
      force: spec.forceBuild,
      jobName: spec.jobName,
      mainEnvKey: spec.envKey,
    });
    // Images built for this one (a separate verifier's, compose sidecars') are released with the job's reference.
    const referenced = verifiers.length > 0 || (await taskComposeFile(contextDir)) !== null;
    try {
      const result = await heartbeating((signal) =>
        deps.environment(spec.environmentType).build({
          contextDir,
          referenced,
          envKey: spec.envKey,
          dockerImage: task.config.environment.docker_image,
          force: spec.forceBuild,
          jobName: spec.jobName,
          timeoutMs: spec.timeouts.build * 1000,
          signal,
          onOutput: (line) => output.push(line),
          settings: spec.environmentSettings,
          resources: spec.resources,
          gpus: task.resources.gpus,
        })
      );
      await log(spec, 'build', `image ${result.image}${result.built ? '' : ' (pre-built)'}`);
      if (verifiers.length) {
        for (const verifier of verifiers) {
          // Built now rather than in the verify step, whose time limit is the tests'.
          const built = await heartbeating((signal) =>
            deps.environment(spec.environmentType).build({ ...verifier, signal })
          );
          await log(spec, 'build', `separate verifier image ${built.image}`);
        }
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
