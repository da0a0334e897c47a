/**
 * The daytona provider's record (see ../provider.ts): trials in Daytona sandboxes through @daytonaio/sdk. The
 * environment, and the SDK with it (axios, the AWS S3 client, OpenTelemetry), load on first use.
 */
import path from 'node:path';

import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider } from '../../contracts/provider';
import { checkDaytonaCredentials } from './credentials';
import type * as DaytonaModule from './';
import { DaytonaSettingsSchema } from './settings';

export const daytonaProvider: EnvironmentProvider = {
  type: 'daytona',
  settings: DaytonaSettingsSchema,
  capabilities: {
    // Sandboxes are reached through Daytona's API from any worker with the credentials.
    hostBound: false,
    // One sandbox per trial (Daytona runs no compose services beside it).
    compose: false,
    // A sandbox's snapshot after the agent's install (Daytona's "snapshot from sandbox").
    installSnapshots: true,
    // Daytona's networkBlockAll, at creation and per phase.
    networkPolicy: true,
    gpus: true,
    // Sandboxes run as root; commands of another user go through su.
    users: true,
    storageLimits: true,
    caTrust: true,
    separateVerifier: false,
  },
  /** A Dockerfile (or docker_image), and at most 1 GPU: a snapshot or sandbox has `@Max(1)` GPUs (Daytona's DTOs). */
  async requirement(task) {
    const gpus = task.config.environment.gpus ?? 0;
    const tooMany =
      gpus > 1
        ? [
            {
              file: path.join(task.dir, 'task.toml'),
              field: 'environment.gpus',
              message: `${gpus}: a Daytona sandbox has at most 1 GPU`,
            },
          ]
        : [];
    return [...(await dockerfileRequirement(task, 'daytona')), ...tooMany];
  },
  check: () => checkDaytonaCredentials(),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use (see above)
    const { DaytonaEnvironment } = require('./') as typeof DaytonaModule;
    return new DaytonaEnvironment(owner);
  },
};
