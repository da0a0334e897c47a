/**
 * Where the kubernetes environment's tests run: a real cluster when ROLLOUT_TEST_KUBERNETES=cluster (`npm run
 * test:k8s`: the cluster KUBECONFIG points at, by default the local one of scripts/k8s-cluster.sh), else the stand-in
 * API server (test/environments/kubernetes/kubernetes-stand-in.ts). Both with a real image registry when asked for one: the cluster's
 * ROLLOUT_TEST_KUBERNETES_REGISTRY, else one started here on 127.0.0.1 (which a local cluster's containerd pulls from
 * over plain HTTP).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';

import type { ImageRegistry } from '../../support/image-registry';
import { startImageRegistry } from '../../support/image-registry';
import type { KubernetesStandIn } from './kubernetes-stand-in';
import { startKubernetesStandIn } from './kubernetes-stand-in';

export const ON_CLUSTER = process.env.ROLLOUT_TEST_KUBERNETES === 'cluster';

export interface KubernetesTarget {
  kubeconfig: string;
  namespace: string;
  /** host:port of the image registry (when one was asked for). */
  registry: string;
  /** The stand-in, for the cases only it can produce; undefined on a cluster. */
  standIn?: KubernetesStandIn;
  /** Pods of the namespace, optionally by label selector. */
  pods(labelSelector?: string): Promise<V1Pod[]>;
  deletePod(name: string): Promise<void>;
  close(): Promise<void>;
}

export interface TargetOptions {
  /** Where the stand-in writes its kubeconfig. */
  dir: string;
  /** The stand-in's namespace (a cluster's is ROLLOUT_TEST_KUBERNETES_NAMESPACE, default "default"). */
  namespace: string;
  /** Start (or name) an image registry on this port. */
  registryPort?: number;
}

/** The target, or why there is none (a string, for "not run"). */
export async function startKubernetesTarget(options: TargetOptions): Promise<KubernetesTarget | string> {
  let registry: ImageRegistry | undefined;
  const given = ON_CLUSTER ? process.env.ROLLOUT_TEST_KUBERNETES_REGISTRY : undefined;
  if (options.registryPort !== undefined && !given) {
    const started = await startImageRegistry(options.registryPort);
    if (typeof started === 'string') return started;
    registry = started;
  }
  const stopRegistry = () => registry?.stop() ?? Promise.resolve();
  if (!ON_CLUSTER) {
    const standIn = await startKubernetesStandIn({ dir: options.dir, namespace: options.namespace });
    return {
      kubeconfig: standIn.kubeconfig,
      namespace: options.namespace,
      registry: registry?.address ?? '',
      standIn,
      pods: (labelSelector) => Promise.resolve(standIn.pods(options.namespace).filter(matching(labelSelector))),
      deletePod: (name) => standIn.deletePod(options.namespace, name),
      async close() {
        await standIn.close();
        await stopRegistry();
      },
    };
  }
  const kubeconfig = process.env.KUBECONFIG;
  if (!kubeconfig) {
    await stopRegistry();
    return 'KUBECONFIG is not set';
  }
  const config = new KubeConfig();
  config.loadFromFile(kubeconfig);
  const core = config.makeApiClient(CoreV1Api);
  const namespace = process.env.ROLLOUT_TEST_KUBERNETES_NAMESPACE ?? 'default';
  return {
    kubeconfig,
    namespace,
    registry: given ?? registry?.address ?? '',
    pods: async (labelSelector) =>
      (await core.listNamespacedPod({ namespace, ...(labelSelector ? { labelSelector } : {}) })).items,
    deletePod: async (name) => {
      await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 });
    },
    close: stopRegistry,
  };
}

/** `key=value,…` selectors, as the stand-in's listing does not filter. */
function matching(labelSelector: string | undefined): (pod: V1Pod) => boolean {
  const pairs = (labelSelector ?? '')
    .split(',')
    .filter(Boolean)
    .map((pair) => pair.split('=') as [string, string]);
  return (pod) => pairs.every(([key, value]) => pod.metadata?.labels?.[key] === value);
}
