import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { Writable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { setTimeout as sleep } from 'node:timers/promises';

import Docker from 'dockerode';
import tarFs from 'tar-fs';
import tarStream from 'tar-stream';

import { shellQuote } from '../agents/builtin';
import { hostCacheDir } from '../host-cache';
import { log } from '../log';
import type { PhaseNetwork } from '../task/policy';
import type { EnvironmentHandle } from '../trial/types';
import type {
  BuildRequest,
  BuildResult,
  Environment,
  ExecRequest,
  ExecResult,
  InstallSnapshots,
  ShellStep,
  StartFile,
  StartRequest,
  StartResult,
} from './environment';
import type { EnvironmentOwner, HeldEnvironment } from './environment';
import {
  LABEL_AGENT,
  LABEL_DEPLOYMENT,
  LABEL_ENV_KEY,
  LABEL_HOST,
  LABEL_JOB,
  LABEL_PART_OF,
  LABEL_ROLE,
  LABEL_SNAPSHOT_OF,
  LABEL_TRIAL,
  LABEL_WORKER,
  TaskEnvironmentError,
} from './environment';
import { LineTail, runCommand } from './cli-command';
import { StepShell } from './docker-shell';
import {
  buildSidecars,
  composeInfra,
  composeUp,
  LABEL_COMPOSE_PROJECT,
  serviceFilter,
  projectName,
  taskComposeFile,
} from './docker-compose';
import type { CollectBudget, FolderSelection } from './host-files';
import { extractArchive } from './host-files';
import {
  dockerfileFrontendImage,
  ensureDockerfileFrontend,
  frontendNeed,
  HEREDOC_LINE,
  SYNTAX_LINE,
} from './docker/dockerfile-frontend';

const IMAGE_REPOSITORY = 'rollout-env';
/** On a trial's container: the networks it is on when it may reach the network (see setNetwork). */
const LABEL_PUBLIC_NETWORKS = 'rollout.public-networks';
const SNAPSHOT_REPOSITORY = 'rollout-agent';
/** heldEnvironments' id for a trial's networks and volumes left without containers. */
const ORPHANS_OF = 'orphans-of:';
/** Every process in the container but PID 1 (which only keeps it up) and the shell running this; as root. */
const KILL_ALL = 'kill -9 -1 2>/dev/null';
/** Per stream: an agent printing without end must not exhaust the worker's memory. */
const OUTPUT_LIMIT = 1024 * 1024;
/** Lines of build output kept for the error message of a failed build. */
const BUILD_OUTPUT_LINES = 40;
const PING_TIMEOUT_MS = 10_000;
/** The daemon's refusal of --storage-opt size (overlay2 needs xfs with pquota for it). */
const STORAGE_OPT_UNSUPPORTED = /storage[- ]?opt|quota|backing filesystem/i;

interface BuildInFlight {
  result: Promise<BuildResult>;
  signal?: AbortSignal;
}

/** One line of the JSON stream of a build or a pull. */
interface ProgressEvent {
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
}

/** Trials in containers of the local (or DOCKER_HOST) Docker engine, through its API (dockerode). */
export class DockerEnvironment implements Environment {
  readonly type = 'docker';
  readonly hostBound = true;
  private readonly docker: Docker;
  private readonly owner: EnvironmentOwner;
  /** Builds in flight by image: concurrent trials of one environment wait for one build. */
  private readonly builds = new Map<string, BuildInFlight>();
  /** Shell of each container: bash when its image has it, else sh. */
  private readonly shells = new Map<string, string>();
  /** The shell kept open for a session's steps, per container. */
  private readonly stepShells = new Map<string, StepShell>();
  private hostCpus: number | undefined;
  private storageOptUnsupported = false;
  /** The daemon's version (asked once): whether its own Dockerfile frontend has heredocs. */
  private engineVersion: string | undefined;
  /** Host files are bind-mounted into containers (see placeFiles) until a container did not find them. */
  private bindFiles = true;
  /** Trials this process started on a single container (no compose project): cleanup need not look for networks. */
  private readonly loneContainerTrials = new Set<string>();

  constructor(options: EnvironmentOwner & { docker?: Docker }) {
    this.docker = options.docker ?? new Docker();
    this.owner = { hostId: options.hostId, deployment: options.deployment };
  }

  /** Label filters for what this host and deployment own. */
  private ownedBy(...more: string[]): { label: string[] } {
    return { label: [`${LABEL_HOST}=${this.owner.hostId}`, `${LABEL_DEPLOYMENT}=${this.owner.deployment}`, ...more] };
  }

  async ping(): Promise<void> {
    try {
      await abortable(this.docker.ping() as Promise<unknown>, AbortSignal.timeout(PING_TIMEOUT_MS));
    } catch (err) {
      throw new Error(`Docker daemon unreachable at ${this.daemonAddress()}: ${firstLine(err)}`, { cause: err });
    }
  }

  private daemonAddress(): string {
    // The modem keeps its constructor options as fields; the typings do not declare them.
    const { socketPath, host, port, protocol } = this.docker.modem as unknown as Docker.DockerOptions;
    if (host) return `${protocol ?? 'http'}://${host}${port ? `:${port}` : ''}`;
    return typeof socketPath === 'string' ? socketPath : '/var/run/docker.sock';
  }

  /**
   * The image of Rollout's own is returned as the job's reference tag to it (`rollout-env:<key>-<job ref>`): the job
   * starts its containers from it, and the image stays as long as any job still holds a reference (see removeImage).
   */
  async build(request: BuildRequest): Promise<BuildResult> {
    const resolved = await this.sharedBuild(request);
    if (request.partOf || (!resolved.built && !request.referenced)) return { image: resolved.image, built: false };
    // A present docker_image with parts: referenced under the environment's own tag, so removeImage finds its parts.
    const reference = `${resolved.built ? resolved.image : imageTag(request.envKey)}-${this.jobRef(request.jobName)}`;
    const [repo, tag] = splitTag(reference);
    await this.docker.getImage(resolved.image).tag({ repo, tag });
    return { image: reference, built: true };
  }

  /**
   * `rollout build`: the environment's image, built (or pulled) ahead of any job under the builder's name, so no job
   * owns it and `delete: true` never removes it (a job only releases its own reference). `fresh`: it was not here.
   */
  async prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    const hasDockerfile = await isFile(path.join(request.contextDir, 'Dockerfile'));
    const tag = request.dockerImage && !hasDockerfile ? request.dockerImage : imageTag(request.envKey);
    const existed = (await this.imageLabels(tag)) !== undefined;
    const { image } = await this.sharedBuild(request);
    return { image, fresh: !existed || request.force };
  }

  /** Who holds a reference: a job of this deployment (job names are unique per deployment only). */
  private jobRef(jobName: string, deployment = this.owner.deployment): string {
    return createHash('sha256').update(`${deployment}\n${jobName}`).digest('hex').slice(0, 12);
  }

  /** One build per image at a time: concurrent trials of one environment wait for the same build. */
  private async sharedBuild(request: BuildRequest): Promise<BuildResult> {
    const hasDockerfile = await isFile(path.join(request.contextDir, 'Dockerfile'));
    const key = request.dockerImage && !hasDockerfile ? request.dockerImage : imageTag(request.envKey);
    for (;;) {
      const inFlight = this.builds.get(key);
      if (!inFlight) {
        const result = this.resolveImage(request, hasDockerfile)
          .then(async (resolved) => {
            await this.buildSidecars(request);
            return resolved;
          })
          .finally(() => this.builds.delete(key));
        this.builds.set(key, { result, signal: request.signal });
        return result;
      }
      try {
        return await abortable(inFlight.result, request.signal);
      } catch (err) {
        // Another trial's build was cancelled: that says nothing about this one, which builds itself.
        if (inFlight.signal?.aborted && !request.signal?.aborted) continue;
        throw err;
      }
    }
  }

  private async resolveImage(request: BuildRequest, hasDockerfile: boolean): Promise<BuildResult> {
    const { dockerImage } = request;
    if (dockerImage && (!request.force || !hasDockerfile) && (await this.imageLabels(dockerImage))) {
      return { image: dockerImage, built: false };
    }
    if (dockerImage && !hasDockerfile) {
      await this.pull(dockerImage, request);
      return { image: dockerImage, built: false };
    }
    if (!hasDockerfile) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `${path.join(request.contextDir, 'Dockerfile')}: missing, and the task sets no environment.docker_image`
      );
    }
    const tag = imageTag(request.envKey);
    const labels = await this.imageLabels(tag);
    // force_build rebuilds once per job, not once per trial: an image this job built is fresh enough.
    if (labels && (!request.force || labels[LABEL_JOB] === request.jobName)) return { image: tag, built: true };
    await this.buildImage(request, tag);
    return { image: tag, built: true };
  }

  /**
   * BuildKit, through the docker buildx CLI: real task Dockerfiles use `COPY --chmod` and `RUN --mount=type=cache`,
   * which the engine API's classic builder rejects, and dockerode speaks no BuildKit session.
   */
  private async buildImage(request: BuildRequest, tag: string): Promise<void> {
    const { signal, timeout } = stepSignal(request);
    const output = new LineTail(BUILD_OUTPUT_LINES, request.onOutput);
    const labels = this.imageLabelsOf(request);
    const args = ['buildx', 'build', '--load', '--progress=plain', '--tag', tag];
    for (const [key, value] of Object.entries(labels)) args.push('--label', `${key}=${value}`);
    const frontend = await this.dockerfileFrontend(request);
    // It replaces the engine's own frontend, and a Dockerfile's `# syntax=` line (which would need a registry).
    if (frontend) args.push('--build-arg', `BUILDKIT_SYNTAX=${frontend}`);
    // buildx syncs a context into a folder BuildKit keys by the context folder's *name*, and skips files whose size
    // and mtime match what is there (docker/buildx#3232): after one task's `environment/` (or `tests/`), another's
    // same-named file of the same size and mtime (tasks unpacked from one archive) would be built from the first
    // one's copy. A link named after the content key gives each content a sync folder of its own.
    const links = await mkdtemp(path.join(tmpdir(), 'rollout-context-'));
    const context = path.join(links, `rollout-${request.envKey}`);
    let exitCode: number;
    try {
      await symlink(path.resolve(request.contextDir), context);
      exitCode = await runCommand('docker', [...args, context], {
        signal,
        env: { DOCKER_HOST: this.dockerHost() },
        onOutput: (text) => output.add(text),
      });
    } finally {
      await rm(links, { recursive: true, force: true });
    }
    request.signal?.throwIfAborted();
    if (timeout.aborted) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `build exceeded ${request.timeoutMs / 1000} s\n${output.text()}`.trim()
      );
    }
    if (exitCode === 0) return;
    if (/'buildx' is not a docker command|unknown command: docker buildx/.test(output.text())) {
      throw new Error('docker buildx is not installed on this worker (scripts/setup.sh installs it)');
    }
    const needsFrontend = frontend ? null : await missingFrontendProblem(request.contextDir, output.text());
    if (needsFrontend) throw new TaskEnvironmentError('EnvironmentBuildError', needsFrontend);
    throw new TaskEnvironmentError('EnvironmentBuildError', output.text() || `docker buildx build exited ${exitCode}`);
  }

  /**
   * Rollout's Dockerfile frontend image when this Docker host has it, else null; when the Dockerfile needs it (a
   * heredoc on Docker 20.10, a `# syntax=` line), it is built first (once per host, with a progress line).
   */
  private async dockerfileFrontend(request: BuildRequest): Promise<string | null> {
    const image = dockerfileFrontendImage();
    if (!image || (await this.imageLabels(image))) return image;
    const dockerfile = await readFile(path.join(request.contextDir, 'Dockerfile'), 'utf8');
    this.engineVersion ??= (await this.docker.version()).Version;
    const need = frontendNeed(dockerfile, this.engineVersion);
    if (!need) return null;
    const progress = (line: string) => {
      log.info(`${this.owner.hostId}: ${line}`);
      request.onOutput?.(line);
    };
    progress(`${path.join(request.contextDir, 'Dockerfile')} ${need} needs the Dockerfile frontend ${image}`);
    await ensureDockerfileFrontend({ docker: this.docker, dockerHost: this.dockerHost() }, image, progress);
    return image;
  }

  /**
   * The images of a docker-compose.yaml's services that have a `build` section, once per environment key (each
   * tagged after the main image's key); rebuilt with force_build.
   */
  private async buildSidecars(request: BuildRequest): Promise<void> {
    const composeFile = await taskComposeFile(request.contextDir);
    if (!composeFile) return;
    const { signal, timeout } = stepSignal(request);
    const mainTag = imageTag(request.envKey);
    try {
      const labels = { ...this.imageLabelsOf(request), [LABEL_PART_OF]: request.envKey };
      const prebuilt = !!request.dockerImage && !(await isFile(path.join(request.contextDir, 'Dockerfile')));
      // Only the build sections of this model are used: the trial's limits are not known here (nor needed).
      const infra = await composeInfra(composeFile, {
        contextDir: request.contextDir,
        mainImage: prebuilt ? request.dockerImage! : mainTag,
        prebuilt,
        cpus: 1,
        memoryBytes: 2 ** 30,
      });
      await buildSidecars(composeFile, mainTag, labels, {
        dockerHost: this.dockerHost(),
        infra,
        signal,
        onOutput: request.onOutput,
        isBuilt: async (image) => {
          const labels = await this.imageLabels(image);
          return labels !== undefined && (!request.force || labels[LABEL_JOB] === request.jobName);
        },
      });
    } catch (err) {
      request.signal?.throwIfAborted();
      if (timeout.aborted) {
        throw new TaskEnvironmentError('EnvironmentBuildError', `build exceeded ${request.timeoutMs / 1000} s`);
      }
      throw err;
    }
  }

  private imageLabelsOf(request: BuildRequest): Record<string, string> {
    return {
      [LABEL_JOB]: request.jobName,
      [LABEL_ENV_KEY]: request.envKey,
      [LABEL_HOST]: this.owner.hostId,
      [LABEL_DEPLOYMENT]: this.owner.deployment,
      ...(request.partOf ? { [LABEL_PART_OF]: request.partOf } : {}),
    };
  }

  /** The daemon this environment talks to, as the docker CLI names it. */
  private dockerHost(): string {
    const address = this.daemonAddress();
    return address.startsWith('/') ? `unix://${address}` : address.replace(/^https?:/, 'tcp:');
  }

  private async pull(image: string, request: BuildRequest): Promise<void> {
    const { signal, timeout } = stepSignal(request);
    let failure: string | undefined;
    try {
      const stream = await this.docker.pull(image, { abortSignal: signal });
      await readJsonLines(stream, (event) => {
        if (event.error) failure = event.errorDetail?.message ?? event.error;
      });
    } catch (err) {
      request.signal?.throwIfAborted();
      failure = timeout.aborted ? `pull exceeded ${request.timeoutMs / 1000} s` : firstLine(err);
    }
    if (failure) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `docker_image ${image} is not on this host and could not be pulled: ${failure}`
      );
    }
  }

  /** The image's labels, or undefined when the image is not on this host. */
  private async imageLabels(image: string): Promise<Record<string, string> | undefined> {
    try {
      const info = await this.docker.getImage(image).inspect();
      return info.Config?.Labels ?? {};
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
  }

  async start(request: StartRequest): Promise<StartResult> {
    const gpus = request.gpus ? await this.gpuRequest(request.gpus) : [];
    // A separate verifier's environment of an earlier, crashed attempt goes first; the trial's own is replaced when
    // its name is found taken (see createContainer).
    if (request.role) await this.removeRole(request.trialId, request.role);
    const imageConfig = (await this.docker.getImage(request.image).inspect()).Config;
    // An install snapshot is committed from one of our containers, so it may carry our keep-alive as its ENTRYPOINT:
    // that is no entrypoint of the task's (adding `sleep infinity` as the command again would make PID 1 exit).
    const entrypoint = isKeepAlive(imageConfig?.Entrypoint) ? [] : (imageConfig?.Entrypoint ?? []);
    const workdir = request.workdir ?? (imageConfig?.WorkingDir || '/');
    // Without an ENTRYPOINT, PID 1 only keeps the container alive, so killing every other process (a timeout)
    // leaves it standing; no init, it would be PID 1 and its child `sleep` would die with the rest. With one, it
    // runs as Harbor runs it (tasks start services there) and only the command that keeps the container up is ours.
    const keepAlive = entrypoint.length ? { Cmd: [...KEEP_ALIVE] } : { Entrypoint: [...KEEP_ALIVE], Cmd: [] };
    const labels = {
      [LABEL_JOB]: request.jobName,
      [LABEL_TRIAL]: request.trialId,
      [LABEL_HOST]: this.owner.hostId,
      [LABEL_WORKER]: request.workerId,
      [LABEL_DEPLOYMENT]: this.owner.deployment,
      ...(request.role ? { [LABEL_ROLE]: request.role } : {}),
    };
    const nanoCpus = await this.nanoCpus(request.resources.cpus);
    const composeFile = request.environmentDir && !request.role ? await taskComposeFile(request.environmentDir) : null;
    // The networks a phase with network joins (setNetwork): the trial's own, which no-network leaves.
    const publicNetworks = composeFile ? `${projectName(request.trialName, request.trialId)}_default` : 'bridge';
    Object.assign(labels, { [LABEL_PUBLIC_NETWORKS]: publicNetworks });
    if (composeFile) {
      const main = {
        image: request.image,
        entrypoint: keepAlive.Entrypoint,
        command: keepAlive.Cmd,
        working_dir: workdir,
        environment: request.env,
        cpus: nanoCpus / 1e9,
        mem_limit: Math.round(request.resources.memoryBytes),
        memswap_limit: Math.round(request.resources.memoryBytes),
        pids_limit: request.resources.pidsLimit,
        ...(request.network === 'none' ? { network_mode: 'none' } : {}),
        ...(gpus.length
          ? {
              deploy: {
                resources: {
                  reservations: { devices: [{ driver: 'nvidia', count: request.gpus, capabilities: ['gpu'] }] },
                },
              },
            }
          : {}),
      };
      await this.removeTrial(request.trialId); // a project of an earlier, crashed attempt
      const { id, unenforced } = await this.startComposeWithStorage(request, composeFile, main, labels);
      const handle = { id, workdir };
      await this.putFiles(handle, request.files);
      await this.setUp(handle, request.setup, { bound: [], written: [] });
      for (const user of request.users ?? []) await this.assertUser(handle, user);
      return { handle, unenforced };
    }
    const options: Docker.ContainerCreateOptions = {
      name: containerName(request.trialName, request.trialId, request.role),
      Image: request.image,
      ...keepAlive,
      WorkingDir: workdir,
      Env: envList(request.env),
      Labels: labels,
      HostConfig: {
        NanoCpus: nanoCpus,
        Memory: Math.round(request.resources.memoryBytes),
        MemorySwap: Math.round(request.resources.memoryBytes), // no swap beyond the memory limit
        PidsLimit: request.resources.pidsLimit,
        // no-network: only loopback. setNetwork connects it for a phase that may reach the network.
        ...(request.network === 'none' ? { NetworkMode: 'none' } : {}),
        ...(gpus.length ? { DeviceRequests: gpus } : {}),
      },
    };
    const files = await this.placeFiles(request.files ?? []);
    if (files.bound.length) {
      options.HostConfig!.Binds = files.bound.map(({ hostPath, containerPath }) => `${hostPath}:${containerPath}:ro`);
    }
    const { container, unenforced } = await this.createContainer(options, request.resources.storageBytes);
    if (!request.role) this.loneContainerTrials.add(request.trialId);
    await startContainer(container);
    const handle = { id: container.id, workdir };
    await this.putFiles(handle, files.archived);
    if (!(await this.setUp(handle, request.setup, files))) {
      // The daemon does not see this host's files (it runs elsewhere, or this worker in a container of its own):
      // from now on they are put in with an archive.
      this.bindFiles = false;
      await this.removeContainer(container.id);
      return this.start(request);
    }
    for (const user of request.users ?? []) await this.assertUser(handle, user);
    return { handle, unenforced };
  }

  /**
   * Where a start's files come from. The daemon's archive extraction (it re-executes itself to unpack in the
   * container) costs 50–150 ms per trial, so: a host file is bind-mounted read-only (a content-addressed copy in the
   * host cache, mode 0644) where the daemon is local; a text the size of an instruction is written by the setup exec
   * (passed in its environment); only what is left goes in an archive.
   */
  private async placeFiles(files: StartFile[]): Promise<FilePlacement> {
    const placement: FilePlacement = { bound: [], written: [], archived: [] };
    const canBind = this.bindFiles && this.daemonAddress().startsWith('/');
    for (const file of files) {
      if ('text' in file && Buffer.byteLength(file.text) <= WRITTEN_FILE_MAX_BYTES && !file.text.includes('\0')) {
        placement.written.push({ containerPath: file.containerPath, text: file.text });
      } else if ('hostPath' in file && canBind) {
        placement.bound.push({ containerPath: file.containerPath, hostPath: await hostCopy(file) });
      } else placement.archived.push(file);
    }
    return placement;
  }

  /**
   * Main's storage limit as compose's `storage_opt`, as createContainer does it: a daemon that refuses it (overlay2
   * needs xfs with pquota) is not asked again, and the limit is reported unenforced.
   */
  private async startComposeWithStorage(
    request: StartRequest,
    composeFile: string,
    main: Record<string, unknown>,
    labels: Record<string, string>
  ): Promise<{ id: string; unenforced: string[] }> {
    const { storageBytes } = request.resources;
    if (storageBytes <= 0) return { id: await this.startCompose(request, composeFile, main, labels), unenforced: [] };
    if (!this.storageOptUnsupported) {
      const withStorage = { ...main, storage_opt: { size: `${Math.round(storageBytes)}` } };
      try {
        return { id: await this.startCompose(request, composeFile, withStorage, labels), unenforced: [] };
      } catch (err) {
        if (!(err instanceof TaskEnvironmentError) || !STORAGE_OPT_UNSUPPORTED.test(err.message)) throw err;
        this.storageOptUnsupported = true;
      }
    }
    return { id: await this.startCompose(request, composeFile, main, labels), unenforced: ['storage'] };
  }

  /**
   * A compose project for the trial: its `main` service is the trial's container, every service healthy before
   * this returns; returns main's container id. Whatever a failed start left is removed.
   */
  private async startCompose(
    request: StartRequest,
    composeFile: string,
    main: Record<string, unknown>,
    labels: Record<string, string>
  ): Promise<string> {
    const project = projectName(request.trialName, request.trialId);
    try {
      const environmentDir = path.dirname(composeFile);
      const infra = await composeInfra(composeFile, {
        contextDir: environmentDir,
        mainImage: request.image,
        prebuilt: !(await isFile(path.join(environmentDir, 'Dockerfile'))),
        cpus: request.resources.cpus,
        memoryBytes: request.resources.memoryBytes,
        // The task's [environment.env], not Rollout's own variables (the instruction).
        taskEnv: Object.fromEntries(Object.entries(request.env).filter(([name]) => !name.startsWith('ROLLOUT_'))),
      });
      await composeUp(
        {
          composeFile,
          project,
          main,
          mainImageTag: imageTag(request.envKey ?? ''),
          labels,
          waitTimeoutSec: COMPOSE_WAIT_TIMEOUT_SEC,
        },
        {
          dockerHost: this.dockerHost(),
          infra,
          signal: AbortSignal.timeout(COMPOSE_WAIT_TIMEOUT_SEC * 1000 + 60_000),
        }
      );
      const [container] = await this.docker.listContainers({ filters: { label: serviceFilter(project) } });
      if (!container) throw new TaskEnvironmentError('EnvironmentStartError', `compose project ${project}: no main`);
      return container.Id;
    } catch (err) {
      await this.removeTrial(request.trialId);
      throw err;
    }
  }

  /**
   * GPUs through the NVIDIA container runtime. A host without it has no GPUs for containers: a task that needs them
   * cannot run here, which is the task's error (one line), never a silent run without them.
   */
  private async gpuRequest(count: number): Promise<Docker.DeviceRequest[]> {
    const runtimes = ((await this.docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {};
    if (!('nvidia' in runtimes)) {
      throw new TaskEnvironmentError(
        'EnvironmentStartError',
        `task.toml environment.gpus = ${count}, and this Docker host has no GPUs (no nvidia runtime)`
      );
    }
    return [{ Driver: 'nvidia', Count: count, Capabilities: [['gpu']] }];
  }

  /** A task.toml user that the image lacks would make every later exec fail with a runtime error: say so now. */
  private async assertUser(handle: EnvironmentHandle, user: string): Promise<void> {
    const probe = await this.exec(handle, { command: 'true', user }).catch((err: unknown) => {
      if (err instanceof TaskEnvironmentError) return { exitCode: -1, stdout: '', stderr: err.message };
      throw err;
    });
    if (probe.exitCode !== 0) {
      throw new TaskEnvironmentError(
        'EnvironmentStartError',
        `task.toml user "${user}" cannot run commands in the image: ${(probe.stdout + probe.stderr).trim()}`
      );
    }
  }

  /**
   * The container on its own networks (the default bridge; a compose project's network), or on none at all. A container created with NetworkMode none holds
   * the `none` network, which must be left before joining another; with no network left it has only loopback.
   */
  async setNetwork(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void> {
    const info = await this.docker.getContainer(handle.id).inspect();
    const joined = Object.keys(info.NetworkSettings?.Networks ?? {});
    const own = info.Config?.Labels?.[LABEL_PUBLIC_NETWORKS] ?? 'bridge';
    const wanted = network === 'public' ? own.split(',') : [];
    for (const name of joined.filter((n) => !wanted.includes(n))) {
      await this.docker.getNetwork(name).disconnect({ Container: handle.id, Force: true });
    }
    for (const name of wanted.filter((n) => !joined.includes(n))) {
      await this.docker.getNetwork(name).connect({ Container: handle.id });
    }
  }

  /** Docker refuses a limit above the host's CPU count; a task asking for more gets all of them. */
  private async nanoCpus(cpus: number): Promise<number> {
    if (this.hostCpus === undefined) {
      const info = (await this.docker.info()) as { NCPU: number; Driver?: string; DriverStatus?: string[][] };
      this.hostCpus = info.NCPU;
      // overlay2 takes a size limit only on xfs (with pquota): on any other backing filesystem the daemon refuses
      // it, so a trial's create is not tried with one first.
      const backing = info.DriverStatus?.find(([key]) => key === 'Backing Filesystem')?.[1];
      if (info.Driver === 'overlay2' && backing !== undefined && backing !== 'xfs') this.storageOptUnsupported = true;
    }
    return Math.round(Math.min(cpus, this.hostCpus) * 1e9);
  }

  /**
   * Creates the trial's container; its name is the trial's, so a container an earlier, crashed attempt left on this
   * host is in the way: it is removed (by label) and the create tried again. A daemon that refused a storage limit
   * once, or cannot take one (see nanoCpus), is not asked again; the limit is reported as not enforced.
   */
  private async createContainer(
    options: Docker.ContainerCreateOptions,
    storageBytes: number
  ): Promise<{ container: Docker.Container; unenforced: string[] }> {
    const create = async (createOptions: Docker.ContainerCreateOptions) => {
      try {
        return await this.docker.createContainer(createOptions);
      } catch (err) {
        if (statusCode(err) !== 409) throw err;
        await this.removeTrial(options.Labels?.[LABEL_TRIAL] ?? '');
        return this.docker.createContainer(createOptions);
      }
    };
    if (storageBytes <= 0) return { container: await create(options), unenforced: [] };
    if (this.storageOptUnsupported) return { container: await create(options), unenforced: ['storage'] };
    const size = `${Math.round(storageBytes)}`;
    const withStorage = { ...options, HostConfig: { ...options.HostConfig, StorageOpt: { size } } };
    try {
      return { container: await create(withStorage), unenforced: [] };
    } catch (err) {
      if (!STORAGE_OPT_UNSUPPORTED.test(firstLine(err))) throw err;
      this.storageOptUnsupported = true;
      return { container: await create(options), unenforced: ['storage'] };
    }
  }

  private async putFiles(handle: EnvironmentHandle, files: StartFile[] | undefined): Promise<void> {
    if (!files?.length) return;
    await this.docker.getContainer(handle.id).putArchive(packedFiles(files), { path: '/' });
  }

  /**
   * One exec as root: the start files it writes (and a check that the bound ones are there); /logs/agent and
   * /logs/verifier, writable by whichever user the agent and the tests run as; the caller's setup; and which shell the
   * container has (bash when the image has it, else sh), for later execs. False when a bound file is missing.
   */
  private async setUp(
    handle: EnvironmentHandle,
    setup: string | undefined,
    files: Pick<FilePlacement, 'bound' | 'written'>
  ): Promise<boolean> {
    const bound = files.bound.map(({ containerPath }) => shellQuote(containerPath));
    const command = [
      // A bind mount whose source the daemon does not have shows as an empty folder: then the files must be put in.
      ...(bound.length ? [`for f in ${bound.join(' ')}; do [ -f "$f" ] || exit ${BOUND_FILES_MISSING}; done`] : []),
      ...files.written.map(({ containerPath }, index) => {
        const file = shellQuote(containerPath);
        const folder = shellQuote(path.posix.dirname(containerPath));
        return `mkdir -p ${folder} && printf '%s' "$ROLLOUT_START_FILE_${index}" > ${file} && chmod 644 ${file}`;
      }),
      'mkdir -p /logs/agent /logs/verifier && chmod 777 /logs/agent /logs/verifier',
      ...(setup ? [setup] : []),
      'if [ -x /bin/bash ]; then echo /bin/bash; else echo /bin/sh; fi',
    ].join(' && ');
    const env = files.written.map(({ text }, index) => `ROLLOUT_START_FILE_${index}=${text}`);
    let result: { exitCode: number | null; stdout: string; stderr: string };
    try {
      result = await this.collectExec(handle.id, { Cmd: ['/bin/sh', '-c', command], Env: env, User: '0' });
    } catch (err) {
      // An image that cannot run a shell never could host a trial: a start error, not a broken environment.
      if (err instanceof TaskEnvironmentError) throw new TaskEnvironmentError('EnvironmentStartError', err.message);
      throw err;
    }
    if (bound.length && result.exitCode === BOUND_FILES_MISSING) return false;
    if (result.exitCode !== 0) {
      throw new TaskEnvironmentError('EnvironmentStartError', `${command} failed in the container: ${result.stderr}`);
    }
    this.shells.set(handle.id, result.stdout.trim() === '/bin/bash' ? '/bin/bash' : '/bin/sh');
    return true;
  }

  /** Runs a command of Rollout's own to its end, with its output. */
  private async collectExec(
    containerId: string,
    options: Pick<Docker.ExecCreateOptions, 'Cmd' | 'Env' | 'User'>
  ): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
    const { exec, stream } = await this.startExec(containerId, options);
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    this.docker.modem.demuxStream(stream, stdout, stderr);
    await execOutcome(stream);
    const exitCode = await exitCodeOf(exec);
    assertProcessStarted(exitCode, stdout.text() + stderr.text());
    return { exitCode, stdout: stdout.text(), stderr: stderr.text() };
  }

  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const shell = await this.shellOf(handle.id);
    const { exec, stream } = await this.startExec(handle.id, {
      Cmd: [shell, '-c', request.command],
      Env: envList(request.env ?? {}),
      WorkingDir: request.cwd ?? handle.workdir,
      User: request.user,
    });
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    this.docker.modem.demuxStream(stream, stdout, stderr);
    const outcome = await execOutcome(stream, request.timeoutMs, request.signal);
    if (outcome === 'ended') {
      const exitCode = await exitCodeOf(exec);
      assertProcessStarted(exitCode, stdout.text() + stderr.text());
      return { exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    }
    stream.destroy();
    await this.killAll(handle);
    if (outcome === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  async runStep(handle: EnvironmentHandle, step: ShellStep): Promise<ExecResult | null> {
    if (step.command.includes('\0') || (await this.shellOf(handle.id)) !== '/bin/bash') return null;
    let shell = this.stepShells.get(handle.id);
    if (!shell?.open) {
      shell = await StepShell.open(this.docker.getContainer(handle.id), handle.workdir, this.docker.modem);
      this.stepShells.set(handle.id, shell);
    }
    return shell.run(step, () => this.killAll(handle));
  }

  async isRunning(handle: EnvironmentHandle): Promise<boolean> {
    const state = (await ignoreMissing(this.docker.getContainer(handle.id).inspect()))?.State;
    return state !== undefined && state.Running && !state.Paused && !state.Restarting;
  }

  /**
   * Creates and starts an exec. A container that is no longer running, while the daemon answers, was broken from
   * inside (its PID 1 only sleeps): an outcome of what ran in it, not a failure of the host.
   */
  private async startExec(
    containerId: string,
    options: Pick<Docker.ExecCreateOptions, 'Cmd' | 'Env' | 'WorkingDir' | 'User'>
  ): Promise<{ exec: Docker.Exec; stream: Duplex }> {
    let exec: Docker.Exec;
    try {
      exec = await this.docker.getContainer(containerId).exec({ ...options, AttachStdout: true, AttachStderr: true });
    } catch (err) {
      if (statusCode(err) === 409 && /is not running/i.test(daemonMessage(err))) {
        throw new TaskEnvironmentError('EnvironmentBrokenError', `the container stopped: ${daemonMessage(err)}`);
      }
      throw err;
    }
    return { exec, stream: await exec.start({ hijack: true, stdin: false }) };
  }

  /** bash when the image has it (checked once per container), else sh. */
  private async shellOf(containerId: string): Promise<string> {
    let shell = this.shells.get(containerId);
    if (!shell) {
      // Another worker process started the container (this one restarted since): ask again.
      const probe = await this.collectExec(containerId, { Cmd: ['/bin/sh', '-c', 'test -x /bin/bash'] });
      shell = probe.exitCode === 0 ? '/bin/bash' : '/bin/sh';
      this.shells.set(containerId, shell);
    }
    return shell;
  }

  /**
   * Kills every process in the container but PID 1 (`sleep`): all that a command started, daemons and processes
   * that left its process group included. As root, so that processes of any user go.
   */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    await this.collectExec(handle.id, { Cmd: [await this.shellOf(handle.id), '-c', KILL_ALL], User: '0' });
  }

  readonly killAllCommand = KILL_ALL;

  /**
   * A folder's contents land inside containerPath; a single file lands as containerPath/<its name>. One archive,
   * extracted at the container's root with every entry under its target, so the daemon makes missing folders (no
   * `mkdir` exec first) and several targets take one transfer.
   */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const targets = typeof containerPath === 'string' ? [containerPath] : containerPath;
    const isFolder = (await stat(hostPath)).isDirectory();
    await this.docker.getContainer(handle.id).putArchive(packedAt(hostPath, isFolder, targets), { path: '/' });
  }

  /** See extractArchive: the contents of a folder land in hostDir; links and `../` escapes are skipped. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const archive = await this.archiveOf(handle, containerPath);
    if (archive) await extractArchive(archive, hostDir, budget, path.posix.basename(containerPath));
  }

  /** One archive for several folders: each getArchive costs the daemon a process of its own (tens of CPU-ms). */
  async downloadFolders(
    handle: EnvironmentHandle,
    containerPath: string,
    selection: FolderSelection,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<boolean> {
    const archive = await this.archiveOf(handle, containerPath);
    return archive ? extractArchive(archive, hostDir, budget, '', selection) : true;
  }

  /** The archive of containerPath; undefined when nothing is there (the agent wrote no logs). */
  private async archiveOf(
    handle: EnvironmentHandle,
    containerPath: string
  ): Promise<NodeJS.ReadableStream | undefined> {
    try {
      return await this.docker.getContainer(handle.id).getArchive({ path: containerPath });
    } catch (err) {
      // Nothing at containerPath is normal; a missing container is not.
      if (statusCode(err) === 404 && !/no such container/i.test(daemonMessage(err))) return undefined;
      throw err;
    }
  }

  /**
   * Kills and removes the container in one call (cleanup follows every stop, so nothing is kept by stopping alone).
   * PID 1 (`sleep`, no handler) ignores SIGTERM, so any grace period would only be waited out: killed at once. A
   * compose project's other services, network and volumes go at cleanup.
   */
  async stop(handle: EnvironmentHandle): Promise<void> {
    await this.removeContainer(handle.id);
  }

  async halt(handle: EnvironmentHandle): Promise<void> {
    try {
      // PID 1 (`sleep`, no handler) ignores SIGTERM, so any grace period would only be waited out: kill at once.
      await this.docker.getContainer(handle.id).stop({ t: 0 });
    } catch (err) {
      if (statusCode(err) !== 304) throw err; // already stopped
    }
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    if (handle.id.startsWith(ORPHANS_OF)) {
      await this.removeTrial(handle.id.slice(ORPHANS_OF.length));
      return;
    }
    this.shells.delete(handle.id);
    // A compose service is part of its trial's environment: all of it (sidecars, network, volumes) goes.
    const info = await ignoreMissing(this.docker.getContainer(handle.id).inspect());
    const labels = info?.Config.Labels ?? {};
    const trialId = labels[LABEL_TRIAL];
    if (labels[LABEL_COMPOSE_PROJECT] && trialId && labels[LABEL_DEPLOYMENT] === this.owner.deployment) {
      await this.removeTrial(trialId);
      return;
    }
    await this.removeContainer(handle.id);
  }

  private async removeContainer(id: string): Promise<void> {
    this.shells.delete(id);
    this.stepShells.get(id)?.close();
    this.stepShells.delete(id);
    try {
      await this.docker.getContainer(id).remove({ force: true, v: true });
    } catch (err) {
      if (![404, 409].includes(statusCode(err) ?? 0)) throw err; // gone, or its removal already under way
    }
  }

  private async removeRole(trialId: string, role: string): Promise<void> {
    const filters = this.ownedBy(`${LABEL_TRIAL}=${trialId}`, `${LABEL_ROLE}=${role}`);
    for (const container of await this.docker.listContainers({ all: true, filters })) {
      await this.removeContainer(container.Id);
    }
  }

  async service(handle: EnvironmentHandle, name: string): Promise<EnvironmentHandle> {
    const main = await this.docker.getContainer(handle.id).inspect();
    const project = main.Config.Labels?.[LABEL_COMPOSE_PROJECT];
    if (!project)
      throw new TaskEnvironmentError('EnvironmentBrokenError', `no service ${name}: not a compose environment`);
    const [container] = await this.docker.listContainers({
      all: true,
      filters: { label: serviceFilter(project, name) },
    });
    if (!container) throw new TaskEnvironmentError('EnvironmentBrokenError', `no service ${name} in ${project}`);
    return { id: container.Id, workdir: '/' };
  }

  async removeTrial(trialId: string): Promise<number> {
    const owned = { filters: this.ownedBy(`${LABEL_TRIAL}=${trialId}`) };
    // Only a compose project has networks and volumes of its own: a trial this process started on a lone container
    // needs no look for them.
    const lone = this.loneContainerTrials.delete(trialId);
    const [containers, networks, volumes] = await Promise.all([
      this.docker.listContainers({ all: true, ...owned }),
      lone ? [] : this.docker.listNetworks(owned),
      lone ? [] : this.docker.listVolumes(owned).then(({ Volumes }) => Volumes ?? []),
    ]);
    await Promise.all(containers.map((container) => this.removeContainer(container.Id)));
    // A compose project's network and volumes, once no container uses them.
    for (const network of networks) await ignoreMissing(this.docker.getNetwork(network.Id).remove());
    for (const volume of volumes) await ignoreMissing(this.docker.getVolume(volume.Name).remove());
    return containers.length;
  }

  /**
   * The trials' containers, and the networks and volumes of compose projects whose containers are gone (a crash
   * between their removals): those stand for their trial as `ORPHANS_OF<trial id>`, which remove() takes.
   */
  async heldEnvironments(): Promise<HeldEnvironment[]> {
    const filters = this.ownedBy(LABEL_TRIAL);
    const containers = await this.docker.listContainers({ all: true, filters });
    const held = containers.map((container) => ({
      id: container.Id,
      trialId: container.Labels[LABEL_TRIAL] ?? '',
      workerId: container.Labels[LABEL_WORKER] ?? null,
    }));
    const withContainers = new Set(held.map((h) => h.trialId));
    const networks = await this.docker.listNetworks({ filters });
    const { Volumes: volumes } = await this.docker.listVolumes({ filters });
    for (const { Labels: labels } of [...networks, ...(volumes ?? [])]) {
      const trialId = labels?.[LABEL_TRIAL];
      if (!trialId || withContainers.has(trialId)) continue;
      withContainers.add(trialId);
      held.push({ id: `${ORPHANS_OF}${trialId}`, trialId, workerId: labels[LABEL_WORKER] ?? null });
    }
    return held;
  }

  readonly snapshots: InstallSnapshots = {
    find: async (baseImage, key) => {
      const base = await this.docker.getImage(baseImage).inspect();
      const tag = snapshotTag(base.Id, key);
      return (await this.imageLabels(tag)) ? tag : null;
    },
    take: async (handle, key, agent) => {
      const container = await this.docker.getContainer(handle.id).inspect();
      const [repo, tag] = snapshotTag(container.Image, key).split(':') as [string, string];
      await this.docker.getContainer(handle.id).commit({
        repo,
        tag,
        changes: [`LABEL ${LABEL_SNAPSHOT_OF}=${container.Image} ${LABEL_AGENT}=${agent}`],
      });
      return `${repo}:${tag}`;
    },
  };
  /**
   * The default bridge's gateway address (e.g. 172.17.0.1): containers reach the host there, and it lives on the
   * host's docker0 interface, so a listener on it is not reachable from other machines the way 0.0.0.0 would be.
   */
  async gatewayHost(): Promise<string> {
    const info = (await this.docker.getNetwork('bridge').inspect()) as {
      IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] };
    };
    const config = info.IPAM?.Config?.find((c) => c.Gateway ?? c.Subnet?.includes('.'));
    if (config?.Gateway) return config.Gateway;
    // Docker leaves Gateway out of some inspections: the bridge then takes the subnet's first address.
    const subnet = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/\d+$/.exec(config?.Subnet ?? '');
    if (!subnet) throw new Error('docker network "bridge": no gateway address or IPv4 subnet to derive it from');
    const [a, b, c, d] = subnet.slice(1).map(Number) as [number, number, number, number];
    const first = (((a << 24) | (b << 16) | (c << 8) | d) >>> 0) + 1;
    return [first >>> 24, (first >>> 16) & 255, (first >>> 8) & 255, first & 255].join('.');
  }

  /**
   * Releases a job's reference tag (what build returned). The image itself goes only when this job built it (its
   * labels name this job and deployment) and no other job holds a reference: a job that keeps its images
   * (`delete: false`) or still runs keeps it, and so does a container still using it (Docker refuses). With the last
   * job reference go the images built as its parts (compose sidecars, a separate verifier's) by jobs of this
   * deployment, whoever built the image itself (a present docker_image, another job's); `rollout build`'s stay.
   */
  async removeImage(reference: string): Promise<boolean> {
    const info = await this.docker
      .getImage(reference)
      .inspect()
      .catch((err: unknown) => {
        if (statusCode(err) === 404) return undefined;
        throw err;
      });
    if (!info) return true;
    const labels = info.Config?.Labels ?? {};
    const base = reference.slice(0, reference.lastIndexOf('-'));
    const builtByThisJob =
      labels[LABEL_JOB] !== undefined &&
      labels[LABEL_DEPLOYMENT] === this.owner.deployment &&
      reference === `${base}-${this.jobRef(labels[LABEL_JOB])}`;
    const otherReferences = (info.RepoTags ?? []).filter((tag) => tag !== reference && tag.startsWith(`${base}-`));
    if (otherReferences.length === 0) {
      const parts = await this.docker.listImages({
        filters: {
          label: [
            `${LABEL_PART_OF}=${base.slice(base.indexOf(':') + 1)}`,
            `${LABEL_DEPLOYMENT}=${this.owner.deployment}`,
          ],
        },
      });
      for (const part of parts) if (!(await this.removeTag(part.Id))) return false;
    }
    const otherTags = (info.RepoTags ?? []).filter((tag) => tag !== reference && tag !== base);
    if (builtByThisJob && otherTags.length === 0) {
      // Its install snapshots (built on top of it) go with it.
      const snapshots = await this.docker.listImages({ filters: { label: [`${LABEL_SNAPSHOT_OF}=${info.Id}`] } });
      for (const snapshot of snapshots) if (!(await this.removeTag(snapshot.Id))) return false;
      // The base tag first: the reference then keeps the image until no container uses it.
      await this.removeTag(base);
    }
    return this.removeTag(reference);
  }

  /** Untags (and deletes the image with its last tag); false when a container still uses the image. */
  private async removeTag(tag: string): Promise<boolean> {
    try {
      await this.docker.getImage(tag).remove();
      return true;
    } catch (err) {
      const code = statusCode(err);
      if (code === 409) return false;
      if (code === 404) return true;
      throw err;
    }
  }
}

/**
 * Why a build failed for want of Rollout's Dockerfile frontend (turned off with an empty ROLLOUT_DOCKERFILE_FRONTEND),
 * naming the Dockerfile line: a heredoc (the engine's own frontend reads its first line of text as an instruction) or
 * a `# syntax=` line (its frontend is not on the host, and no registry can be reached). Null when the failure is
 * something else.
 */
async function missingFrontendProblem(contextDir: string, output: string): Promise<string | null> {
  if (dockerfileFrontendImage()) return null;
  const dockerfile = path.join(contextDir, 'Dockerfile');
  const lines = (await readFile(dockerfile, 'utf8').catch(() => '')).split('\n');
  const fix = "Rollout's Dockerfile frontend is turned off (ROLLOUT_DOCKERFILE_FRONTEND is empty)";
  const parseError = /dockerfile parse error line (\d+): unknown instruction/i.exec(output);
  if (parseError) {
    const failed = Number(parseError[1]);
    const heredoc = lines.slice(0, failed).findLastIndex((line) => HEREDOC_LINE.test(line));
    if (heredoc >= 0)
      return `${dockerfile}:${heredoc + 1}: a heredoc (${lines[heredoc]?.trim()}) needs BuildKit's Dockerfile 1.4 syntax; ${fix}`;
  }
  const syntax = lines.findIndex((line) => SYNTAX_LINE.test(line));
  if (
    syntax >= 0 &&
    /failed to (resolve source metadata|solve with frontend gateway|load cache key)|pull access denied|dial tcp|no such host/i.test(
      output
    )
  ) {
    return `${dockerfile}:${syntax + 1}: ${lines[syntax]?.trim()} would pull its frontend from a registry; ${fix}`;
  }
  return null;
}

/** Per base image id and install key: a rebuilt base image never reuses an install made over the old one. */
function snapshotTag(baseImageId: string, key: string): string {
  const digest = createHash('sha256').update(`${baseImageId}\n${key}`).digest('hex').slice(0, 24);
  return `${SNAPSHOT_REPOSITORY}:${digest}`;
}

function splitTag(image: string): [repo: string, tag: string] {
  const colon = image.lastIndexOf(':');
  return [image.slice(0, colon), image.slice(colon + 1)];
}

export function imageTag(envKey: string): string {
  return `${IMAGE_REPOSITORY}:${envKey}`;
}

/** `rollout-<trial name>[-<role>]-<hash of the trial id>`: readable in `docker ps`, unique per trial, a valid name. */
function containerName(trialName: string, trialId: string, role?: string): string {
  const digest = createHash('sha256').update(trialId).digest('hex').slice(0, 8);
  const readable = trialName.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 40);
  return `rollout-${readable}${role ? `-${role}` : ''}-${digest}`;
}

