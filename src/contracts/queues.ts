/** Task queue names. Pure: workflows and workers both use them. */
import type { EnvironmentType } from './job-config';

/** Job and Trial workflows, and the job's own activities (plan pages, job result). */
export const JOB_TASK_QUEUE = 'rollout';

/** Shared by every worker of a provider: where a trial claims a host. */
export function providerQueue(type: EnvironmentType): string {
  return `rollout-${type}`;
}

/** Polled only by one host's worker: lifecycle steps go here because the container lives on that host. */
export function hostQueue(type: EnvironmentType, hostId: string): string {
  return `${providerQueue(type)}@${hostId}`;
}

/** How long a job waits for the host that built an image to start removing it, before leaving it behind. */
export const IMAGE_REMOVAL_START_TIMEOUT_SEC = 60;

/** Whether a queue is a provider's shared queue (not a host's own, nor the job queue). */
export function isProviderQueue(queue: string): boolean {
  return queue.startsWith('rollout-') && !queue.includes('@');
}
