/** The local provider's record (see ../provider.ts): host processes in a temporary folder, for smoke tests. */
import { z } from 'zod';

import type { EnvironmentProvider } from '../../contracts/provider';
import type * as LocalModule from './';

export const localProvider: EnvironmentProvider = {
  type: 'local',
  settings: z.strictObject({}),
  capabilities: {
    hostBound: true,
    compose: false,
    installSnapshots: false,
    networkPolicy: false,
    gpus: false,
    users: false,
    storageLimits: false,
    // The environment is the host itself: it has the host's trust already.
    caTrust: false,
    separateVerifier: false,
  },
  // Nothing: it runs on the host as it is.
  requirement: () => Promise.resolve([]),
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use
    const { LocalEnvironment } = require('./') as typeof LocalModule;
    return new LocalEnvironment(owner);
  },
};