async function startContainer(container: Docker.Container): Promise<void> {
  try {
    await container.start();
  } catch (err) {
    // Best effort: the trial's next start removes it by label anyway.
    await container.remove({ force: true }).catch(() => undefined);
    // An image without `sleep` (scratch, distroless) cannot host a trial: a problem of the task, not worth a retry.
    if (/executable file not found|"sleep"/.test(firstLine(err))) {
      throw new TaskEnvironmentError('EnvironmentStartError', `the image cannot run sleep: ${firstLine(err)}`);
    }
    throw err;
  }
}

/** The time limit and cancellation of a build or pull, as one signal, and the time limit alone. */
function stepSignal(request: BuildRequest): { signal: AbortSignal; timeout: AbortSignal } {
  const timeout = AbortSignal.timeout(request.timeoutMs);
  return { signal: request.signal ? AbortSignal.any([request.signal, timeout]) : timeout, timeout };
}

/** Settles with the promise, or rejects with the signal's reason as soon as it aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    void promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** Calls onEvent with each JSON line of a build or pull stream; resolves when the daemon ends it. */
function readJsonLines(stream: NodeJS.ReadableStream, onEvent: (event: ProgressEvent) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const decoder = new StringDecoder('utf8');
    let pending = '';
    const parse = (line: string) => {
      if (!line.trim()) return;
      let event: ProgressEvent;
      try {
        event = JSON.parse(line) as ProgressEvent;
      } catch {
        event = { stream: line }; // not JSON: keep it as output rather than lose it
      }
      onEvent(event);
    };
    stream.on('data', (chunk: Buffer) => {
      const lines = (pending + decoder.write(chunk)).split('\n');
      pending = lines.pop() ?? '';
      lines.forEach(parse);
    });
    stream.once('error', reject);
    stream.once('end', () => {
      parse(pending + decoder.end());
      resolve();
    });
    stream.once('close', () => reject(new Error('the Docker daemon closed the stream early')));
  });
}

