/**
 * The modal provider's record (see ../provider.ts). The environment, and Modal's SDK with it, load on first use: every
 * other command would otherwise pay for the SDK and its gRPC stack.
 */
import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider } from '../../contracts/provider';
import { checkModalCredentials } from './credentials';
import type * as ModalModule from './';
import { ModalSettingsSchema } from './settings';

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
  requirement: (task) => dockerfileRequirement(task, 'modal'),
  check: () => checkModalCredentials(),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use (see above)
    const { ModalEnvironment } = require('./') as typeof ModalModule;
    return new ModalEnvironment(owner);
  },
};
