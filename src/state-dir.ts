import { homedir } from 'node:os';
import path from 'node:path';

/** This host's Rollout state (the dev server's database, the sealing key): kept across runs, unlike the cache. */
export function rolloutStateDir(env: NodeJS.ProcessEnv = process.env): string {
  const stateHome = env.XDG_STATE_HOME ?? path.join(homedir(), '.local', 'state');
  return env.ROLLOUT_STATE_DIR ?? path.join(stateHome, 'rollout');
}