/** How an exec's output stream finished: it ended, its time limit passed, or the signal aborted. */
function execOutcome(
  stream: NodeJS.ReadableStream,
  timeoutMs?: number,
  signal?: AbortSignal
): Promise<'ended' | 'timedOut' | 'aborted'> {
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const settle = (outcome: 'ended' | 'timedOut' | 'aborted' | Error) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = () => settle('aborted');
    if (timeoutMs) timer = setTimeout(() => settle('timedOut'), timeoutMs);
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    stream.once('end', () => settle('ended'));
    stream.once('close', () => settle('ended'));
    stream.once('error', (err: Error) => settle(err));
  });
}

/**
 * The runtime could not start the exec's process: the container's own files are broken (an agent deleted /bin or
 * /usr). The daemon answered, so the host is fine; this is the trial's outcome, never a reason to retry.
 */
function assertProcessStarted(exitCode: number | null, output: string): void {
  const failure = /OCI runtime exec failed: exec failed: unable to start container process: .*/.exec(output);
  if ((exitCode === 126 || exitCode === 127) && failure) {
    throw new TaskEnvironmentError(
      'EnvironmentBrokenError',
      `the container can no longer start a process: ${failure[0].trim()}`
    );
  }
}

/** The exit code once Docker has recorded it: the output stream can end a moment before the exec is marked done. */
async function exitCodeOf(exec: Docker.Exec): Promise<number | null> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const info = await exec.inspect();
    if (!info.Running) return info.ExitCode ?? null;
    await sleep(20);
  }
  return null;
}

