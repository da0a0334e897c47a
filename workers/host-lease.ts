/**
 * Each worker process on a host polls a task queue of its own and counts its own trial slots. Two processes given
 * the same host id (two `rollout job.yaml` started at once on one machine) must therefore not share a queue: a
 * trial's steps would run on the other process, which never took its slot, and slots would leak until every claim
 * failed with "host is full". So a process leases its queue's id: the host id itself when no live process of this
 * deployment holds it, else `<host id>~2`, `~3`, … A process that crashed left a lease whose process is gone: the
 * next process on the host takes it over at once, and with it the crashed one's queue and its trials' remaining steps
 * (which is what resuming after a crash relies on). A lease names its holder by pid and start time, so a pid reused
 * by an unrelated process never passes for the crashed holder, and the npm process that ran the holder, if any
 * (`npx rollout`): killing npm leaves the holder alive for a moment until it notices and stops (src/cli/npm-parent.ts),
 * and the next process waits those moments out instead of taking the next id.
 */
import { chmod, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { readFileSync, unlinkSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { isStillRunning, npmAncestor, ownStartTime } from '../src/process-identity';

export interface HostLease {
  /** This process's host id: its task queue and the `rollout.worker` label of what it creates. */
  workerId: string;
  /** The live processes holding the ids before this one's (their trials' steps stay on their queues). */
  heldBy: LeaseHolder[];
  release(): Promise<void>;
}

export interface LeaseHolder {
  workerId: string;
  pid: number;
  startTime?: string;
  /** The npm process that ran the holder (`<pid> <start time>`), which the holder does not outlive. */
  npm?: string;
}

/** How long a holder whose npm is gone may take to stop (it checks every 250 ms; a busy event loop delays that). */
const ORPHAN_STOP_WAIT_MS = 10_000;

const MAX_WORKERS_PER_HOST = 1000;

/** Shared by every user of the machine (sticky, world-writable like /tmp), so their processes see each other. */
function leaseDir(): string {
  return process.env.ROLLOUT_LEASE_DIR ?? path.join(tmpdir(), 'rollout-host-leases');
}

export async function leaseWorkerId(hostId: string, deployment: string): Promise<HostLease> {
  const dir = leaseDir();
  // The umask would narrow mkdir's mode: set it on the folder this process made.
  if (await mkdir(dir, { recursive: true })) await chmod(dir, 0o1777);
  const heldBy: LeaseHolder[] = [];
  const self = leaseContent();
  for (let n = 1; n <= MAX_WORKERS_PER_HOST; n++) {
    const workerId = n === 1 ? hostId : `${hostId}~${n}`;
    const file = path.join(dir, `${deployment}-${encodeURIComponent(workerId)}.pid`);
    const liveHolder = await tryLease(file, self);
    if (liveHolder) heldBy.push({ workerId, ...liveHolder });
    else {
      const removeOnExit = () => releaseOnExit(file);
      process.once('exit', removeOnExit);
      return {
        workerId,
        heldBy,
        release: async () => {
          process.off('exit', removeOnExit);
          if ((await holder(file))?.pid === process.pid) await unlink(file).catch(ignoreMissing);
        },
      };
    }
  }
  throw new Error(`more than ${MAX_WORKERS_PER_HOST} live workers hold host id ${hostId} (leases in ${dir})`);
}

/** `<pid> <start time> [<npm's pid> <npm's start time>]`; a bare pid without /proc. */
function leaseContent(): string {
  const startTime = ownStartTime();
  if (startTime === undefined) return `${process.pid}\n`;
  const npm = npmAncestor();
  return npm ? `${process.pid} ${startTime} ${npm.pid} ${npm.startTime}\n` : `${process.pid} ${startTime}\n`;
}

/** Takes the lease (undefined) or says which live process holds it. */
async function tryLease(file: string, content: string): Promise<Omit<LeaseHolder, 'workerId'> | undefined> {
  for (;;) {
    try {
      await writeFile(file, content, { flag: 'wx', mode: 0o644 });
      return undefined;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    // An empty file is one being written: give its writer a moment before taking it for abandoned.
    const held = (await holder(file)) ?? (await sleep(100).then(() => holder(file)));
    if (held !== undefined && isStillRunning(held.pid, held.startTime) && !(await stopsWithItsNpm(held))) return held;
    // Its holder died without releasing it (a crash): take it over. Two processes doing so at once both unlink,
    // and the exclusive create above lets only one of them win.
    await unlink(file).catch(ignoreMissing);
  }
}

/** Whether a live holder's npm is gone, and the holder stopped with it within a few moments. */
async function stopsWithItsNpm(held: Omit<LeaseHolder, 'workerId'>): Promise<boolean> {
  const [npmPid, npmStartTime] = (held.npm ?? '').split(' ');
  if (!npmPid || isStillRunning(Number(npmPid), npmStartTime)) return false;
  for (let waited = 0; waited < ORPHAN_STOP_WAIT_MS; waited += 100) {
    if (!isStillRunning(held.pid, held.startTime)) return true;
    await sleep(100);
  }
  return false;
}

/**
 * The holder a lease file names (`<pid> <start time>`, or a bare pid from an older Rollout); undefined when the file
 * is gone or half-written (its writer is about to finish).
 */
async function holder(file: string): Promise<Omit<LeaseHolder, 'workerId'> | undefined> {
  const text = await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return '';
    throw err;
  });
  const [pidText, startTime, npmPid, npmStartTime] = text.trim().split(' ');
  const pid = Number.parseInt(pidText ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  return {
    pid,
    ...(startTime ? { startTime } : {}),
    ...(npmPid && npmStartTime ? { npm: `${npmPid} ${npmStartTime}` } : {}),
  };
}

/** On exit (only synchronous work runs then): frees the lease unless another process took it over already. */
function releaseOnExit(file: string): void {
  try {
    if (Number.parseInt(readFileSync(file, 'utf8'), 10) === process.pid) unlinkSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}
