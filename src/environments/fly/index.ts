/**
 * Trials as Fly Machines (https://fly.io/docs/machines/), through the Machines REST API (./client.ts) with the worker's
 * FLY_API_TOKEN. A machine is created per trial from the task's image (built here and pushed to Fly's registry, or a
 * docker_image as is), labelled with Rollout's metadata, and destroyed by Fly itself once its keep-alive ends: the
 * trial's whole budget, so a machine whose worker died cannot run for long. Any worker with the token reaches it.
 */
import type { EnvironmentHandle } from '../../contracts/trial';
import { rolloutLabels, sandboxLabels, sandboxLifetimeSec } from '../kit/cloud-sandbox';
import { fittedGuest, wantedGuest } from '../kit/guest-size';
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
import { LABEL_DEPLOYMENT, TaskEnvironmentError } from '../../contracts/environment';
import type { CollectBudget } from '../host-files';
import { prepareStart } from '../kit/prepare';
import type { ListedSandbox, SandboxListing } from '../kit/sandbox-listing';
import { heldSandboxes, removeTrialSandboxes } from '../kit/sandbox-listing';
import { ImageBuilder } from '../image-builder/builder';
import { DockerEngine } from '../docker/engine';
import { RegistryImages } from '../image-builder/registry-images';
import type { FlyMachineConfig } from './client';
import { DEFAULT_FLY_API, FlyApi, FlyApiError, ifFound } from './client';
import { flyGuestSize } from './guest';
import { FLY_KILL_ALL, MachineExec, machineRef } from './exec';
import type { FlySettings } from './settings';
import { FlySettingsSchema, flyApp, flyRegistry } from './settings';

const DEFAULT_START_TIMEOUT_MS = 10 * 60_000;
const WORKDIR_FILE = '/tmp/.rollout-workdir';

export class FlyEnvironment implements Environment {
  readonly type = 'fly';
  readonly hostBound = false;
  readonly stopRemoves = true;
  readonly killAllCommand = FLY_KILL_ALL;
  private readonly images: RegistryImages;
  private readonly execs: MachineExec;
  /** Apps this process created machines in: where its janitor looks besides FLY_APP. */
  private readonly apps = new Set<string>();

  constructor(private readonly owner: EnvironmentOwner) {
    this.images = new RegistryImages(new ImageBuilder(new DockerEngine(owner)), (settings, envKey) => {
      return `${flyRegistry()}/${appOf(settings)}:rollout-env-${envKey}`;
    });
    this.execs = new MachineExec(() => this.api());
  }

  private api(): FlyApi {
    const token = process.env.FLY_API_TOKEN;
    if (!token) throw new Error('fly: FLY_API_TOKEN is not set on this worker');
    return new FlyApi(token, process.env.FLY_FLAPS_BASE_URL || DEFAULT_FLY_API);
  }

  async ping(): Promise<void> {
    const app = process.env.FLY_APP;
    if (app) await this.api().app(app);
    else this.api();
  }

  build(request: BuildRequest): Promise<BuildResult> {
    return this.images.build(request);
  }

