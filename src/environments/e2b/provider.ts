/**
 * The e2b provider's record (see ../provider.ts): trials in E2B sandboxes through E2B's official SDK, `e2b`, which
 * loads with the environment on first use.
 */
import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider } from '../../contracts/provider';
import { checkCredentials } from './credentials';
import type * as E2BModule from './';
import { E2BSettingsSchema } from './settings';

export const e2bProvider: EnvironmentProvider = {
  type: 'e2b',
  settings: E2BSettingsSchema,
  capabilities: {
    hostBound: false,
    // One sandbox per trial.
    compose: false,
    // E2B snapshots of a sandbox after the agent's install (snapshots.ts).
    installSnapshots: true,
    // E2B's internet access, at creation and per phase.
    networkPolicy: true,
    gpus: false,
    // envd runs each command as the user it names.
    users: true,
    // Disk is per E2B plan, not per sandbox.
    storageLimits: false,
    caTrust: true,
    separateVerifier: false,
  },
  requirement: (task) => dockerfileRequirement(task, 'e2b'),
  check: () => checkCredentials(),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use (see above)
    const { E2BEnvironment } = require('./') as typeof E2BModule;
    return new E2BEnvironment(owner);
  },
};
