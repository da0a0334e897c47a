import { readdir } from 'node:fs/promises';
import path from 'node:path';

import type { Problem } from '../errors';
import type { EnvironmentType, JobConfig } from '../job/schema';
import type { EnvironmentRequirement } from '../task/load';
import { DockerEnvironment } from './docker';
import { taskComposeFile } from './docker/compose';
import type { Environment, EnvironmentOwner } from './environment';
import { KubernetesEnvironment } from './kubernetes';
import { LocalEnvironment } from './local';

export function createEnvironment(type: EnvironmentType, owner: EnvironmentOwner): Environment {
  switch (type) {
    case 'docker':
      return new DockerEnvironment(owner);
    case 'kubernetes':
      return new KubernetesEnvironment(owner);
    case 'local':
      return new LocalEnvironment(owner);
  }
}

/** What each environment type needs in a task's environment/ folder (the spec leaves this to the type). */
export function environmentRequirement(
  environment: Pick<JobConfig['environment'], 'type' | 'image_registry'>
): EnvironmentRequirement {
  switch (environment.type) {
    case 'docker':
      return dockerRequirement;
    case 'kubernetes':
      return kubernetesRequirement(environment.image_registry);
    case 'local':
      return () => Promise.resolve([]);
  }
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

/**
 * As for docker; and a task without docker_image is built, so its image must go to a registry the cluster pulls
 * from: without `image_registry` the job is refused before it starts.
 */
function kubernetesRequirement(imageRegistry: string | undefined): EnvironmentRequirement {
  return async (task) => {
    const problems = await dockerRequirement(task);
    const compose = await taskComposeFile(path.join(task.dir, 'environment'));
    if (compose) {
      problems.push({
        file: compose,
        message: 'docker-compose environments run on the docker environment only (kubernetes runs one pod per trial)',
      });
    }
    if (problems.length || task.config.environment.docker_image || imageRegistry) return problems;
    return [
      {
        file: path.join(task.dir, 'environment', 'Dockerfile'),
        message:
          'the kubernetes environment needs an image the cluster can pull: set environment.image_registry in job.yaml ' +
          '(the built image is pushed there) or environment.docker_image in task.toml',
      },
    ];
  };
}
