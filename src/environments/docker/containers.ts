/** Starting a trial's container (or its compose project): image, limits, labels, files, users. */
import type Docker from 'dockerode';

import type { EnvironmentHandle } from '../../contracts/trial';
import { createHash } from 'node:crypto';
import type { StartRequest, StartResult } from '../../contracts/environment';
import {
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_JOB,
  LABEL_ROLE,
  LABEL_TRIAL,
  LABEL_WORKER,
  TaskEnvironmentError,
} from '../../contracts/environment';
import { bestEffort } from '../../log';
import { firstLine } from '../exec-output';
import type { DockerEngine } from './engine';
import { statusCode } from './engine';
import { DROPPED_CAPABILITIES, KEEP_ALIVE, envList, isKeepAlive } from '../trial-container';
import type { DockerCleanup } from './cleanup';
import type { ComposeStart } from './compose-start';
import { projectName, taskComposeFile } from './compose';
import { SECURITY_OPTIONS } from './compose-policy';
import type { DockerExec } from './exec';
import type { DockerNetwork } from './network';
import { LABEL_PUBLIC_NETWORKS } from './network';
import type { StartFiles } from './start-files';

/** The daemon's refusal of --storage-opt size (overlay2 needs xfs with pquota for it). */
const STORAGE_OPT_UNSUPPORTED = /storage[- ]?opt|quota|backing filesystem/i;

export class DockerContainers {
  private hostCpus: number | undefined;
  private storageOptUnsupported = false;

  constructor(
    private readonly engine: DockerEngine,
    private readonly parts: {
      execs: DockerExec;
      cleanup: DockerCleanup;
      files: StartFiles;
      compose: ComposeStart;
      network: DockerNetwork;
    }
  ) {}

  private get execs(): DockerExec {
    return this.parts.execs;
  }

  private get cleanup(): DockerCleanup {
    return this.parts.cleanup;
  }

  private get files(): StartFiles {
    return this.parts.files;
  }

  async start(request: StartRequest): Promise<StartResult> {
    const gpus = request.gpus ? await this.gpuRequest(request.gpus) : [];
    // A separate verifier's environment of an earlier, crashed attempt goes first; the trial's own is replaced when
    // its name is found taken (see createContainer).
    if (request.role) await this.cleanup.removeRole(request.trialId, request.role);
    const imageConfig = (await this.engine.docker.getImage(request.image).inspect()).Config;
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
      [LABEL_HOST]: this.engine.owner.hostId,
      [LABEL_WORKER]: request.workerId,
      [LABEL_DEPLOYMENT]: this.engine.owner.deployment,
      ...(request.role ? { [LABEL_ROLE]: request.role } : {}),
    };
    const nanoCpus = await this.nanoCpus(request.resources.cpus);
    const composeFile = request.environmentDir && !request.role ? await taskComposeFile(request.environmentDir) : null;
    // The networks a phase with network joins (setNetwork): the trial's own, which no-network leaves. A compose
    // project's is its own; other containers share one where containers cannot reach each other.
    const publicNetworks = composeFile
      ? `${projectName(request.trialName, request.trialId)}_default`
      : await this.parts.network.trialNetwork();
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
        // (Capabilities and no-new-privileges: every service gets them, see hardenModel.)
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
      await this.cleanup.removeTrial(request.trialId); // a project of an earlier, crashed attempt
      const { id, unenforced } = await this.startComposeWithStorage(request, composeFile, main, labels);
      const handle = { id, workdir };
      await this.files.put(handle, request.files);
      await this.files.setUp(handle, request.setup, { bound: [], written: [] });
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
        // No raw sockets (ARP spoofing of the containers beside it) or device nodes; setuid binaries gain nothing.
        CapDrop: [...DROPPED_CAPABILITIES],
        SecurityOpt: SECURITY_OPTIONS,
        // no-network: only loopback. setNetwork connects it for a phase that may reach the network.
        NetworkMode: request.network === 'none' ? 'none' : publicNetworks,
        ...(gpus.length ? { DeviceRequests: gpus } : {}),
      },
    };
    const files = await this.files.place(request.files ?? []);
    if (files.bound.length) {
      options.HostConfig!.Binds = files.bound.map(({ hostPath, containerPath }) => `${hostPath}:${containerPath}:ro`);
    }
    const { container, unenforced } = await this.createContainer(options, request.resources.storageBytes);
    if (!request.role) this.cleanup.startedAlone(request.trialId);
    await startContainer(container);
    const handle = { id: container.id, workdir };
    await this.files.put(handle, files.archived);
    if (!(await this.files.setUp(handle, request.setup, files))) {
      // The daemon does not see this host's files (it runs elsewhere, or this worker in a container of its own):
      // from now on they are put in with an archive.
      this.files.cannotBind();
      await this.cleanup.removeContainer(container.id);
      return this.start(request);
    }
    for (const user of request.users ?? []) await this.assertUser(handle, user);
    return { handle, unenforced };
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
    if (storageBytes <= 0)
      return { id: await this.parts.compose.start(request, composeFile, main, labels), unenforced: [] };
    if (!this.storageOptUnsupported) {
      const withStorage = { ...main, storage_opt: { size: `${Math.round(storageBytes)}` } };
      try {
        return { id: await this.parts.compose.start(request, composeFile, withStorage, labels), unenforced: [] };
      } catch (err) {
        if (!(err instanceof TaskEnvironmentError) || !STORAGE_OPT_UNSUPPORTED.test(err.message)) throw err;
        this.storageOptUnsupported = true;
      }
    }
    return { id: await this.parts.compose.start(request, composeFile, main, labels), unenforced: ['storage'] };
  }

  /**
   * GPUs through the NVIDIA container runtime. A host without it has no GPUs for containers: a task that needs them
   * cannot run here, which is the task's error (one line), never a silent run without them.
   */
  private async gpuRequest(count: number): Promise<Docker.DeviceRequest[]> {
    const runtimes = ((await this.engine.docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {};
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
    const probe = await this.execs.exec(handle, { command: 'true', user }).catch((err: unknown) => {
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

  /** Docker refuses a limit above the host's CPU count; a task asking for more gets all of them. */
  private async nanoCpus(cpus: number): Promise<number> {
    if (this.hostCpus === undefined) {
      const info = (await this.engine.docker.info()) as { NCPU: number; Driver?: string; DriverStatus?: string[][] };
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
        return await this.engine.docker.createContainer(createOptions);
      } catch (err) {
        if (statusCode(err) !== 409) throw err;
        await this.cleanup.removeTrial(options.Labels?.[LABEL_TRIAL] ?? '');
        return this.engine.docker.createContainer(createOptions);
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
    // The trial's next start removes it by label anyway.
    await bestEffort(`removing container ${container.id} that did not start`, container.remove({ force: true }));
    // An image without `sleep` (scratch, distroless) cannot host a trial: a problem of the task, not worth a retry.
    if (/executable file not found|"sleep"/.test(firstLine(err))) {
      throw new TaskEnvironmentError('EnvironmentStartError', `the image cannot run sleep: ${firstLine(err)}`);
    }
    throw err;
  }
}
