/** Watching a trial's pod come up, and saying why one never will (an image, a request too big, the cluster). */
import type { V1Pod } from '@kubernetes/client-node';

import type { StartRequest } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { apiQuantity } from '../../contracts/quantity';
import type { Cluster, PodRef } from './client';
import { PodLostError, client, isNotFound, toError } from './client';
import { CONTAINER } from './pod-spec';

/** Container waiting reasons that mean the image cannot be pulled. */
const PULL_FAILURES = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);
/** The last events of a pod quoted in an error. */
const EVENT_LINES = 8;

/**
 * Watches the pod until its container is ready. A pod that cannot become ready says why: an image that cannot be
 * pulled, a request no node can ever hold (the task's fault), eviction or deletion (the cluster's).
 */
export async function waitUntilReady(
  cluster: Cluster,
  ref: PodRef,
  options: {
    ownImage: boolean;
    timeoutMs: number;
    signal?: AbortSignal;
    resources: StartRequest['resources'];
    gpus: number;
  }
): Promise<void> {
  const deadline = AbortSignal.timeout(options.timeoutMs);
  const signal = options.signal ? AbortSignal.any([options.signal, deadline]) : deadline;
  let last: V1Pod | undefined;
  let checkedNodes = false;
  for (;;) {
    signal.throwIfAborted();
    const pod = await nextPodState(cluster, ref, signal).catch((err: unknown) => {
      if (deadline.aborted && !options.signal?.aborted) return undefined;
      throw err;
    });
    if (pod === null) throw new PodLostError(`pod ${ref.namespace}/${ref.name} was deleted while starting`);
    if (pod === undefined) {
      throw new Error(
        `pod ${ref.namespace}/${ref.name} not ready within ${options.timeoutMs / 1000} s` +
          `${last ? ` (${podSummary(last)})` : ''}${await eventsText(cluster, ref)}`
      );
    }
    last = pod;
    const state = podState(pod);
    if (state.kind === 'ready') return;
    if (state.kind === 'pending') continue;
    if (state.kind === 'unschedulable') {
      if (checkedNodes) continue;
      checkedNodes = true;
      const tooBig = await largerThanEveryNode(cluster, options.resources, options.gpus);
      if (!tooBig) continue; // a busy cluster: wait for room
      throw new TaskEnvironmentError(
        'EnvironmentStartError',
        `pod ${ref.namespace}/${ref.name} cannot be scheduled: ${tooBig}${await eventsText(cluster, ref)}`
      );
    }
    const message = `pod ${ref.namespace}/${ref.name}: ${state.message}${await eventsText(cluster, ref)}`;
    if (state.kind === 'pull-failed' && !options.ownImage) {
      throw new TaskEnvironmentError('EnvironmentStartError', `image cannot be pulled: ${message}`);
    }
    if (state.kind === 'exited') throw new TaskEnvironmentError('EnvironmentStartError', message);
    throw new PodLostError(message);
  }
}

