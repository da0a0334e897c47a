import type { LeaseHolder } from '../../workers/host-lease';

/**
 * The one line a resumed job prints while live processes of this host hold the worker queues before its own (see
 * workers/host-lease.ts): the trials they started wait for them, and for how long at most.
 */
export function heldQueuesLine(heldBy: LeaseHolder[], hostLostTimeoutSec: number, now: Date): string {
  const pids = heldBy.map((holder) => holder.pid).join(', ');
  const queues = heldBy.map((holder) => `"${holder.workerId}"`).join(', ');
  const until = new Date(now.getTime() + hostLostTimeoutSec * 1000).toISOString().slice(11, 19);
  const who = heldBy.length === 1 ? `process ${pids}` : `processes ${pids}`;
  return (
    `waiting: rollout ${who} on this host, still alive, ${heldBy.length === 1 ? 'holds worker queue' : 'hold worker queues'} ${queues}: ` +
    `this job's trials it started carry on there or, if it no longer serves them, restart on another worker by ` +
    `${until} UTC (host-lost timeout ${hostLostTimeoutSec} s, ROLLOUT_HOST_LOST_TIMEOUT_SEC)`
  );
}
