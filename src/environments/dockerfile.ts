import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';

import type { Problem } from '../contracts/errors';
import { ifPresent } from '../files/absent';
import type { RequirementTask } from '../contracts/provider';

/** Whether a task's environment/ folder holds a Dockerfile to build. */
export async function hasDockerfileIn(environmentDir: string): Promise<boolean> {
  return (await ifPresent(stat(path.join(environmentDir, 'Dockerfile'))))?.isFile() ?? false;
}

/**
 * What a provider that builds images needs of a task: environment/Dockerfile, or task.toml's docker_image. A
 * docker-compose.yaml adds services around `main`, which is still built from the Dockerfile (as in Harbor).
 */
export async function dockerfileRequirement({ dir, config }: RequirementTask, type: string): Promise<Problem[]> {
  const environmentDir = path.join(dir, 'environment');
  const files = (await ifPresent(readdir(environmentDir))) ?? [];
  if (files.includes('Dockerfile') || config.environment.docker_image) return [];
  const problem: Problem = {
    file: path.join(environmentDir, 'Dockerfile'),
    message: `missing (the ${type} environment builds environment/Dockerfile, or set environment.docker_image in task.toml)`,
  };
  return [problem];
}
