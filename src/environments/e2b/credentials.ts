/** E2B's credentials: the worker's E2B_API_KEY, read by the SDK itself (as are E2B_DOMAIN and E2B_API_URL). */
import { ProviderConfigError } from '../../contracts/provider';

export const API_KEY_VARIABLE = 'E2B_API_KEY';

/** Before a job starts: a missing key is bad input (exit 2), named. */
export function checkCredentials(): Promise<void> {
  if (!process.env[API_KEY_VARIABLE]) {
    return Promise.reject(
      new ProviderConfigError(
        'e2b',
        'input',
        `${API_KEY_VARIABLE} is not set: the E2B API key of the team that runs the sandboxes (https://e2b.dev/dashboard)`
      )
    );
  }
  return Promise.resolve();
}
