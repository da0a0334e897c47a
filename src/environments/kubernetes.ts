/**
 * Trials as Pods of a Kubernetes cluster, through @kubernetes/client-node: the cluster is the one `kubectl` finds
 * (KUBECONFIG, ~/.kube/config or the in-cluster service account), the namespace and the rest are job.yaml's keys.
 * Pods are reached through the cluster's API from any worker, so their handles are not bound to a host.
 */
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { PassThrough } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';

import type * as KubernetesClient from '@kubernetes/client-node';
import type { CoreV1Api, Exec, KubeConfig, V1Pod, V1Status } from '@kubernetes/client-node';
import tarFs from 'tar-fs';
import tarStream from 'tar-stream';

import type { KubernetesSettings } from '../job/schema';
import { apiQuantity } from '../quantity';
import type { EnvironmentHandle } from '../trial/types';
import { shellQuote } from '../agents/builtin';
import { runCommand } from './cli-command';
import { DockerEnvironment, KEEP_ALIVE, OutputTail, envList, firstLine, isFile } from './docker';
import { imageTag } from './docker';
import type {
  BuildRequest,
  BuildResult,
  Environment,
  EnvironmentOwner,
  ExecRequest,
  ExecResult,
  HeldEnvironment,
  StartFile,
  StartRequest,
  StartResult,
} from './environment';
import { LABEL_DEPLOYMENT, LABEL_JOB, LABEL_ROLE, LABEL_TRIAL, TaskEnvironmentError } from './environment';
import type { CollectBudget } from './host-files';
import { extractArchive } from './host-files';

/** The one container of a trial's pod. */
const CONTAINER = 'trial';
/** Pod creations per second, per worker process: a cluster's API server is shared by everyone. */
const DEFAULT_PODS_PER_SECOND = 5;
/** Room in the pod's activeDeadlineSeconds over the trial's own budget (start, collect, stop, retries). */
const DEADLINE_SLACK_SEC = 600;
/** How long start waits for a pod to be up when the request sets no limit. */
const DEFAULT_START_TIMEOUT_MS = 10 * 60_000;
/** Kubernetes label values: at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends. */
const LABEL_VALUE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$/;
/** Container waiting reasons that mean the image cannot be pulled. */
const PULL_FAILURES = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull']);
/** The last events of a pod quoted in an error. */
const EVENT_LINES = 8;
/** The environment variable that names the address at which pods reach this worker's model gateway. */
export const GATEWAY_HOST_VARIABLE = 'ROLLOUT_KUBERNETES_GATEWAY_HOST';

/** One kubeconfig context: its API clients. */
interface Cluster {
  config: KubeConfig;
  core: CoreV1Api;
  exec: Exec;
}

/** Where a handle's pod is: `<namespace>/<pod>` or `<namespace>/<pod>@<context>` as its id. */
interface PodRef {
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

export class KubernetesEnvironment implements Environment {
  readonly type = 'kubernetes';
  readonly hostBound = false;
  private readonly owner: EnvironmentOwner;
  private readonly clusters = new Map<string, Cluster>();
  /** Namespaces (per context) this process started pods in: where the janitor looks when it may not list all. */
  private readonly namespaces = new Map<string, Set<string>>();
  /** Images are built on this worker's Docker engine, then pushed to the job's registry. */
  private readonly docker: DockerEnvironment;
  private readonly creations: RateLimiter;
  private readonly shells = new Map<string, string>();

  constructor(options: EnvironmentOwner & { kubeConfig?: () => KubeConfig; podsPerSecond?: number }) {
    this.owner = { hostId: options.hostId, deployment: options.deployment };
    this.docker = new DockerEnvironment(this.owner);
    this.loadConfig = options.kubeConfig ?? defaultKubeConfig;
    this.creations = new RateLimiter(
      options.podsPerSecond ?? (Number(process.env.ROLLOUT_KUBERNETES_PODS_PER_SEC) || DEFAULT_PODS_PER_SECOND)
    );
  }

  private readonly loadConfig: () => KubeConfig;

  /** The API clients of a kubeconfig context (its current one when none is named). */
  private cluster(context?: string): Cluster {
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
      cluster = { config, core: config.makeApiClient(client().CoreV1Api), exec: new (client().Exec)(config) };
      this.clusters.set(key, cluster);
    }
    return cluster;
  }

