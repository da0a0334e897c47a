/** The activities a Job workflow calls: its own housekeeping on the job queue, image removal on a host's queue. */
import { proxyActivities } from '@temporalio/workflow';

import type { JobActivities, ProviderActivities } from '../../activities';
import { IMAGE_REMOVAL_START_TIMEOUT_SEC } from '../../src/contracts/queues';
import { HOUSEKEEPING_HEARTBEAT_MS } from '../trial/activities';

export const { readPlanPage, writeJobResult, endedTrials } = proxyActivities<JobActivities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
  retry: { maximumAttempts: 5 },
});

/** `removeImage` on the host that built the image. */
export function removeImageOn(hostQueue: string): ProviderActivities['removeImage'] {
  return proxyActivities<ProviderActivities>({
    taskQueue: hostQueue,
    scheduleToStartTimeout: IMAGE_REMOVAL_START_TIMEOUT_SEC * 1000,
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: HOUSEKEEPING_HEARTBEAT_MS,
    retry: { maximumAttempts: 3 },
  }).removeImage;
}
