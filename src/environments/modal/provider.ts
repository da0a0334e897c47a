/**
 * The modal provider's record (see ../provider.ts). The environment, and Modal's SDK with it, load on first use: every
 * other command would otherwise pay for the SDK and its gRPC stack.
 */
import path from 'node:path';

import type { Problem } from '../../contracts/errors';
import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider, RequirementTask } from '../../contracts/provider';
import { checkModalCredentials } from './credentials';
import type * as ModalModule from './index';
import type { ModalSettings } from './settings';
import { MODAL_DEFAULT_MAX_GPUS, MODAL_GPU_TYPES, MODAL_MAX_GPUS, ModalSettingsSchema, modalGpuType } from './settings';

export const modalProvider: EnvironmentProvider = {
  type: 'modal',
  settings: ModalSettingsSchema,
  capabilities: {
    hostBound: false,
    // One sandbox per trial.
    compose: false,
    // Filesystem snapshots of a sandbox after an agent's install (snapshots.ts).
    installSnapshots: true,
    // Modal's outbound network policy, changed while the sandbox runs.
    networkPolicy: true,
    gpus: true,
    // Its exec has no user: commands of another user go through su.
    users: true,
    // The SDK sets no disk size.
    storageLimits: false,
    caTrust: true,
    separateVerifier: false,
  },
  /** A Dockerfile (or docker_image), and GPUs of a type Modal has (job.yaml's environment.gpu), as many as it gives. */
  async requirement(task, settings) {
    return [...(await dockerfileRequirement(task, 'modal')), ...gpuProblems(task, ModalSettingsSchema.parse(settings))];
  },
  check: () => checkModalCredentials(),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use (see above)
    const { ModalEnvironment } = require('./') as typeof ModalModule;
    return new ModalEnvironment(owner);
  },
};

/** A task asking for GPUs names no type (Modal has no "any"), or more than Modal attaches to one container. */
function gpuProblems(task: RequirementTask, settings: ModalSettings): Problem[] {
  const gpus = task.config.environment.gpus ?? 0;
  if (gpus === 0) return [];
  const at = { file: path.join(task.dir, 'task.toml'), field: 'environment.gpus' };
  const type = settings.gpu && modalGpuType(settings.gpu);
  if (!type) {
    const types = MODAL_GPU_TYPES.join(', ');
    return [{ ...at, message: `${gpus} GPU(s): set environment.gpu in job.yaml to one of Modal's types (${types})` }];
  }
  const most = MODAL_MAX_GPUS[type] ?? MODAL_DEFAULT_MAX_GPUS;
  return gpus > most ? [{ ...at, message: `${gpus}: Modal attaches at most ${most} ${type} GPUs to a sandbox` }] : [];
}
