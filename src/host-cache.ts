import { homedir } from 'node:os';
import path from 'node:path';

/** Files a worker fetches or builds once per host (Node for agents, the CA bundle for containers). */
export function hostCacheDir(): string {
  const base = process.env.XDG_CACHE_HOME ?? path.join(homedir(), '.cache');
  return process.env.ROLLOUT_CACHE_DIR ?? path.join(base, 'rollout');
}
