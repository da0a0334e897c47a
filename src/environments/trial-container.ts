/** How a trial's container runs, whatever runs it (a Docker container, a pod). */

/** The command that keeps a trial's container up. */
export const KEEP_ALIVE = ['sleep', 'infinity'] as const;

/** Every process in the container but PID 1 (which only keeps it up) and the shell running this; as root. */
export const KILL_ALL = 'kill -9 -1 2>/dev/null';

export function isKeepAlive(entrypoint: string[] | string | undefined): boolean {
  return Array.isArray(entrypoint) && entrypoint.join(' ') === KEEP_ALIVE.join(' ');
}

/** Environment variables as `NAME=value` entries (a container's Env, an `env` command's arguments). */
export function envList(env: Record<string, string>): string[] {
  return Object.entries(env).map(([key, value]) => `${key}=${value}`);
}
