/**
 * Trials as Pods of a Kubernetes cluster, through @kubernetes/client-node: the cluster is the one `kubectl` finds
 * (KUBECONFIG, ~/.kube/config or the in-cluster service account), the namespace and the rest are job.yaml's keys.
 * Pods are reached through the cluster's API from any worker, so their handles are not bound to a host.
 */
import type { KubeConfig } from '@kubernetes/client-node';

import type { KubernetesSettings } from './settings';
import { KubernetesSettingsSchema } from './settings';
import type { EnvironmentHandle } from '../../contracts/trial';
import type {
  BuildRequest,
  BuildResult,
  Environment,
  EnvironmentOwner,
  ExecRequest,
  ExecResult,
  HeldEnvironment,
  ProviderSettings,
  StartRequest,
  StartResult,
} from '../../contracts/environment';
import { LABEL_DEPLOYMENT, LABEL_TRIAL, TaskEnvironmentError } from '../../contracts/environment';
import { prepareStart } from '../kit/prepare';
import { removeTrialSandboxes } from '../kit/sandbox-listing';
import type { StreamedTransfer } from '../kit/tar-transfer';
import { ImageBuilder, imageTag } from '../image-builder/builder';
import { RegistryImages } from '../image-builder/registry-images';
import { DockerEngine } from '../docker/engine';
import { KILL_ALL } from '../trial-container';
import type { PodRef } from './client';
import { Clusters, RateLimiter, apiMessage, client, ifFound } from './client';
import { PodExec } from './exec';
import { TrialNetworkPolicies } from './network-policy';
import { podFiles } from './files';
import { handleId, labelHash, parseHandleId, podManifest, podName, podRef } from './pod-spec';
import { waitUntilReady } from './pod-watch';
import { FilesThroughTransfer } from '../kit/file-methods';

export { PodLostError } from './client';

/** Pod creations per second, per worker process: a cluster's API server is shared by everyone. */
const DEFAULT_PODS_PER_SECOND = 5;
/** How long start waits for a pod to be up when the request sets no limit. */
const DEFAULT_START_TIMEOUT_MS = 10 * 60_000;
/** The environment variable that names the address at which pods reach this worker's model gateway. */
export const GATEWAY_HOST_VARIABLE = 'ROLLOUT_KUBERNETES_GATEWAY_HOST';

export class KubernetesEnvironment extends FilesThroughTransfer implements Environment {
  readonly type = 'kubernetes';
  readonly hostBound = false;
  readonly stopRemoves = true;
  readonly killAllCommand = KILL_ALL;
  private readonly owner: EnvironmentOwner;
  private readonly clusters: Clusters;
  /** Images are built on this worker's Docker engine, then pushed to the job's registry. */
  private readonly images: RegistryImages;
  private readonly creations: RateLimiter;
  private readonly execs: PodExec;
  private readonly networkPolicies = new TrialNetworkPolicies();
  protected readonly files: StreamedTransfer;

