/**
 * Clean-up of a stand-in's containers when its test run is killed: each container carries a label naming the process
 * that made it (its pid and start time, from /proc, so a reused pid is not taken for it). A stand-in starting removes
 * the containers of its kind whose process is gone, never those of a run still going; and this process, exiting
 * without stop() (a failed test, process.exit), removes what it still holds.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

import type Docker from 'dockerode';

/** The label naming the process that made a stand-in's container. */
export const STAND_IN_OWNER_LABEL = 'rollout.stand-in-owner';

/** `<pid>:<start time in clock ticks since boot>` of a process, or null when it is gone. */
function processIdentity(pid: number): string | null {
  try {
    // Field 22 of /proc/<pid>/stat, counted after the command name (which may hold spaces) closes with ')'.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return `${pid}:${stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]}`;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

const self = processIdentity(process.pid)!;

/** The owner label of this process, for a stand-in's containers. */
export function ownerLabel(): Record<string, string> {
  return { [STAND_IN_OWNER_LABEL]: self };
}

/** Removes the containers labelled `kindLabel` (any value) whose owning process is gone; returns how many. */
export async function removeOrphanedContainers(docker: Docker, kindLabel: string): Promise<number> {
  const containers = await docker.listContainers({ all: true, filters: { label: [kindLabel, STAND_IN_OWNER_LABEL] } });
  let removed = 0;
  for (const container of containers) {
    const owner = container.Labels[STAND_IN_OWNER_LABEL] ?? '';
    if (processIdentity(Number(owner.split(':')[0])) === owner) continue; // its run still goes
    await docker
      .getContainer(container.Id)
      .remove({ force: true })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 404) throw err; // removed already
      });
    removed += 1;
  }
  return removed;
}

/**
 * Containers of `kindLabel=instance` that this process still holds when it exits are removed (synchronously: an
 * exiting process runs no more async work). Returns the function that stops watching (stop() calls it).
 */
export function removeOnExit(kindLabel: string, instance: string): () => void {
  const onExit = () => {
    const filter = `label=${kindLabel}=${instance}`;
    const ids = execFileSync('docker', ['ps', '-aq', '--filter', filter], { encoding: 'utf8' }).split('\n');
    const held = ids.filter(Boolean);
    if (held.length) execFileSync('docker', ['rm', '-f', ...held], { stdio: 'ignore' });
  };
  process.on('exit', onExit);
  return () => process.off('exit', onExit);
}
