/**
 * The kubernetes provider's record (see ../provider.ts). The environment, and @kubernetes/client-node with it, load on
 * first use: they cost ~28 MB of heap and start-up time that every other command would otherwise pay.
 */
import path from 'node:path';

import { dockerfileRequirement, hasDockerfileIn } from '../dockerfile';
import type { EnvironmentProvider } from '../../contracts/provider';
import { checkKubeconfig } from './credentials';
import type * as KubernetesModule from './';
import { KubernetesSettingsSchema } from './settings';

export const kubernetesProvider: EnvironmentProvider = {
  type: 'kubernetes',
  settings: KubernetesSettingsSchema,
  capabilities: {
    hostBound: false,
    // One pod per trial.
    compose: false,
    installSnapshots: false,
    // A pod's network cannot be cut from here (that takes a NetworkPolicy the cluster may not enforce).
    networkPolicy: false,
    gpus: true,
    // Its exec has no user: commands of another user go through su.
    users: true,
    storageLimits: true,
    caTrust: true,
    separateVerifier: false,
  },
  /**
   * As for docker; and a task without docker_image is built, so its image must go to a registry the cluster pulls
   * from: without `image_registry` the job is refused before it starts.
   */
  async requirement(task, settings) {
    const problems = await dockerfileRequirement(task, 'kubernetes');
    const { image_registry: imageRegistry } = KubernetesSettingsSchema.parse(settings);
    if (problems.length || imageRegistry) return problems;
    // A Dockerfile is built even beside a docker_image (as on Docker): that build needs the registry too.
    const built = await hasDockerfileIn(path.join(task.dir, 'environment'));
    if (task.config.environment.docker_image && !built) return problems;
    return [
      {
        file: path.join(task.dir, 'environment', 'Dockerfile'),
        field: 'environment.image_registry',
        message:
          'the kubernetes environment needs an image the cluster can pull: set environment.image_registry in job.yaml ' +
          `(the built image is pushed there)${built ? '; this Dockerfile is built even though task.toml sets environment.docker_image' : ' or environment.docker_image in task.toml'}`,
      },
    ];
  },
  check: (settings) => checkKubeconfig(KubernetesSettingsSchema.parse(settings)),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use (see above)
    const { KubernetesEnvironment } = require('./') as typeof KubernetesModule;
    return new KubernetesEnvironment(owner);
  },
};