/** Keeps the last OUTPUT_LIMIT characters written to it. */
export class OutputTail extends Writable {
  private readonly decoder = new StringDecoder('utf8');
  private data = '';

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.data += this.decoder.write(chunk);
    if (this.data.length > OUTPUT_LIMIT) this.data = this.data.slice(-OUTPUT_LIMIT);
    done();
  }

  text(): string {
    return this.data;
  }
}

/**
 * A tar, to extract at the container's root, of a host folder's contents (or a lone file) under each of `targets`:
 * tar-fs packs each target's copy into the same archive (finalized after the last).
 */
function packedAt(hostPath: string, isFolder: boolean, targets: readonly string[]): NodeJS.ReadableStream {
  const [dir, entries] = isFolder ? [hostPath, undefined] : [path.dirname(hostPath), [path.basename(hostPath)]];
  const packTarget = (index: number, pack?: TarPack): TarPack =>
    tarFs.pack(dir, {
      entries,
      pack,
      map: (header) => ({ ...header, name: path.posix.join(rootRelative(targets[index]!), header.name) }),
      finalize: index === targets.length - 1,
      finish: (done: TarPack) => {
        if (index < targets.length - 1) packTarget(index + 1, done);
      },
    });
  // tar-fs streams are streamx streams: pipe-compatible with Node's, which is all dockerode does with them.
  return packTarget(0) as unknown as NodeJS.ReadableStream;
}

