/**
 * The clusters a worker talks to: the one `kubectl` finds (KUBECONFIG, ~/.kube/config or the in-cluster service
 * account), per kubeconfig context, through @kubernetes/client-node loaded on first use.
 */
import { setTimeout as sleep } from 'node:timers/promises';

import type * as KubernetesClient from '@kubernetes/client-node';
import type { CoreV1Api, Exec, KubeConfig, NetworkingV1Api } from '@kubernetes/client-node';

import { firstLine } from '../exec-output';

/** One kubeconfig context: its API clients. */
export interface Cluster {
  config: KubeConfig;
  core: CoreV1Api;
  networking: NetworkingV1Api;
  exec: Exec;
}

/** Where a handle's pod is: `<namespace>/<pod>` or `<namespace>/<pod>@<context>` as its id. */
export interface PodRef {
  namespace: string;
  name: string;
  context?: string;
}

/**
 * An infrastructure failure of a pod (evicted, deleted, its node lost): not the task's fault, so the trial restarts
 * as after a lost host.
 */
export class PodLostError extends Error {
  override name = 'PodLostError';
}

/** The API clients of each kubeconfig context used, and the namespaces this process started pods in. */
export class Clusters {
  private readonly clusters = new Map<string, Cluster>();
  /** Namespaces (per context) this process started pods in: where the janitor looks when it may not list all. */
  readonly namespaces = new Map<string, Set<string>>();

  constructor(private readonly loadConfig: () => KubeConfig = defaultKubeConfig) {}

  /** The API clients of a kubeconfig context (its current one when none is named). */
  get(context?: string): Cluster {
    const key = context ?? '';
    let cluster = this.clusters.get(key);
    if (!cluster) {
      const config = this.loadConfig();
      if (context) {
        if (!config.getContextObject(context)) throw new Error(`kubeconfig: no context "${context}"`);
        config.setCurrentContext(context);
      }
      if (!config.getCurrentCluster()) {
        throw new Error('no Kubernetes cluster configured (set KUBECONFIG, or run inside a cluster)');
      }
      cluster = {
        config,
        core: config.makeApiClient(client().CoreV1Api),
        networking: config.makeApiClient(client().NetworkingV1Api),
        exec: new (client().Exec)(config),
      };
      this.clusters.set(key, cluster);
    }
    return cluster;
  }

  remember(ref: PodRef): void {
    const key = ref.context ?? '';
    const known = this.namespaces.get(key) ?? new Set<string>();
    known.add(ref.namespace);
    this.namespaces.set(key, known);
  }
}

let loadedClient: typeof KubernetesClient | undefined;

/**
 * @kubernetes/client-node, loaded when a cluster is first used: it costs ~28 MB of heap and start-up time, which
 * every other command and docker-only worker would otherwise pay.
 */
export function client(): typeof KubernetesClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous, deferred load (see above)
  return (loadedClient ??= require('@kubernetes/client-node') as typeof KubernetesClient);
}

function defaultKubeConfig(): KubeConfig {
  const config = new (client().KubeConfig)();
  config.loadFromDefault();
  return config;
}

export function isNotFound(err: unknown): boolean {
  return err instanceof client().ApiException && err.code === 404;
}

export function isAlreadyExists(err: unknown): boolean {
  return err instanceof client().ApiException && err.code === 409;
}

export function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** The API server's own message (a Status body), else the error's first line. */
export function apiMessage(err: unknown): string {
  if (err instanceof client().ApiException) {
    const body: unknown = typeof err.body === 'string' ? safeJson(err.body) : err.body;
    const message = (body as { message?: string } | undefined)?.message;
    return `HTTP ${err.code}${message ? `: ${message}` : ''}`;
  }
  return firstLine(err);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { message: text.slice(0, 500) };
  }
}

/** At most `perSecond` takes a second, spaced evenly: pod creations of one worker never burst at the API server. */
export class RateLimiter {
  private next = 0;

  constructor(private readonly perSecond: number) {}

  async take(signal?: AbortSignal): Promise<void> {
    const now = Date.now();
    const at = Math.max(now, this.next);
    this.next = at + 1000 / this.perSecond;
    if (at > now) await sleep(at - now, undefined, { signal });
  }
}
