import { readdir } from 'node:fs/promises';
import path from 'node:path';

import type { Problem } from '../errors';
import type { EnvironmentType } from '../job/schema';
import type { EnvironmentRequirement } from '../task/load';
import { DockerEnvironment } from './docker';
import type { Environment, EnvironmentOwner } from './environment';
import { LocalEnvironment } from './local';

export function createEnvironment(type: EnvironmentType, owner: EnvironmentOwner): Environment {
  return type === 'docker' ? new DockerEnvironment(owner) : new LocalEnvironment(owner);
}

/** What each environment type needs in a task's environment/ folder (the spec leaves this to the type). */
export function environmentRequirement(type: EnvironmentType): EnvironmentRequirement {
  return type === 'docker' ? dockerRequirement : () => Promise.resolve([]);
}

const dockerRequirement: EnvironmentRequirement = async ({ dir, config }) => {
  const environmentDir = path.join(dir, 'environment');
  const files = await readdir(environmentDir).catch(() => [] as string[]);
  if (files.includes('Dockerfile') || config.environment.docker_image) return [];
  // A docker-compose.yaml adds services around `main`, which is still built from the Dockerfile (as in Harbor).
  const problem: Problem = {
    file: path.join(environmentDir, 'Dockerfile'),
    message:
      'missing (the docker environment builds environment/Dockerfile, or set environment.docker_image in task.toml)',
  };
  return [problem];
};
