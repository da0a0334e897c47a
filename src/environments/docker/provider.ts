/** The docker provider's record (see ../provider.ts); the environment itself (and dockerode) loads on first use. */
import { z } from 'zod';

import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider } from '../provider';
import type * as DockerModule from './index';

export const dockerProvider: EnvironmentProvider = {
  type: 'docker',
  settings: z.strictObject({}),
  capabilities: {
    hostBound: true,
    compose: true,
    installSnapshots: true,
    networkPolicy: true,
    gpus: true,
    users: true,
    storageLimits: true,
    caTrust: true,
    separateVerifier: true,
  },
  requirement: (task) => dockerfileRequirement(task, 'docker'),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use
    const { DockerEnvironment } = require('./index') as typeof DockerModule;
    return new DockerEnvironment(owner);
  },
};
