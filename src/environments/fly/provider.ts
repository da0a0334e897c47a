/**
 * The fly provider's record (see ../provider.ts): trials as Fly Machines, through the Machines REST API (./client.ts).
 * The environment loads on first use. Fly's exec is request/response (no streamed process): agents on the model
 * gateway reach it at ROLLOUT_GATEWAY_PUBLIC_URL (see docs/environments.md).
 */
import { dockerfileRequirement } from '../dockerfile';
import type { EnvironmentProvider } from '../../contracts/provider';
import { ProviderConfigError } from '../../contracts/provider';
import { DEFAULT_FLY_API, FlyApi, FlyApiError } from './client';
import { flyGuestSize } from './guest';
import type * as FlyModule from './';
import { FlySettingsSchema, flyApp } from './settings';

export const flyProvider: EnvironmentProvider = {
  type: 'fly',
  settings: FlySettingsSchema,
  capabilities: {
    hostBound: false,
    // One machine per trial.
    compose: false,
    installSnapshots: false,
    networkPolicy: false,
    // guest.gpus of environment.gpu_kind.
    gpus: true,
    // Through su, as on kubernetes (Fly's exec has no user).
    users: true,
    storageLimits: false,
    caTrust: true,
    separateVerifier: false,
  },
  requirement: (task) => dockerfileRequirement(task, 'fly'),
  guestSize: (wanted, settings) => flyGuestSize(wanted, FlySettingsSchema.parse(settings).cpu_kind),
  /** FLY_API_TOKEN set, an app named, and the app there for the token: else one line, before the job starts. */
  async check(given) {
    const token = process.env.FLY_API_TOKEN;
    if (!token) {
      throw new ProviderConfigError('fly', 'input', 'FLY_API_TOKEN is not set (a token of `fly tokens create`)');
    }
    const app = flyApp(FlySettingsSchema.parse(given));
    if (!app) throw new ProviderConfigError('fly', 'input', 'no app: set environment.app in job.yaml (or FLY_APP)');
    const base = process.env.FLY_FLAPS_BASE_URL || DEFAULT_FLY_API;
    try {
      await new FlyApi(token, base).app(app);
    } catch (err) {
      if (err instanceof FlyApiError && (err.status === 404 || err.status === 401 || err.status === 403)) {
        throw new ProviderConfigError('fly', 'input', `app "${app}" (environment.app): ${err.flyMessage}`);
      }
      throw new ProviderConfigError('fly', 'unreachable', `the Machines API at ${base}: ${(err as Error).message}`);
    }
  },
  create(owner) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous load on first use (see above)
    const { FlyEnvironment } = require('./') as typeof FlyModule;
    return new FlyEnvironment(owner);
  },
};
