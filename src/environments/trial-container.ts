/** How a trial's container runs, whatever runs it (a Docker container, a pod, a cloud sandbox). */
import { shellQuote } from '../shell';

/** The command that keeps a trial's container up. */
export const KEEP_ALIVE = ['sleep', 'infinity'] as const;

/** KILL_ALL's exit status when the killed processes hold half the container's pids limit or more (see KILL_ALL). */
export const KILL_ALL_LEFT_ZOMBIES = 86;

/**
 * KILL_ALL's exit status when it killed nothing because it sees the host's processes (the container shares the host's
 * pid namespace: kernel thread 2, kthreadd, is visible): `kill -9 -1` there would kill every process of the machine.
 */
export const KILL_ALL_REFUSED = 87;

/**
 * Kills every process in the container but PID 1 (which only keeps it up) and the shell running this; as root. PID 1
 * (`sleep`) never reaps what it inherits, so every killed process stays a zombie holding a pid: after a fork bomb,
 * the pids limit would stay used up and nothing could start again. So the command counts what is left (with
 * builtins only: no process can start) and exits KILL_ALL_LEFT_ZOMBIES when it holds half the limit or more; the
 * provider then restarts the container (its files kept), which frees them all.
 */
export const KILL_ALL = [
  `{ read -r c < /proc/2/comm; } 2>/dev/null; [ "$c" != kthreadd ] || exit ${KILL_ALL_REFUSED}`,
  'kill -9 -1 2>/dev/null',
  'n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done',
  '{ read -r m < /sys/fs/cgroup/pids.max || read -r m < /sys/fs/cgroup/pids/pids.max || m=max; } 2>/dev/null',
  `{ [ "$m" = max ] || [ $((n * 2)) -lt "$m" ] || exit ${KILL_ALL_LEFT_ZOMBIES}; }`,
].join('; ');

export function isKeepAlive(entrypoint: string[] | string | undefined): boolean {
  return Array.isArray(entrypoint) && entrypoint.join(' ') === KEEP_ALIVE.join(' ');
}

/** Environment variables as `NAME=value` entries (a container's Env, an `env` command's arguments). */
export function envList(env: Record<string, string>): string[] {
  return Object.entries(env).map(([key, value]) => `${key}=${value}`);
}

/**
 * An exec request as one argv, for backends whose exec has no user, working directory or environment of its own (a
 * pod, a cloud sandbox): `env` sets the variables, the script starts in `cwd` (else `workdir`), and another user's
 * command goes through su (the environment runs as root).
 */
export function commandLine(
  shell: string,
  request: { command: string; cwd?: string; env?: Record<string, string>; user?: string },
  workdir: string
): string[] {
  const cwd = request.cwd ?? workdir;
  const script = cwd ? `cd ${shellQuote(cwd)} || exit 1\n${request.command}` : request.command;
  const command = ['env', ...envList(request.env ?? {}), shell, '-c', script];
  return request.user && request.user !== '0' && request.user !== 'root'
    ? ['su', '-s', '/bin/sh', '-c', `exec ${command.map(shellQuote).join(' ')}`, request.user]
    : command;
}