type TarPack = ReturnType<typeof tarFs.pack>;

/** The files of a start request as a tar to extract at the container's root (root-owned, mode 0644). */
function packedFiles(files: StartFile[]): NodeJS.ReadableStream {
  const pack = tarStream.pack();
  void (async () => {
    for (const file of files) {
      const content = 'text' in file ? Buffer.from(file.text) : await readFile(file.hostPath);
      pack.entry({ name: rootRelative(file.containerPath), mode: 0o644, size: content.length }, content);
    }
    pack.finalize();
  })().catch((err: Error) => pack.destroy(err));
  return pack as unknown as NodeJS.ReadableStream;
}

/** The setup exec's exit code when a bind-mounted start file is not a file in the container. */
const BOUND_FILES_MISSING = 86;
/** A text start file up to this size goes through the setup exec's environment (the kernel allows 128 KiB a value). */
const WRITTEN_FILE_MAX_BYTES = 64 * 1024;

/** How a start's files get into the container (see placeFiles). */
interface FilePlacement {
  bound: { hostPath: string; containerPath: string }[];
  written: { containerPath: string; text: string }[];
  archived: StartFile[];
}

/** A start file's content in the host cache, named by its digest, readable by all (the container's users too). */
async function hostCopy(file: StartFile): Promise<string> {
  const content = 'text' in file ? Buffer.from(file.text) : await readFile(file.hostPath);
  const target = path.join(hostCacheDir(), 'container-files', createHash('sha256').update(content).digest('hex'));
  if (existsSync(target)) return target;
  await mkdir(path.dirname(target), { recursive: true });
  const temporary = `${target}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temporary, content);
  await chmod(temporary, 0o644); // whatever the umask
  await rename(temporary, target);
  return target;
}

/** A container path as a name in an archive extracted at `/`. */
function rootRelative(containerPath: string): string {
  return path.posix.normalize(containerPath).replace(/^\/+/, '') || '.';
}

export function envList(env: Record<string, string>): string[] {
  return Object.entries(env).map(([key, value]) => `${key}=${value}`);
}

export async function isFile(file: string): Promise<boolean> {
  return (await stat(file).catch(() => undefined))?.isFile() ?? false;
}

/** The promise's value, or undefined when what it reads or removes is not there (404). */
async function ignoreMissing<T>(promise: Promise<T>): Promise<T | undefined> {
  try {
    return await promise;
  } catch (err) {
    if (statusCode(err) === 404) return undefined;
    throw err;
  }
}

function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}

/** The daemon's own error message (dockerode's message starts with a generic reason for the HTTP status). */
function daemonMessage(err: unknown): string {
  return (err as { json?: { message?: string } }).json?.message ?? '';
}

export function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}

/** How long sidecars may take to become healthy (their own healthcheck's retries usually end it sooner). */
const COMPOSE_WAIT_TIMEOUT_SEC = 300;

/** The command that keeps a trial's container up. */
export const KEEP_ALIVE = ['sleep', 'infinity'] as const;

function isKeepAlive(entrypoint: string[] | string | undefined): boolean {
  return Array.isArray(entrypoint) && entrypoint.join(' ') === KEEP_ALIVE.join(' ');
}
