/** How a trial's container runs, whatever runs it (a Docker container, a pod, a cloud sandbox). */
import { randomBytes } from 'node:crypto';

import { shellQuote } from '../shell';

/**
 * Capabilities no task needs, dropped from every trial container whatever runs it (raw sockets: ARP spoofing of
 * neighbours; device nodes). Tasks keep running as root, as their images expect.
 */
export const DROPPED_CAPABILITIES = ['NET_RAW', 'MKNOD'] as const;

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

/** An exec as its argv and what must go first to its stdin: the environment's values, never in argv or a URL. */
export interface CommandLine {
  argv: string[];
  /** Present when the request sets env: `export` lines then an end line, read and evaluated by the argv's shell. */
  stdin?: string;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * An exec request as one argv, for backends whose exec has no user, working directory or environment of its own (a
 * pod, a cloud sandbox): the script starts in `cwd` (else `workdir`), another user's command goes through su (the
 * environment runs as root), and `env` comes through stdin, read by the user's shell before the script: a value in
 * argv would be in every process's /proc/<pid>/cmdline and, on Kubernetes, in the exec request's URL.
 */
export function commandLine(
  shell: string,
  request: { command: string; cwd?: string; env?: Record<string, string>; user?: string },
  workdir: string
): CommandLine {
  const cwd = request.cwd ?? workdir;
  let script = cwd ? `cd ${shellQuote(cwd)} || exit 1\n${request.command}` : request.command;
  const env = Object.entries(request.env ?? {});
  let stdin: string | undefined;
  if (env.length > 0) {
    const bad = env.find(([name]) => !ENV_NAME.test(name));
    if (bad) throw new Error(`not an environment variable name: ${JSON.stringify(bad[0].slice(0, 100))}`);
    const end = `ROLLOUT_ENV_END_${randomBytes(12).toString('hex')}`;
    stdin = `${env.map(([name, value]) => `export ${name}=${shellQuote(value)}`).join('\n')}\n${end}\n`;
    script = `${readEnv(end)}\n${script}`;
  }
  const argv = [shell, '-c', script];
  return request.user && request.user !== '0' && request.user !== 'root'
    ? { argv: ['su', '-s', '/bin/sh', '-c', `exec ${argv.map(shellQuote).join(' ')}`, request.user], stdin }
    : { argv, stdin };
}

/** Shell reading stdin's lines up to `end` and evaluating them (commandLine's `export` lines), with builtins only. */
function readEnv(end: string): string {
  return [
    '__rollout_env=',
    `while IFS= read -r __rollout_line && [ "$__rollout_line" != ${end} ]; do`,
    '  __rollout_env="$__rollout_env$__rollout_line',
    '"',
    'done',
    'eval "$__rollout_env" || exit 1',
    'unset __rollout_env __rollout_line',
  ].join('\n');
}
