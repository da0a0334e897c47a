/**
 * The modal provider's check before a job starts: credentials for Modal's SDK in the worker's environment, where the
 * SDK itself finds them (MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, else the active profile of ~/.modal.toml or of
 * MODAL_CONFIG_PATH). They never enter job.yaml, workflow inputs or a sandbox: only the SDK reads them.
 */
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';

import { parse } from 'smol-toml';

import { isAbsent } from '../../files/absent';
import { ProviderConfigError } from '../../contracts/provider';

const MISSING =
  'no credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the worker environment (or run `modal token new` ' +
  'for ~/.modal.toml)';

export async function checkModalCredentials(): Promise<void> {
  const id = process.env.MODAL_TOKEN_ID;
  const secret = process.env.MODAL_TOKEN_SECRET;
  if (id && secret) return;
  if (id || secret) {
    const absent = id ? 'MODAL_TOKEN_SECRET' : 'MODAL_TOKEN_ID';
    throw new ProviderConfigError(
      'modal',
      'input',
      `${absent} is not set (MODAL_TOKEN_ID and MODAL_TOKEN_SECRET go together)`
    );
  }
  const file = process.env.MODAL_CONFIG_PATH || path.join(homedir(), '.modal.toml');
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if (isAbsent(err)) throw new ProviderConfigError('modal', 'input', MISSING);
    throw new ProviderConfigError('modal', 'input', `cannot read ${file}: ${(err as Error).message}`);
  }
  let profiles: Record<string, unknown>;
  try {
    profiles = parse(text);
  } catch (err) {
    throw new ProviderConfigError('modal', 'input', `${file}: not TOML (${(err as Error).message.split('\n')[0]})`);
  }
  const wanted = process.env.MODAL_PROFILE;
  const entries = Object.entries(profiles).filter(
    (entry): entry is [string, Record<string, unknown>] => Boolean(entry[1]) && typeof entry[1] === 'object'
  );
  const profile = wanted
    ? entries.find(([name]) => name === wanted)
    : entries.find(([, values]) => values.active === true);
  if (!profile) {
    const which = wanted ? `no profile "${wanted}" (MODAL_PROFILE)` : 'no active profile';
    throw new ProviderConfigError('modal', 'input', `${file}: ${which}; ${MISSING}`);
  }
  const [name, values] = profile;
  if (!values.token_id || !values.token_secret) {
    throw new ProviderConfigError(
      'modal',
      'input',
      `${file}: profile "${name}" has no token_id and token_secret; ${MISSING}`
    );
  }
}
