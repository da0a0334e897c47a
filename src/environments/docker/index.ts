/**
 * The docker provider: trials in containers of the local (or DOCKER_HOST) Docker engine, through its API (dockerode).
 * This class only puts together its parts: images (the shared image builder, with compose sidecars and install
 * snapshots), containers, exec, files, network and cleanup.
 */
import type Docker from 'dockerode';

import type { PhaseNetwork } from '../../contracts/task-config';
import type { EnvironmentHandle } from '../../contracts/trial';
import type {
  BuildRequest,
  BuildResult,
  Environment,
  EnvironmentOwner,
  ExecRequest,
  ExecResult,
  HeldEnvironment,
  InstallSnapshots,
  ShellStep,
  StartRequest,
  StartResult,
  StreamedProcess,
  StreamedProcessRequest,
} from '../../contracts/environment';
import { ImageBuilder } from '../image-builder/builder';
import { DockerEngine } from './engine';
import { KILL_ALL } from '../trial-container';
import { DockerCleanup } from './cleanup';
import { ComposeStart } from './compose-start';
import { DockerContainers } from './containers';
import { DockerExec } from './exec';
import { DockerFiles } from './files';
import { composeParts, installSnapshots } from './images';
import { DockerNetwork } from './network';
import { StartFiles } from './start-files';
import { FilesThroughTransfer } from '../kit/file-methods';

export class DockerEnvironment extends FilesThroughTransfer implements Environment {
  readonly type = 'docker';
  readonly hostBound = true;
  readonly killAllCommand = KILL_ALL;
  readonly snapshots: InstallSnapshots;
  private readonly engine: DockerEngine;
  private readonly images: ImageBuilder;
  private readonly execs: DockerExec;
  protected readonly files: DockerFiles;
  private readonly cleanup: DockerCleanup;
  private readonly containers: DockerContainers;
  private readonly network: DockerNetwork;
  private readonly compose: ComposeStart;

  constructor(options: EnvironmentOwner & { docker?: Docker }) {
    super();
    this.engine = new DockerEngine(options);
    this.images = new ImageBuilder(this.engine, composeParts(this.engine));
    this.snapshots = installSnapshots(this.engine);
    this.execs = new DockerExec(this.engine);
    this.files = new DockerFiles(this.engine.docker);
    this.cleanup = new DockerCleanup(this.engine, this.execs);
    this.network = new DockerNetwork(this.engine.docker);
    this.compose = new ComposeStart(this.engine, this.cleanup);
    this.containers = new DockerContainers(this.engine, {
      execs: this.execs,
      cleanup: this.cleanup,
      files: new StartFiles(this.engine, this.execs),
      compose: this.compose,
      network: this.network,
    });
  }

  ping(): Promise<void> {
    return this.engine.ping();
  }

  /**
   * The image of Rollout's own is returned as the job's reference tag to it (`rollout-env:<key>-<job ref>`): the job
   * starts its containers from it, and the image stays as long as any job still holds a reference (see removeImage).
   */
  build(request: BuildRequest): Promise<BuildResult> {
    return this.images.build(request);
  }

  /** `rollout build`: see ImageBuilder.prebuild. */
  prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    return this.images.prebuild(request);
  }

  removeImage(reference: string): Promise<boolean> {
    return this.images.removeImage(reference);
  }

  start(request: StartRequest): Promise<StartResult> {
    return this.containers.start(request);
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    return this.execs.exec(handle, request);
  }

  openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    return this.execs.openProcess(handle, request);
  }

  runStep(handle: EnvironmentHandle, step: ShellStep): Promise<ExecResult | null> {
    return this.execs.runStep(handle, step);
  }

  isRunning(handle: EnvironmentHandle): Promise<boolean> {
    return this.execs.isRunning(handle);
  }

  killAll(handle: EnvironmentHandle): Promise<void> {
    return this.execs.killAll(handle);
  }

  stop(handle: EnvironmentHandle): Promise<void> {
    return this.cleanup.stop(handle);
  }

  halt(handle: EnvironmentHandle): Promise<void> {
    return this.cleanup.halt(handle);
  }

  remove(handle: EnvironmentHandle): Promise<void> {
    return this.cleanup.remove(handle);
  }

  removeTrial(trialId: string): Promise<number> {
    return this.cleanup.removeTrial(trialId);
  }

  heldEnvironments(): Promise<HeldEnvironment[]> {
    return this.cleanup.heldEnvironments();
  }

  service(handle: EnvironmentHandle, name: string): Promise<EnvironmentHandle> {
    return this.compose.service(handle, name);
  }

  setNetwork(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void> {
    return this.network.setNetwork(handle, network);
  }

  gatewayHost(): Promise<string> {
    return this.network.gatewayHost();
  }
}
