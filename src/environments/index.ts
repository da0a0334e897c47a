import { readdir } from 'node:fs/promises';
import path from 'node:path';

import type { Problem } from '../errors';
import type { EnvironmentType } from '../job/schema';
import type { EnvironmentRequirement } from '../task/load';
import { DockerEnvironment } from './docker';
import type { Environment } from './environment';
import { LocalEnvironment } from './local';

export function createEnvironment(type: EnvironmentType, hostId: string): Environment {
  return type === 'docker' ? new DockerEnvironment({ hostId }) : new LocalEnvironment();
}

/** What each environment type needs in a task's environment/ folder (the spec leaves this to the type). */
export function environmentRequirement(type: EnvironmentType): EnvironmentRequirement | undefined {
  return type === 'docker' ? dockerRequirement : undefined;
}

const dockerRequirement: EnvironmentRequirement = async ({ dir, config }) => {
  const files = await readdir(path.join(dir, 'environment')).catch(() => [] as string[]);
  if (files.includes('Dockerfile') || config.environment.docker_image) return [];
  const problem: Problem = files.some((f) => /^(docker-)?compose\.ya?ml$/.test(f))
    ? {
        file: path.join(dir, 'environment'),
        message: 'docker-compose environments are not supported yet; provide a Dockerfile',
      }
    : {
        file: path.join(dir, 'environment', 'Dockerfile'),
        message:
          'missing (the docker environment builds environment/Dockerfile, or set environment.docker_image in task.toml)',
      };
  return [problem];
};
