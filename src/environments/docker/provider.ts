/** The docker provider's record (see ../provider.ts); the environment itself (and dockerode) loads on first use. */
import path from 'node:path';

import { z } from 'zod';

import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider } from '../../contracts/provider';
import type * as DockerModule from './';
import type { Problem } from '../../contracts/errors';
import { composeFileProblems, taskComposeFile } from './compose';

/** At most this many `docker compose config` at once while a dataset's tasks are checked (all at once otherwise). */
const COMPOSE_CHECKS_AT_ONCE = 4;
let composeChecks = 0;
const waitingChecks: (() => void)[] = [];

/** A task's compose file, judged before any trial (see composeFileProblems): each refused field a problem. */
async function composeRequirement(taskDir: string, taskEnv: Record<string, string>): Promise<Problem[]> {
  const file = await taskComposeFile(path.join(taskDir, 'environment'));
  if (!file) return [];
  if (composeChecks >= COMPOSE_CHECKS_AT_ONCE) await new Promise<void>((resolve) => waitingChecks.push(resolve));
  composeChecks++;
  try {
    return (await composeFileProblems(file, taskEnv)).map(({ field, message }) => ({ file, field, message }));
  } finally {
    composeChecks--;
    waitingChecks.shift()?.();
  }
}

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
  requirement: async (task) => [
    ...(await dockerfileRequirement(task, 'docker')),
    ...(await composeRequirement(task.dir, task.config.environment.env)),
  ],
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use
    const { DockerEnvironment } = require('./') as typeof DockerModule;
    return new DockerEnvironment(owner);
  },
};