  /** `rollout build`: pushed to Fly's registry ahead of any job (no job owns registry images anyway). */
  prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    return this.images.prebuild(request);
  }

  async start(request: StartRequest): Promise<StartResult> {
    const settings = FlySettingsSchema.parse(request.settings ?? {});
    const app = appOf(settings);
    this.apps.add(app);
    const { guest, warning } = guestOf(request, settings);
    // What an earlier, crashed attempt left (none when no creation was ever begun for the trial).
    if (!request.firstCreation) await this.removeTrial(request.trialId, settings);
    const lifetimeSec = sandboxLifetimeSec(request.budgetSec);
    const config: FlyMachineConfig = {
      image: request.image,
      env: request.env,
      metadata: sandboxLabels(this.owner, request, 'snake'),
      guest,
      // The image's entrypoint is kept; its command is the keep-alive, which ends after the lifetime: then Fly
      // destroys the machine (auto_destroy).
      init: { cmd: ['/bin/sh', '-c', `pwd > ${WORKDIR_FILE}; sleep "$1"; :`, 'rollout-keepalive', `${lifetimeSec}`] },
      auto_destroy: true,
      restart: { policy: 'no' },
    };
    const api = this.api();
    // Rate limits and passing capacity replies are waited on in every call (FlyApi).
    const machine = await api.createMachine(app, { ...(settings.region ? { region: settings.region } : {}), config });
    const id = `${app}/${machine.id}`;
    const deadline = Date.now() + (request.timeoutMs ?? DEFAULT_START_TIMEOUT_MS);
    try {
      await this.waitStarted(app, machine.id, deadline - Date.now(), request.signal);
      const workdir = request.workdir ?? (await this.imageWorkdir({ id, workdir: '/' }));
      const handle = { id, workdir };
      await prepareStart(handle, request, {
        where: 'the machine',
        extractAtRoot: (at, archive) => this.execs.extractAtRoot(at, archive),
        // Started detached and polled (MachineExec.exec): a setup may take longer than one request may (60 s), and
        // is bounded by what is left of the start's limit.
        runAsRoot: async (at, command) => {
          const timeoutMs = Math.max(1000, deadline - Date.now());
          const made = await this.execs.exec(at, { command, cwd: '/', timeoutMs, signal: request.signal });
          return { exitCode: made.exitCode, output: made.timedOut ? `timed out after ${timeoutMs} ms` : made.stderr };
        },
      });
      return { handle, unenforced: ['storage', 'pids'], ...(warning ? { warnings: [warning] } : {}) };
    } catch (err) {
      await api.destroy(app, machine.id);
      throw err;
    }
  }

  /** Fly's wait holds at most 60 s a call: asked again until the start's own limit. */
  private async waitStarted(app: string, id: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      signal?.throwIfAborted();
      try {
        return await this.api().waitFor(app, id, 'started', 60);
      } catch (err) {
        if (!(err instanceof FlyApiError && err.status === 408) || Date.now() > deadline) throw err;
      }
    }
  }

  /** The image's WORKDIR, as the keep-alive found it (written as it started). */
  private async imageWorkdir(handle: EnvironmentHandle): Promise<string> {
    const script = `for i in $(seq 50); do [ -s ${WORKDIR_FILE} ] && break; sleep 0.1; done; cat ${WORKDIR_FILE}`;
    return (await this.execs.run(handle, script)).trim() || '/';
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    return this.execs.exec(handle, request);
  }

  async isRunning(handle: EnvironmentHandle): Promise<boolean> {
    const { app, id } = machineRef(handle);
    return (await ifFound(this.api().machine(app, id)))?.state === 'started';
  }

  async killAll(handle: EnvironmentHandle): Promise<void> {
    await this.execs.killAll(handle);
  }

  upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    return this.execs.upload(handle, hostPath, containerPath);
  }

  download(handle: EnvironmentHandle, containerPath: string, hostDir: string, budget?: CollectBudget): Promise<void> {
    return this.execs.download(handle, containerPath, hostDir, budget);
  }

  /** A machine is not kept stopped (it would still hold its rootfs): stopping destroys it. */
  stop(handle: EnvironmentHandle): Promise<void> {
    return this.remove(handle);
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    const { app, id } = machineRef(handle);
    await this.api().destroy(app, id);
  }

  removeTrial(trialId: string, given?: ProviderSettings): Promise<number> {
    const apps = given ? [appOf(FlySettingsSchema.parse(given))] : this.knownApps();
    return removeTrialSandboxes(this.listing(apps), this.owner, trialId);
  }

  heldEnvironments(): Promise<HeldEnvironment[]> {
    return heldSandboxes(this.listing(this.knownApps()), this.owner);
  }

  /** Machines in `apps` by their metadata (Fly's list filters by one key: the others are checked here). */
  private listing(apps: readonly string[]): SandboxListing {
    return {
      list: async (labels) => {
        const listed: ListedSandbox[] = [];
        for (const app of apps) {
          for (const machine of await this.ownMachines(app)) {
            const own = rolloutLabels(machine.config?.metadata, 'snake');
            if (Object.entries(labels).every(([label, value]) => own[label] === value)) {
              listed.push({ id: `${app}/${machine.id}`, labels: own });
            }
          }
        }
        return listed;
      },
      remove: (id) => this.remove({ id, workdir: '/' }),
    };
  }

  /** This deployment's machines in the app that are not gone already. */
  private async ownMachines(app: string) {
    const machines = await this.api().machines(app, { [LABEL_DEPLOYMENT.replace('.', '_')]: this.owner.deployment });
    return machines.filter((machine) => machine.state !== 'destroyed' && machine.state !== 'destroying');
  }

  private knownApps(): string[] {
    return [...new Set([...(process.env.FLY_APP ? [process.env.FLY_APP] : []), ...this.apps])];
  }

  /** Registry images are content-keyed and shared by jobs: nothing of a job's to release. */
  removeImage(): Promise<boolean> {
    return Promise.resolve(true);
  }
}

function appOf(settings: ProviderSettings | FlySettings | undefined): string {
  const app = flyApp(FlySettingsSchema.parse(settings ?? {}));
  if (!app) throw new Error('fly: no app (environment.app in job.yaml, or FLY_APP)');
  return app;
}

/**
 * The task's CPUs and memory in Fly's nearest guest size (see ./guest.ts; a rounding is warned of), and its GPUs of
 * the job's gpu_kind.
 */
function guestOf(
  request: StartRequest,
  settings: FlySettings
): { guest: NonNullable<FlyMachineConfig['guest']>; warning: string | null } {
  const wanted = wantedGuest(request.resources);
  const { size, warning } = fittedGuest('fly', flyGuestSize(wanted, settings.cpu_kind), wanted);
  const gpus = request.gpus ?? 0;
  if (gpus > 0 && !settings.gpu_kind) {
    throw new TaskEnvironmentError(
      'EnvironmentStartError',
      `the task asks for ${gpus} GPU(s): set environment.gpu_kind in job.yaml (e.g. a100-40gb)`
    );
  }
  const guest = {
    cpu_kind: settings.cpu_kind,
    cpus: size.cpus,
    memory_mb: size.memoryMb,
    ...(gpus > 0 ? { gpu_kind: settings.gpu_kind!, gpus } : {}),
  };
  return { guest, warning };
}