  async ping(): Promise<void> {
    const cluster = this.cluster();
    try {
      await cluster.core.getAPIResources();
    } catch (err) {
      const server = cluster.config.getCurrentCluster()?.server ?? '?';
      throw new Error(`Kubernetes API unreachable at ${server}: ${apiMessage(err)}`, { cause: err });
    }
  }

  /**
   * A task's docker_image is used as is (the cluster pulls it). Otherwise the environment is built here as for
   * docker and pushed under its content hash to the job's image_registry, unless the registry has that tag already.
   * The registry's images are shared by every job and never deleted by Rollout, so none is `built` for release.
   */
  async build(request: BuildRequest): Promise<BuildResult> {
    const hasDockerfile = await isFile(path.join(request.contextDir, 'Dockerfile'));
    if (request.dockerImage && !hasDockerfile) return { image: request.dockerImage, built: false };
    const registry = request.kubernetes?.image_registry;
    if (!registry) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        'the kubernetes environment needs environment.image_registry in job.yaml to push a built image to'
      );
    }
    const remote = `${registry}/${imageTag(request.envKey)}`;
    if (!request.force && (await this.registryHas(remote, request))) return { image: remote, built: false };
    const local = await this.docker.build(request);
    try {
      await this.dockerCli(['tag', local.image, remote], request);
      await this.dockerCli(['push', remote], request);
    } finally {
      if (local.built) await this.docker.removeImage(local.image);
    }
    return { image: remote, built: false };
  }

  /** Whether the registry holds the tag (asked through the docker CLI, with the worker's registry credentials). */
  private async registryHas(image: string, request: BuildRequest): Promise<boolean> {
    const exitCode = await runCommand('docker', ['manifest', 'inspect', '--insecure', image], {
      signal: request.signal ?? AbortSignal.timeout(request.timeoutMs),
      env: {},
      onOutput: () => undefined,
    });
    return exitCode === 0;
  }

  private async dockerCli(args: string[], request: BuildRequest): Promise<void> {
    const output = new OutputTail();
    const exitCode = await runCommand('docker', args, {
      signal: request.signal ?? AbortSignal.timeout(request.timeoutMs),
      env: {},
      onOutput: (text) => {
        output.write(text);
        for (const line of text.split('\n')) if (line.trim()) request.onOutput?.(line);
      },
    });
    request.signal?.throwIfAborted();
    // The registry refused or could not be reached: not the task's fault, so retried (and the trial restarted).
    if (exitCode !== 0) throw new Error(`docker ${args[0]} ${args.at(-1)} failed: ${output.text().trim()}`);
  }

  async start(request: StartRequest): Promise<StartResult> {
    const settings = requireSettings(request.kubernetes);
    if (request.network === 'none') {
      // A pod's network cannot be cut from here (that takes a NetworkPolicy the cluster may not enforce).
      throw new TaskEnvironmentError('EnvironmentStartError', 'network_mode no-network is not enforced on kubernetes');
    }
    const cluster = this.cluster(settings.context);
    // What an earlier, crashed attempt left: all of the trial's pods, or only its separate verifier's.
    await this.removeTrial(request.trialId, settings, request.role);
    const name = podName(request.trialName, request.trialId, request.role);
    const ref: PodRef = { namespace: settings.namespace, name, context: settings.context };
    this.remember(ref);
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
    await this.waitUntilReady(cluster, ref, {
      ownImage: own,
      timeoutMs: request.timeoutMs ?? DEFAULT_START_TIMEOUT_MS,
      signal: request.signal,
      resources: request.resources,
      gpus: request.gpus ?? 0,
    });
    const id = handleId(ref);
    // The image's WORKDIR, where an exec starts when the task names none (the pod spec keeps the image's).
    const workdir = request.workdir ?? (await this.exec({ id, workdir: '' }, { command: 'pwd' })).stdout.trim();
    const handle = { id, workdir: workdir || '/' };
    if (request.files?.length) await this.extractAtRoot(handle, packedFiles(request.files));
    const command = [
      'mkdir -p /logs/agent /logs/verifier && chmod 777 /logs/agent /logs/verifier',
      ...(request.setup ? [request.setup] : []),
    ].join(' && ');
    const made = await this.exec(handle, { command });
    if (made.exitCode !== 0) {
      throw new TaskEnvironmentError('EnvironmentStartError', `${command} failed in the pod: ${made.stderr}`);
    }
    // Kubernetes has no per-pod process limit (a kubelet setting): pids_limit is not enforced. Its exec cannot switch
    // users, so task.toml's [agent]/[verifier] user is not either.
    return { handle, unenforced: ['pids', ...(request.users?.length ? ['user'] : [])] };
  }

  private remember(ref: PodRef): void {
    const key = ref.context ?? '';
    const known = this.namespaces.get(key) ?? new Set<string>();
    known.add(ref.namespace);
    this.namespaces.set(key, known);
  }

  /**
   * Watches the pod until its container is ready. A pod that cannot become ready says why: an image that cannot be
   * pulled, a request no node can ever hold (the task's fault), eviction or deletion (the cluster's).
   */
  private async waitUntilReady(
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
      const pod = await this.nextPodState(cluster, ref, signal).catch((err: unknown) => {
        if (deadline.aborted && !options.signal?.aborted) return undefined;
        throw err;
      });
      if (pod === null) throw new PodLostError(`pod ${ref.namespace}/${ref.name} was deleted while starting`);
      if (pod === undefined) {
        throw new Error(
          `pod ${ref.namespace}/${ref.name} not ready within ${options.timeoutMs / 1000} s` +
            `${last ? ` (${podSummary(last)})` : ''}${await this.eventsText(cluster, ref)}`
        );
      }
      last = pod;
      const state = podState(pod);
      if (state.kind === 'ready') return;
      if (state.kind === 'pending') continue;
      if (state.kind === 'unschedulable') {
        if (checkedNodes) continue;
        checkedNodes = true;
        const tooBig = await this.largerThanEveryNode(cluster, options.resources, options.gpus);
        if (!tooBig) continue; // a busy cluster: wait for room
        throw new TaskEnvironmentError(
          'EnvironmentStartError',
          `pod ${ref.namespace}/${ref.name} cannot be scheduled: ${tooBig}${await this.eventsText(cluster, ref)}`
        );
      }
      const message = `pod ${ref.namespace}/${ref.name}: ${state.message}${await this.eventsText(cluster, ref)}`;
      if (state.kind === 'pull-failed' && !options.ownImage) {
        throw new TaskEnvironmentError('EnvironmentStartError', `image cannot be pulled: ${message}`);
      }
      if (state.kind === 'exited') throw new TaskEnvironmentError('EnvironmentStartError', message);
      throw new PodLostError(message);
    }
  }

  /** The pod's next state from a watch (or a read, when it already has news); null once it is deleted. */
  private async nextPodState(cluster: Cluster, ref: PodRef, signal: AbortSignal): Promise<V1Pod | null> {
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
  private async largerThanEveryNode(
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
  private async eventsText(cluster: Cluster, ref: PodRef): Promise<string> {
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

  /**
   * Runs the command through the API's websocket exec; its exit code comes from the status channel. Kubernetes exec
   * has no user, working directory or environment of its own: the command runs as the container's user, in `cwd`
   * (else the handle's), with `env` set by `env`.
   */
  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const shell = await this.shellOf(handle);
    const cwd = request.cwd ?? handle.workdir;
    const script = cwd ? `cd ${shellQuote(cwd)} || exit 1\n${request.command}` : request.command;
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    const command = ['env', ...envList(request.env ?? {}), shell, '-c', script];
    // Kubernetes exec has no user: another user's command goes through su (the container runs as root).
    const asUser =
      request.user && request.user !== '0' && request.user !== 'root'
        ? ['su', '-s', '/bin/sh', '-c', `exec ${command.map(shellQuote).join(' ')}`, request.user]
        : command;
    const run = await this.run(handle, asUser, {
      stdout,
      stderr,
      timeoutMs: request.timeoutMs,
      signal: request.signal,
    });
    if (run.outcome === 'ended')
      return { exitCode: run.exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    await this.killAll(handle);
    if (run.outcome === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  /** bash when the image has it (checked once per pod), else sh. */
  private async shellOf(handle: EnvironmentHandle): Promise<string> {
    let shell = this.shells.get(handle.id);
    if (!shell) {
      const probe = await this.run(handle, ['/bin/sh', '-c', 'test -x /bin/bash']);
      shell = probe.exitCode === 0 ? '/bin/bash' : '/bin/sh';
      this.shells.set(handle.id, shell);
    }
    return shell;
  }

  /** Kills every process in the container but PID 1: all that the agent started, daemons included. */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    await this.run(handle, ['/bin/sh', '-c', `${this.killAllCommand}; true`]);
  }

  readonly killAllCommand = 'kill -9 -1 2>/dev/null';

  /**
   * One exec over the API's websocket: output into the given streams, stdin from `stdin`, the exit code from the
   * status channel. A connection that ends without a status means the pod went away (or broke): which one is asked.
   */
  private async run(
    handle: EnvironmentHandle,
    command: string[],
    options: {
      stdout?: NodeJS.WritableStream;
      stderr?: NodeJS.WritableStream;
      stdin?: Readable;
      timeoutMs?: number;
      signal?: AbortSignal;
    } = {}
  ): Promise<{ outcome: 'ended' | 'timedOut' | 'aborted'; exitCode: number | null }> {
    const ref = parseHandleId(handle.id);
    const cluster = this.cluster(ref.context);
    let status: V1Status | undefined;
    const stdout = options.stdout ?? new OutputTail();
    const stderr = options.stderr ?? new OutputTail();
    let socket: Awaited<ReturnType<Exec['exec']>>;
    try {
      socket = await cluster.exec.exec(
        ref.namespace,
        ref.name,
        CONTAINER,
        command,
        stdout as never,
        stderr as never,
        options.stdin ?? null,
        false,
        (received) => (status = received)
      );
    } catch (err) {
      throw await this.execFailure(cluster, ref, err);
    }
    const outcome = await new Promise<'ended' | 'timedOut' | 'aborted'>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = (result: 'ended' | 'timedOut' | 'aborted') => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        resolve(result);
      };
      const onAbort = () => settle('aborted');
      if (options.timeoutMs) timer = setTimeout(() => settle('timedOut'), options.timeoutMs);
      if (options.signal?.aborted) onAbort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      socket.on('close', () => settle('ended'));
    });
    if (outcome !== 'ended') {
      socket.close();
      return { outcome, exitCode: null };
    }
    if (!status) throw await this.execFailure(cluster, ref, new Error('the exec ended without a status'));
    const finished: V1Status = status;
    // Killed by a signal, or not started at all: perhaps with its pod (deleted, evicted, past its deadline), which is
    // no outcome of the command.
    const signalled = finished.reason === 'NonZeroExitCode' && Number(finished.details?.causes?.[0]?.message) >= 128;
    if (signalled || (finished.status !== 'Success' && finished.reason !== 'NonZeroExitCode')) {
      await this.assertPodUp(cluster, ref);
    }
    return { outcome, exitCode: exitCodeOf(finished) };
  }

  /** Throws PodLostError when the pod has been deleted, evicted or stopped by the cluster. */
  private async assertPodUp(cluster: Cluster, ref: PodRef): Promise<void> {
    const lost = await this.execFailure(cluster, ref, undefined);
    if (lost instanceof PodLostError) throw lost;
  }

  /** Why an exec failed: a pod that is gone or evicted (the cluster's doing), one whose container ended, or `err`. */
  private async execFailure(cluster: Cluster, ref: PodRef, err: unknown): Promise<Error> {
    const pod = await cluster.core.readNamespacedPod({ name: ref.name, namespace: ref.namespace }).catch((e) => {
      if (isNotFound(e)) return null;
      return undefined; // the API itself failed: report the exec's own error
    });
    if (pod === null) return new PodLostError(`pod ${ref.namespace}/${ref.name} is gone (deleted)`);
    if (pod) {
      const state = podState(pod);
      if (state.kind === 'lost') return new PodLostError(`pod ${ref.namespace}/${ref.name}: ${state.message}`);
      if (state.kind === 'exited') {
        return new TaskEnvironmentError('EnvironmentBrokenError', `pod ${ref.namespace}/${ref.name}: ${state.message}`);
      }
    }
    return new Error(`exec in pod ${ref.namespace}/${ref.name}: ${apiMessage(err)}`, { cause: err });
  }

  /** A folder's contents land inside each containerPath; a single file lands as containerPath/<its name>. */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const isFolder = (await stat(hostPath)).isDirectory();
    for (const target of typeof containerPath === 'string' ? [containerPath] : containerPath) {
      const archive = isFolder
        ? tarFs.pack(hostPath)
        : tarFs.pack(path.dirname(hostPath), { entries: [path.basename(hostPath)] });
      await this.extractAt(handle, archive as unknown as Readable, target);
    }
  }

  private extractAtRoot(handle: EnvironmentHandle, archive: Readable): Promise<void> {
    return this.extractAt(handle, archive, '/');
  }

  /** Extracts a tar, sent over the exec's stdin, into `dir` (made first). */
  private async extractAt(handle: EnvironmentHandle, archive: Readable, dir: string): Promise<void> {
    const stderr = new OutputTail();
    const run = await this.run(
      handle,
      ['/bin/sh', '-c', `mkdir -p ${shellQuote(dir)} && tar -xmf - -C ${shellQuote(dir)}`],
      { stdin: archive, stderr }
    );
    if (run.exitCode !== 0) {
      throw new Error(`upload to ${dir} failed in the pod (exit ${run.exitCode}): ${stderr.text().trim()}`);
    }
  }

  /** See extractArchive: the contents of a folder land in hostDir; links and `../` escapes are skipped. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const exists = await this.run(handle, ['/bin/sh', '-c', `test -e ${shellQuote(containerPath)}`]);
    if (exists.exitCode !== 0) return; // nothing there (the agent wrote no logs) is normal
    const archive = new PassThrough();
    const stderr = new OutputTail();
    const command = ['tar', '-cf', '-', '-C', path.posix.dirname(containerPath), path.posix.basename(containerPath)];
    const extracted = extractArchive(archive, hostDir, budget, path.posix.basename(containerPath));
    const run = await this.run(handle, command, { stdout: archive, stderr }).finally(() => archive.end());
    await extracted;
    if (run.exitCode !== 0) {
      throw new Error(`download of ${containerPath} failed in the pod (exit ${run.exitCode}): ${stderr.text().trim()}`);
    }
  }

  /** A pod cannot be stopped and kept: stopping deletes it at once (its PID 1 only sleeps). */
  async stop(handle: EnvironmentHandle): Promise<void> {
    await this.remove(handle);
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    this.shells.delete(handle.id);
    const ref = parseHandleId(handle.id);
    try {
      await this.cluster(ref.context).core.deleteNamespacedPod({
        name: ref.name,
        namespace: ref.namespace,
        gracePeriodSeconds: 0,
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  async removeTrial(trialId: string, settings?: KubernetesSettings, role?: string): Promise<number> {
    const selector = [
      `${LABEL_DEPLOYMENT}=${this.owner.deployment}`,
      `${LABEL_TRIAL}=${labelHash(trialId)}`,
      ...(role ? [`${LABEL_ROLE}=${role}`] : []),
    ].join(',');
    const pods = settings
      ? await this.podsIn(settings.context, [settings.namespace], selector)
      : await this.ownedPods(selector);
    for (const pod of pods) await this.remove({ id: handleId(pod), workdir: '/' });
    return pods.length;
  }

  /** Every pod of this deployment, in any namespace of the current context and of contexts this process used. */
  async heldEnvironments(): Promise<HeldEnvironment[]> {
    const pods = await this.ownedPods(`${LABEL_DEPLOYMENT}=${this.owner.deployment},${LABEL_TRIAL}`);
    return pods.map((pod) => ({ id: handleId(pod), trialId: pod.trialId, workerId: null }));
  }

  /** Pods across all namespaces when the credentials may list them, else in the namespaces this process used. */
  private async ownedPods(selector: string): Promise<(PodRef & { trialId: string })[]> {
    const contexts = new Set(['', ...this.namespaces.keys()]);
    const found: (PodRef & { trialId: string })[] = [];
    for (const key of contexts) {
      const context = key || undefined;
      try {
        const list = await this.cluster(context).core.listPodForAllNamespaces({ labelSelector: selector });
        found.push(...list.items.map((pod) => podRef(pod, context)));
      } catch (err) {
        if (!(err instanceof client().ApiException) || err.code !== 403) throw err;
        found.push(...(await this.podsIn(context, [...(this.namespaces.get(key) ?? [])], selector)));
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
      const list = await this.cluster(context).core.listNamespacedPod({ namespace, labelSelector: selector });
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

let loadedClient: typeof KubernetesClient | undefined;

/**
 * @kubernetes/client-node, loaded when a cluster is first used: it costs ~28 MB of heap and start-up time, which
 * every other command and docker-only worker would otherwise pay.
 */
function client(): typeof KubernetesClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- a synchronous, deferred load (see above)
  return (loadedClient ??= require('@kubernetes/client-node') as typeof KubernetesClient);
}

function defaultKubeConfig(): KubeConfig {
  const config = new (client().KubeConfig)();
  config.loadFromDefault();
  return config;
}

function requireSettings(settings: KubernetesSettings | undefined): KubernetesSettings {
  if (!settings) throw new Error('a kubernetes trial without its job.yaml environment keys (namespace)');
  return settings;
}

/** The pod of a trial: the image's entrypoint kept, our keep-alive as its command, the task's resources. */
function podManifest(request: StartRequest, settings: KubernetesSettings, name: string, deployment: string): V1Pod {
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
      automountServiceAccountToken: settings.service_account !== undefined,
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
          readinessProbe: { exec: { command: ['/bin/sh', '-c', 'true'] }, periodSeconds: 2 },
        },
      ],
    },
  };
}

type PodState =
  | { kind: 'ready' }
  | { kind: 'pending' }
  | { kind: 'unschedulable' }
  | { kind: 'pull-failed' | 'exited' | 'lost'; message: string };

/** What the pod's status says about it, for a trial: up, on its way, or why it never will be. */
function podState(pod: V1Pod): PodState {
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

/** The exit code in an exec's status: 0 on Success, the ExitCode cause on NonZeroExitCode. */
function exitCodeOf(status: V1Status): number | null {
  if (status.status === 'Success') return 0;
  if (status.reason === 'NonZeroExitCode') {
    const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
    return cause?.message !== undefined ? Number(cause.message) : null;
  }
  // The runtime could not start the command: the container's own files are broken (an agent deleted /bin).
  throw new TaskEnvironmentError(
    'EnvironmentBrokenError',
    `the pod can no longer start a process: ${status.message ?? status.reason ?? 'unknown failure'}`
  );
}

/** `rollout-<trial name>[-<role>]-<hash of the trial id>`, as a DNS-1123 name of at most 63 characters. */
function podName(trialName: string, trialId: string, role?: string): string {
  const digest = createHash('sha256').update(trialId).digest('hex').slice(0, 8);
  const readable = trialName
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 45)
    .replace(/-+$/, '');
  return `rollout-${readable ? `${readable}-` : ''}${role ? `${role}-` : ''}${digest}`;
}

function labelHash(value: string): string {
  return createHash('sha256').update(value).digest('hex').slice(0, 20);
}

/** The value itself when Kubernetes accepts it as a label value, else a hash of it. */
function labelValue(value: string): string {
  return LABEL_VALUE.test(value) ? value : `h-${labelHash(value)}`;
}

function handleId(ref: PodRef): string {
  return `${ref.namespace}/${ref.name}${ref.context ? `@${ref.context}` : ''}`;
}

function parseHandleId(id: string): PodRef {
  const at = id.indexOf('@');
  const [namespace, name] = (at < 0 ? id : id.slice(0, at)).split('/');
  if (!namespace || !name) throw new Error(`not a kubernetes environment handle: ${id}`);
  return { namespace, name, ...(at < 0 ? {} : { context: id.slice(at + 1) }) };
}

function podRef(pod: V1Pod, context: string | undefined): PodRef & { trialId: string } {
  return {
    namespace: pod.metadata?.namespace ?? '',
    name: pod.metadata?.name ?? '',
    ...(context ? { context } : {}),
    trialId: pod.metadata?.annotations?.[LABEL_TRIAL] ?? '',
  };
}

function isNotFound(err: unknown): boolean {
  return err instanceof client().ApiException && err.code === 404;
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** The API server's own message (a Status body), else the error's first line. */
function apiMessage(err: unknown): string {
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
class RateLimiter {
  private next = 0;

  constructor(private readonly perSecond: number) {}

  async take(signal?: AbortSignal): Promise<void> {
    const now = Date.now();
    const at = Math.max(now, this.next);
    this.next = at + 1000 / this.perSecond;
    if (at > now) await sleep(at - now, undefined, { signal });
  }
}

/** The files of a start request as a tar to extract at the pod's root (mode 0644). */
function packedFiles(files: StartFile[]): Readable {
  const pack = tarStream.pack();
  void (async () => {
    for (const file of files) {
      const content = 'text' in file ? Buffer.from(file.text) : await readFile(file.hostPath);
      const name = path.posix.normalize(file.containerPath).replace(/^\/+/, '');
      pack.entry({ name, mode: 0o644, size: content.length }, content);
    }
    pack.finalize();
  })().catch((err: Error) => pack.destroy(err));
  return pack as unknown as Readable;
}