  constructor(options: EnvironmentOwner & { kubeConfig?: () => KubeConfig; podsPerSecond?: number }) {
    super();
    this.owner = { hostId: options.hostId, deployment: options.deployment };
    this.images = new RegistryImages(new ImageBuilder(new DockerEngine(this.owner)), (settings, envKey) => {
      const registry = settings && KubernetesSettingsSchema.parse(settings).image_registry;
      if (registry) return `${registry}/${imageTag(envKey)}`;
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        'the kubernetes environment needs environment.image_registry in job.yaml to push a built image to'
      );
    });
    this.clusters = new Clusters(options.kubeConfig);
    this.execs = new PodExec(this.clusters);
    this.files = podFiles(this.execs);
    this.creations = new RateLimiter(
      options.podsPerSecond ?? (Number(process.env.ROLLOUT_KUBERNETES_PODS_PER_SEC) || DEFAULT_PODS_PER_SECOND)
    );
  }

  async ping(): Promise<void> {
    const cluster = this.clusters.get();
    try {
      await cluster.core.getAPIResources();
    } catch (err) {
      const server = cluster.config.getCurrentCluster()?.server ?? '?';
      throw new Error(`Kubernetes API unreachable at ${server}: ${apiMessage(err)}`, { cause: err });
    }
  }

  build(request: BuildRequest): Promise<BuildResult> {
    return this.images.build(request);
  }

  async start(request: StartRequest): Promise<StartResult> {
    const settings = requireSettings(request.settings);
    if (request.network === 'none') {
      // A pod's network cannot be cut from here (that takes a NetworkPolicy the cluster may not enforce).
      throw new TaskEnvironmentError('EnvironmentStartError', 'network_mode no-network is not enforced on kubernetes');
    }
    const cluster = this.clusters.get(settings.context);
    // What an earlier, crashed attempt left: all of the trial's pods, or only its separate verifier's (none when no
    // creation was ever begun for the trial).
    if (!request.firstCreation) await this.removeTrial(request.trialId, settings, request.role);
    const name = podName(request.trialName, request.trialId, request.role);
    const ref: PodRef = { namespace: settings.namespace, name, context: settings.context };
    this.clusters.remember(ref);
    // Before the pod exists: no moment in which it could be connected to.
    await this.networkPolicies.ensure(cluster, settings.namespace, settings.context);
    await this.creations.take(request.signal);
    try {
      await cluster.core.createNamespacedPod({
        namespace: settings.namespace,
        body: podManifest(request, settings, name, this.owner.deployment),
      });
    } catch (err) {
      throw new Error(`creating pod ${settings.namespace}/${name}: ${apiMessage(err)}`, { cause: err });
    }
    const own = settings.image_registry !== undefined && request.image.startsWith(`${settings.image_registry}/`);
    await waitUntilReady(cluster, ref, {
      ownImage: own,
      timeoutMs: request.timeoutMs ?? DEFAULT_START_TIMEOUT_MS,
      signal: request.signal,
      resources: request.resources,
      gpus: request.gpus ?? 0,
    });
    const id = handleId(ref);
    // The image's WORKDIR, where an exec starts when the task names none (the pod spec keeps the image's).
    const workdir = request.workdir ?? (await this.execs.exec({ id, workdir: '' }, { command: 'pwd' })).stdout.trim();
    const handle = { id, workdir: workdir || '/' };
    // As the container's user: Kubernetes exec has no other (root in the images tasks use).
    await prepareStart(handle, request, {
      where: 'the pod',
      extractAtRoot: (at, archive) => this.files.extractAtRoot(at, archive),
      extractAndRun: (at, archive, script) => this.files.extractAndRun(at, archive, script),
      runAsRoot: async (at, command) => {
        const { exitCode, stderr } = await this.execs.exec(at, { command });
        return { exitCode, output: stderr };
      },
    });
    // Kubernetes has no per-pod process limit (a kubelet setting): pids_limit is not enforced. Its exec cannot switch
    // users, so task.toml's [agent]/[verifier] user is not either.
    return { handle, unenforced: ['pids', ...(request.users?.length ? ['user'] : [])] };
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    return this.execs.exec(handle, request);
  }

  /** Kills every process in the container but PID 1: all that the agent started, daemons included. */
  killAll(handle: EnvironmentHandle): Promise<void> {
    return this.execs.killAll(handle);
  }

  /** A pod cannot be stopped and kept: stopping deletes it at once (its PID 1 only sleeps). */
  async stop(handle: EnvironmentHandle): Promise<void> {
    await this.remove(handle);
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    this.execs.forget(handle.id);
    const ref = parseHandleId(handle.id);
    const { core } = this.clusters.get(ref.context);
    await ifFound(core.deleteNamespacedPod({ name: ref.name, namespace: ref.namespace, gracePeriodSeconds: 0 }));
  }

  removeTrial(trialId: string, given?: ProviderSettings, role?: string): Promise<number> {
    const settings = given && requireSettings(given);
    return removeTrialSandboxes(
      {
        // The trial's label is a hash of its id (a label value holds 63 characters at most).
        list: async (labels) => {
          const selector = Object.entries(labels)
            .map(([label, value]) => `${label}=${label === LABEL_TRIAL ? labelHash(value) : value}`)
            .join(',');
          const pods = settings
            ? await this.podsIn(settings.context, [settings.namespace], selector)
            : await this.ownedPods(selector);
          return pods.map((pod) => ({ id: handleId(pod), labels: null }));
        },
        remove: (id) => this.remove({ id, workdir: '/' }),
      },
      this.owner,
      trialId,
      role
    );
  }

  /** Every pod of this deployment, in any namespace of the current context and of contexts this process used. */
  async heldEnvironments(): Promise<HeldEnvironment[]> {
    const pods = await this.ownedPods(`${LABEL_DEPLOYMENT}=${this.owner.deployment},${LABEL_TRIAL}`);
    return pods.map((pod) => ({ id: handleId(pod), trialId: pod.trialId, workerId: null }));
  }

  /** Pods across all namespaces when the credentials may list them, else in the namespaces this process used. */
  private async ownedPods(selector: string): Promise<(PodRef & { trialId: string })[]> {
    const contexts = new Set(['', ...this.clusters.namespaces.keys()]);
    const found: (PodRef & { trialId: string })[] = [];
    for (const key of contexts) {
      const context = key || undefined;
      try {
        const list = await this.clusters.get(context).core.listPodForAllNamespaces({ labelSelector: selector });
        found.push(...list.items.map((pod) => podRef(pod, context)));
      } catch (err) {
        if (!(err instanceof client().ApiException) || err.code !== 403) throw err;
        found.push(...(await this.podsIn(context, [...(this.clusters.namespaces.get(key) ?? [])], selector)));
      }
    }
    return found;
  }

  private async podsIn(
    context: string | undefined,
    namespaces: string[],
    selector: string
  ): Promise<(PodRef & { trialId: string })[]> {
    const found: (PodRef & { trialId: string })[] = [];
    for (const namespace of namespaces) {
      const list = await this.clusters.get(context).core.listNamespacedPod({ namespace, labelSelector: selector });
      found.push(...list.items.map((pod) => podRef(pod, context)));
    }
    return found;
  }

  /** Registry images are content-keyed and shared by jobs: nothing of a job's to release. */
  removeImage(): Promise<boolean> {
    return Promise.resolve(true);
  }

  /** Pods reach this worker's model gateway only at an address the operator names: there is no common one. */
  gatewayHost(): Promise<string> {
    const host = process.env[GATEWAY_HOST_VARIABLE];
    if (!host) {
      return Promise.reject(
        new Error(`${GATEWAY_HOST_VARIABLE} is not set: the address at which pods reach this worker's model gateway`)
      );
    }
    return Promise.resolve(host);
  }
}

/** The job.yaml keys the trial's spec carries (see ProviderSettings), as this provider reads them. */
function requireSettings(settings: ProviderSettings | undefined): KubernetesSettings {
  if (!settings) throw new Error('a kubernetes trial without its job.yaml environment keys (namespace)');
  return KubernetesSettingsSchema.parse(settings);
}
