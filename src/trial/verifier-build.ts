import path from 'node:path';

import { environmentKey } from '../environments/env-key';
import type { BuildRequest } from '../contracts/environment';
import type { Task } from '../task/load';
import { separateVerifierEnvironment } from '../contracts/task-config';
import { taskAtStep } from '../task/steps';

export type VerifierBuildOptions = Pick<BuildRequest, 'force' | 'jobName' | 'signal'> & {
  /** The env key of the trial's main image, which the verifier's belongs to. */
  mainEnvKey: string;
  timeoutMultiplier?: number;
};

/**
 * The build of a separate verifier's image (Harbor builds it from tests/; a step's own tests/ when it has one), as a
 * part of the trial's main image: the job that releases the main image releases it too. Null for a task (or a step)
 * verified in the agent's own environment.
 */
export async function verifierBuild(task: Task, options: VerifierBuildOptions): Promise<BuildRequest | null> {
  const config = separateVerifierEnvironment(task.config);
  if (!config) return null;
  const contextDir = task.testsDirs.at(-1) ?? path.join(task.dir, 'tests');
  return {
    contextDir,
    envKey: await environmentKey(contextDir, config.docker_image),
    dockerImage: config.docker_image,
    force: options.force,
    jobName: options.jobName,
    timeoutMs: config.build_timeout_sec * (options.timeoutMultiplier ?? 1) * 1000,
    signal: options.signal,
    partOf: options.mainEnvKey,
  };
}

/** Every separate verifier image a task needs (a multi-step task's steps may each have their own), each once. */
export async function verifierBuilds(task: Task, options: VerifierBuildOptions): Promise<BuildRequest[]> {
  const views = task.steps.length ? task.steps.map((step) => taskAtStep(task, step.name)) : [task];
  const builds = new Map<string, BuildRequest>();
  for (const view of views) {
    const build = await verifierBuild(view, options);
    if (build) builds.set(build.envKey, build);
  }
  return [...builds.values()];
}