/** The pod's next state from a watch (or a read, when it already has news); null once it is deleted. */
export async function nextPodState(cluster: Cluster, ref: PodRef, signal: AbortSignal): Promise<V1Pod | null> {
  return new Promise<V1Pod | null>((resolve, reject) => {
    let controller: AbortController | undefined;
    let settled = false;
    const settle = (outcome: V1Pod | null | Error) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      controller?.abort();
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = () => settle(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    const path = `/api/v1/namespaces/${ref.namespace}/pods`;
    const query = { fieldSelector: `metadata.name=${ref.name}` };
    let seen = 0;
    new (client().Watch)(cluster.config)
      .watch(
        path,
        query,
        (phase, pod: V1Pod) => {
          seen += 1;
          if (phase === 'DELETED') settle(null);
          // The first event is the pod as it is now: a state worth reporting only if it is not still pending.
          else if (seen > 1 || podState(pod).kind !== 'pending') settle(pod);
        },
        (err: unknown) => {
          if (settled) return;
          // The server ended the watch (its timeout): read once, and let the caller watch again.
          cluster.core.readNamespacedPod({ name: ref.name, namespace: ref.namespace }).then(
            (pod) => settle(pod),
            (readErr: unknown) => settle(isNotFound(readErr) ? null : toError(err ?? readErr))
          );
        }
      )
      .then(
        (started) => {
          controller = started;
          if (settled) started.abort();
        },
        (err: unknown) => settle(toError(err))
      );
  });
}

/** Why no node could ever hold the requests (cpu, memory, GPUs), or null; null too when nodes cannot be listed. */
export async function largerThanEveryNode(
  cluster: Cluster,
  resources: StartRequest['resources'],
  gpus: number
): Promise<string | null> {
  const nodes = await cluster.core.listNode().catch(() => null);
  if (!nodes?.items.length) return null;
  const fits = nodes.items.some((node) => {
    const allocatable = node.status?.allocatable ?? {};
    return (
      apiQuantity(allocatable.cpu ?? '0') >= resources.cpus &&
      apiQuantity(allocatable.memory ?? '0') >= resources.memoryBytes &&
      Number(allocatable['nvidia.com/gpu'] ?? 0) >= gpus
    );
  });
  if (fits) return null;
  const requested = `cpu ${resources.cpus}, memory ${resources.memoryBytes} bytes, nvidia.com/gpu ${gpus}`;
  return `it requests ${requested}, more than any of the cluster's ${nodes.items.length} node(s) can allocate`;
}

/** The pod's last events, as lines to append to an error (empty when there are none or they cannot be read). */
export async function eventsText(cluster: Cluster, ref: PodRef): Promise<string> {
  const events = await cluster.core
    .listNamespacedEvent({
      namespace: ref.namespace,
      fieldSelector: `involvedObject.kind=Pod,involvedObject.name=${ref.name}`,
    })
    .catch(() => null);
  const lines = (events?.items ?? [])
    .slice(-EVENT_LINES)
    .map((event) => `${event.type ?? ''} ${event.reason ?? ''}: ${event.message ?? ''}`.trim());
  return lines.length ? `\nevents:\n${lines.join('\n')}` : '';
}

export type PodState =
  | { kind: 'ready' }
  | { kind: 'pending' }
  | { kind: 'unschedulable' }
  | { kind: 'pull-failed' | 'exited' | 'lost'; message: string };

/** What the pod's status says about it, for a trial: up, on its way, or why it never will be. */
export function podState(pod: V1Pod): PodState {
  const status = pod.status ?? {};
  const container = status.containerStatuses?.find((c) => c.name === CONTAINER);
  if (status.phase === 'Failed' || status.phase === 'Succeeded') {
    const reason = status.reason ?? '';
    if (reason === 'Evicted' || reason === 'DeadlineExceeded' || reason === 'NodeLost' || reason === 'Preempting') {
      return { kind: 'lost', message: `${reason}: ${status.message ?? ''}`.trim() };
    }
    const terminated = container?.state?.terminated;
    return {
      kind: 'exited',
      message: `the container ended (exit ${terminated?.exitCode ?? '?'}${terminated?.reason ? `, ${terminated.reason}` : ''})`,
    };
  }
  if (pod.metadata?.deletionTimestamp) return { kind: 'lost', message: 'the pod is being deleted' };
  const waiting = container?.state?.waiting;
  if (waiting?.reason && PULL_FAILURES.has(waiting.reason)) {
    return { kind: 'pull-failed', message: `${waiting.reason}: ${waiting.message ?? ''}`.trim() };
  }
  if (waiting?.reason === 'CreateContainerConfigError' || waiting?.reason === 'CreateContainerError') {
    return { kind: 'lost', message: `${waiting.reason}: ${waiting.message ?? ''}`.trim() };
  }
  if (container?.state?.terminated) {
    const { exitCode, reason } = container.state.terminated;
    return { kind: 'exited', message: `the container ended (exit ${exitCode}${reason ? `, ${reason}` : ''})` };
  }
  const scheduled = status.conditions?.find((c) => c.type === 'PodScheduled');
  if (scheduled?.status === 'False' && scheduled.reason === 'Unschedulable') return { kind: 'unschedulable' };
  if (status.phase === 'Running' && container?.ready) return { kind: 'ready' };
  return { kind: 'pending' };
}

function podSummary(pod: V1Pod): string {
  const status = pod.status ?? {};
  const scheduled = status.conditions?.find((c) => c.type === 'PodScheduled');
  const waiting = status.containerStatuses?.[0]?.state?.waiting;
  return [
    status.phase ?? 'no phase',
    scheduled?.status === 'False' ? `not scheduled: ${scheduled.message ?? scheduled.reason ?? ''}` : '',
    waiting?.reason ? `waiting: ${waiting.reason}` : '',
  ]
    .filter(Boolean)
    .join(', ');
}
