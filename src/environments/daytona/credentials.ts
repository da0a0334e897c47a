/**
 * Daytona's credentials, checked before a job starts: the SDK reads them from the worker's environment (never from
 * job.yaml, workflow inputs or the sandbox), and a missing one is one line naming the variable (exit 2).
 */
import { ProviderConfigError } from '../../contracts/provider';

export const API_KEY_VARIABLE = 'DAYTONA_API_KEY';
export const API_URL_VARIABLE = 'DAYTONA_API_URL';

export function checkDaytonaCredentials(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  if (!env[API_KEY_VARIABLE]?.trim()) {
    return Promise.reject(
      new ProviderConfigError(
        'daytona',
        'input',
        `${API_KEY_VARIABLE} is not set: the worker needs a Daytona API key (app.daytona.io/dashboard/keys) in its environment`
      )
    );
  }
  const url = env[API_URL_VARIABLE];
  if (url !== undefined && !/^https?:\/\/[^\s]+$/.test(url)) {
    return Promise.reject(
      new ProviderConfigError('daytona', 'input', `${API_URL_VARIABLE} is not an http(s) URL: ${JSON.stringify(url)}`)
    );
  }
  return Promise.resolve();
}
