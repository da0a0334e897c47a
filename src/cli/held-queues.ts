import type { LeaseHolder } from '../../workers/host-lease';
import { IMAGE_REMOVAL_START_TIMEOUT_SEC } from '../contracts/queues';

/**
 * The lines a resumed job prints while live processes of this host hold the worker queues before its own (see
 * workers/host-lease.ts): what waits for them, and until when at most. A holder that still works ends the wait
 * sooner; one that stopped serving (stopped, wedged) is given up on at that time.
 */
export function heldQueuesLines(heldBy: LeaseHolder[], now: Date) {
  const pids = heldBy.map((holder) => holder.pid).join(', ');
  const queues = heldBy.map((holder) => `"${holder.workerId}"`).join(', ');
  const who =
    heldBy.length === 1
      ? `rollout process ${pids} on this host, still alive, holds worker queue ${queues}`
      : `rollout processes ${pids} on this host, still alive, hold worker queues ${queues}`;
  const at = (seconds: number) => `${new Date(now.getTime() + seconds * 1000).toISOString().slice(11, 19)} UTC`;
  return {
    trials: (hostLostTimeoutSec: number) =>
      `waiting: ${who}: this job's trials it started carry on there or, if it no longer serves them, restart on ` +
      `another worker by ${at(hostLostTimeoutSec)} (host-lost timeout ${hostLostTimeoutSec} s, ROLLOUT_HOST_LOST_TIMEOUT_SEC)`,
    images: () =>
      `waiting: ${who}: the images it built for this job are removed there or, if it no longer serves them, left ` +
      `behind at ${at(IMAGE_REMOVAL_START_TIMEOUT_SEC)}`,
  };
}
