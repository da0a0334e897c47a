/** A trial's pod: its manifest, its name and labels, and the handle id that finds it again. */
import { createHash } from 'node:crypto';

import type { V1Pod, V1SecurityContext } from '@kubernetes/client-node';

import type { StartRequest } from '../../contracts/environment';
import { LABEL_DEPLOYMENT, LABEL_JOB, LABEL_ROLE, LABEL_TRIAL } from '../../contracts/environment';
import { DROPPED_CAPABILITIES, KEEP_ALIVE } from '../trial-container';
import type { PodRef } from './client';
import type { KubernetesSettings } from './settings';

/** The one container of a trial's pod. */
export const CONTAINER = 'trial';
/** Room in the pod's activeDeadlineSeconds over the trial's own budget (start, collect, stop, retries). */
const DEADLINE_SLACK_SEC = 600;
/** Kubernetes label values: at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends. */
const LABEL_VALUE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$/;

/**
 * What Docker gives every trial container, on a pod: no NET_RAW or MKNOD, no-new-privileges, the runtime's default
 * seccomp profile. Root stays root (task images expect it); nothing here can be loosened by the task.
 */
export const TRIAL_SECURITY_CONTEXT: V1SecurityContext = {
  allowPrivilegeEscalation: false,
  privileged: false,
  capabilities: { drop: [...DROPPED_CAPABILITIES] },
  seccompProfile: { type: 'RuntimeDefault' },
};

/** The pod of a trial: the image's entrypoint kept, our keep-alive as its command, the task's resources. */
export function podManifest(
  request: StartRequest,
  settings: KubernetesSettings,
  name: string,
  deployment: string
): V1Pod {
  const { resources, gpus } = request;
  const quantities: Record<string, string> = {
    cpu: `${Math.max(1, Math.round(resources.cpus * 1000))}m`,
    memory: `${Math.round(resources.memoryBytes)}`,
    ...(resources.storageBytes > 0 ? { 'ephemeral-storage': `${Math.round(resources.storageBytes)}` } : {}),
    ...(gpus ? { 'nvidia.com/gpu': `${gpus}` } : {}),
  };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: settings.namespace,
      labels: {
        [LABEL_JOB]: labelValue(request.jobName),
        [LABEL_TRIAL]: labelHash(request.trialId),
        [LABEL_DEPLOYMENT]: deployment,
        ...(request.role ? { [LABEL_ROLE]: request.role } : {}),
      },
      // Labels are short and restricted: the full names are annotations.
      annotations: { [LABEL_JOB]: request.jobName, [LABEL_TRIAL]: request.trialId },
    },
    spec: {
      restartPolicy: 'Never',
      // A stuck trial (its worker gone) cannot hold a node for ever.
      activeDeadlineSeconds: Math.ceil((request.budgetSec ?? 0) + DEADLINE_SLACK_SEC),
      terminationGracePeriodSeconds: 0,
      // The agent gets no credential for the API server, whatever account the pod runs as, and no environment
      // variables naming the namespace's services (KUBERNETES_SERVICE_* of the API server itself always comes).
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
      ...(settings.service_account ? { serviceAccountName: settings.service_account } : {}),
      ...(settings.runtime_class ? { runtimeClassName: settings.runtime_class } : {}),
      ...(settings.node_selector ? { nodeSelector: settings.node_selector } : {}),
      ...(settings.pull_secret ? { imagePullSecrets: [{ name: settings.pull_secret }] } : {}),
      ...(settings.tolerations
        ? {
            tolerations: settings.tolerations.map(({ toleration_seconds, ...toleration }) => ({
              ...toleration,
              ...(toleration_seconds !== undefined ? { tolerationSeconds: toleration_seconds } : {}),
            })),
          }
        : {}),
      containers: [
        {
          name: CONTAINER,
          image: request.image,
          // `args` only: the image's ENTRYPOINT runs (tasks start services there) with our keep-alive as its command;
          // an image without one runs the keep-alive itself.
          args: [...KEEP_ALIVE],
          env: Object.entries(request.env).map(([key, value]) => ({ name: key, value })),
          ...(request.workdir ? { workingDir: request.workdir } : {}),
          resources: { requests: quantities, limits: quantities },
          securityContext: TRIAL_SECURITY_CONTEXT,
          readinessProbe: { exec: { command: ['/bin/sh', '-c', 'true'] }, periodSeconds: 2 },
        },
      ],
    },
  };
}

/** `rollout-<trial name>[-<role>]-<hash of the trial id>`, as a DNS-1123 name of at most 63 characters. */
export function podName(trialName: string, trialId: string, role?: string): string {
  const digest = createHash('sha256').update(trialId).digest('hex').slice(0, 8);
  const readable = trialName
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 45)
    .replace(/-+$/, '');
  return `rollout-${readable ? `${readable}-` : ''}${role ? `${role}-` : ''}${digest}`;
}

export function labelHash(value: string): string {
  return createHash('sha256').update(value).digest('hex').slice(0, 20);
}

/** The value itself when Kubernetes accepts it as a label value, else a hash of it. */
function labelValue(value: string): string {
  return LABEL_VALUE.test(value) ? value : `h-${labelHash(value)}`;
}

export function handleId(ref: PodRef): string {
  return `${ref.namespace}/${ref.name}${ref.context ? `@${ref.context}` : ''}`;
}

export function parseHandleId(id: string): PodRef {
  const at = id.indexOf('@');
  const [namespace, name] = (at < 0 ? id : id.slice(0, at)).split('/');
  if (!namespace || !name) throw new Error(`not a kubernetes environment handle: ${id}`);
  return { namespace, name, ...(at < 0 ? {} : { context: id.slice(at + 1) }) };
}

export function podRef(pod: V1Pod, context: string | undefined): PodRef & { trialId: string } {
  return {
    namespace: pod.metadata?.namespace ?? '',
    name: pod.metadata?.name ?? '',
    ...(context ? { context } : {}),
    trialId: pod.metadata?.annotations?.[LABEL_TRIAL] ?? '',
  };
}
