/**
 * A process told apart from a later one that reuses its pid: its pid and its start time (field 22 of
 * /proc/<pid>/stat, clock ticks since boot). Where there is no /proc (macOS), only the pid is known.
 */
import { existsSync, readFileSync } from 'node:fs';

import { isAbsent } from './files/absent';

export interface ProcessStat {
  pid: number;
  /** The executable's name as the kernel keeps it (15 characters; npm sets its own, e.g. `npm exec rollou`). */
  comm: string;
  /** R, S, D, …; Z once it has exited and its parent has not reaped it yet. */
  state: string;
  ppid: number;
  startTime: string;
}

const HAS_PROC = existsSync('/proc/self/stat');

/** A process's stat line; undefined when it does not run (or there is no /proc). */
export function readProcessStat(pid: number): ProcessStat | undefined {
  if (!HAS_PROC) return undefined;
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (err) {
    if (isAbsent(err)) return undefined;
    throw err;
  }
  // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split after its last `)`.
  const close = text.lastIndexOf(')');
  const fields = text.slice(close + 2).split(' ');
  return {
    pid,
    comm: text.slice(text.indexOf('(') + 1, close),
    state: fields[0] ?? '',
    ppid: Number(fields[1]),
    startTime: fields[19] ?? '',
  };
}

/** This process's start time, to store beside its pid; undefined without /proc. */
export function ownStartTime(): string | undefined {
  return readProcessStat(process.pid)?.startTime;
}

/**
 * Whether the process that had `pid` and started at `startTime` still runs: false once the pid is gone or reused by
 * a later process. Without a start time (or /proc), any live process with that pid counts.
 */
export function isStillRunning(pid: number, startTime: string | undefined): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false; // EPERM: alive, another user's
  }
  if (startTime === undefined || !HAS_PROC) return true;
  return readProcessStat(pid)?.startTime === startTime;
}

/** Whether `pid` has exited: gone, or a zombie its parent has not reaped yet. */
export function hasExited(pid: number): boolean {
  return !isStillRunning(pid, undefined) || readProcessStat(pid)?.state === 'Z';
}

/** npm's child is a shell, the CLI the shell's child (or the shell itself, once it exec'd). */
const NPM_ANCESTORS_CHECKED = 2;

/**
 * The npm process that ran this one (`npx rollout …`, `npm start`) among its nearest ancestors, which npm names
 * `npm exec …`, `npm start`, …; undefined when not run by npm (or without /proc).
 */
export function npmAncestor(): ProcessStat | undefined {
  if (process.env.npm_lifecycle_event === undefined) return undefined;
  let pid = process.ppid;
  for (let depth = 0; depth < NPM_ANCESTORS_CHECKED && pid > 1; depth++) {
    const stat = readProcessStat(pid);
    if (!stat) return undefined;
    if (stat.comm === 'npm' || stat.comm.startsWith('npm ')) return stat;
    pid = stat.ppid;
  }
  return undefined;
}
