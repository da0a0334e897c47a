/**
 * Each worker process on a host polls a task queue of its own and counts its own trial slots. Two processes given
 * the same host id (two `rollout job.yaml` started at once on one machine) must therefore not share a queue: a
 * trial's steps would run on the other process, which never took its slot, and slots would leak until every claim
 * failed with "host is full". So a process leases its queue's id: the host id itself when no live process of this
 * deployment holds it, else `<host id>~2`, `~3`, … A process that crashed left a lease whose pid is dead: the next
 * process on the host takes it over, and with it the crashed one's queue and its trials' remaining steps (which is
 * what resuming after a crash relies on).
 */
import { chmod, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { readFileSync, unlinkSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface HostLease {
  /** This process's host id: its task queue and the `rollout.worker` label of what it creates. */
  workerId: string;
  release(): Promise<void>;
}

const MAX_WORKERS_PER_HOST = 1000;

/** Shared by every user of the machine (sticky, world-writable like /tmp), so their processes see each other. */
function leaseDir(): string {
  return process.env.ROLLOUT_LEASE_DIR ?? path.join(tmpdir(), 'rollout-host-leases');
}

export async function leaseWorkerId(hostId: string, deployment: string): Promise<HostLease> {
  const dir = leaseDir();
  // The umask would narrow mkdir's mode: set it on the folder this process made.
  if (await mkdir(dir, { recursive: true })) await chmod(dir, 0o1777);
  for (let n = 1; n <= MAX_WORKERS_PER_HOST; n++) {
    const workerId = n === 1 ? hostId : `${hostId}~${n}`;
    const file = path.join(dir, `${deployment}-${encodeURIComponent(workerId)}.pid`);
    if (await tryLease(file)) {
      const removeOnExit = () => releaseOnExit(file);
      process.once('exit', removeOnExit);
      return {
        workerId,
        release: async () => {
          process.off('exit', removeOnExit);
          if ((await holder(file)) === process.pid) await unlink(file).catch(ignoreMissing);
        },
      };
    }
  }
  throw new Error(`more than ${MAX_WORKERS_PER_HOST} live workers hold host id ${hostId} (leases in ${dir})`);
}

async function tryLease(file: string): Promise<boolean> {
  for (;;) {
    try {
      await writeFile(file, `${process.pid}\n`, { flag: 'wx', mode: 0o644 });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    // An empty file is one being written: give its writer a moment before taking it for abandoned.
    const pid = (await holder(file)) ?? (await sleep(100).then(() => holder(file)));
    if (pid !== undefined && isAlive(pid)) return false;
    // Its holder died without releasing it (a crash): take it over. Two processes doing so at once both unlink,
    // and the exclusive create above lets only one of them win.
    await unlink(file).catch(ignoreMissing);
  }
}

/** The pid in a lease file; undefined when the file is gone or half-written (its writer is about to finish). */
async function holder(file: string): Promise<number | undefined> {
  const text = await readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return '';
    throw err;
  });
  const pid = Number.parseInt(text, 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'; // alive, another user's
  }
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
