/**
 * Trials as Modal sandboxes, through Modal's official JS SDK (`modal`, loaded on first use by provider.ts): images
 * built by Modal from the task's Dockerfile, one sandbox per trial tagged with the deployment, job and trial, commands
 * through the SDK's exec. Sandboxes are reached through Modal's API from any worker with credentials, so handles are
 * not bound to a host; the model gateway is reached through the relay over openProcess (src/gateway/relay/).
 */
import type { Readable } from 'node:stream';

import type { Sandbox, SandboxCreateParams } from 'modal';

import { shellQuote } from '../../shell';
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
  ProviderSettings,
  StartRequest,
  StartResult,
  StreamedProcess,
  StreamedProcessRequest,
} from '../../contracts/environment';
import { LABEL_DEPLOYMENT } from '../../contracts/environment';
import { sandboxLabels, sandboxLifetimeSec } from '../kit/cloud-sandbox';
import { prepareStart } from '../kit/prepare';
import type { ListedSandbox } from '../kit/sandbox-listing';
import { heldSandboxes, removeTrialSandboxes } from '../kit/sandbox-listing';
import type { StreamedTransfer } from '../kit/tar-transfer';
import { KEEP_ALIVE, KILL_ALL } from '../trial-container';
import { ModalConnection, ifFound, sdkMessage } from './client';
import { SandboxExec } from './exec';
import { sandboxFiles } from './files';
import { ModalImages } from './images';
import { modalInstallSnapshots } from './snapshots';
import type { ModalSettings } from './settings';
import { ModalSettingsSchema } from './settings';
import { labelsOfModalTags, modalTags } from './tags';
import { FilesThroughTransfer } from '../kit/file-methods';

/** The tag naming the image a sandbox runs (its job's reference: see removeImage). */
const TAG_IMAGE = 'rollout.image';
/** Modal's longest sandbox timeout: 24 hours. */
const MAX_TIMEOUT_SEC = 24 * 3600;
const MIB = 1024 * 1024;

export class ModalEnvironment extends FilesThroughTransfer implements Environment {
  readonly type = 'modal';
  readonly hostBound = false;
  readonly stopRemoves = true;
  readonly killAllCommand = KILL_ALL;
  private readonly owner: EnvironmentOwner;
  private readonly connection: ModalConnection;
  private readonly images: ModalImages;
  private readonly execs: SandboxExec;
  protected readonly files: StreamedTransfer;
  readonly snapshots: InstallSnapshots;

  constructor(options: EnvironmentOwner & { quotaWaitMs?: number }) {
    super();
    this.owner = { hostId: options.hostId, deployment: options.deployment };
    this.connection = new ModalConnection(options.quotaWaitMs);
    this.images = new ModalImages(this.connection);
    this.execs = new SandboxExec(this.connection);
    this.files = sandboxFiles(this.execs);
    this.snapshots = modalInstallSnapshots(this.connection, TAG_IMAGE);
  }

  /** Modal's API answers this worker's credentials (an App lookup: what every job does first). */
  async ping(): Promise<void> {
    try {
      await this.connection.app(ModalSettingsSchema.parse({}));
    } catch (err) {
      throw new Error(`Modal's API unreachable or refusing this worker's credentials: ${sdkMessage(err)}`, {
        cause: err,
      });
    }
  }

  build(request: BuildRequest): Promise<BuildResult> {
    return this.images.build(request);
  }

  prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    return this.images.prebuild(request);
  }

  async start(request: StartRequest): Promise<StartResult> {
    const settings = requireSettings(request.settings);
    // What an earlier, crashed attempt left: all of the trial's sandboxes, or only its separate verifier's (none when
    // no creation was ever begun for the trial).
    if (!request.firstCreation) await this.removeTrial(request.trialId, settings, request.role);
    const app = await this.connection.app(settings);
    const image = await this.images.image(request.image);
    const params = sandboxParams(request, settings, this.owner);
    const sandbox = await this.connection.withQuotaBackoff(
      'creating a sandbox',
      () => this.connection.client.sandboxes.create(app, image, params),
      request.signal
    );
    this.connection.remember(sandbox);
    try {
      return await this.prepare(sandbox, request);
    } catch (err) {
      await this.remove({ id: sandbox.sandboxId, workdir: '/' });
      throw err;
    }
  }

  /** The sandbox's workdir, files, setup command and users, as start promises them. */
  private async prepare(sandbox: Sandbox, request: StartRequest): Promise<StartResult> {
    const id = sandbox.sandboxId;
    // The image's WORKDIR, where an exec starts when the task names none (the sandbox keeps the image's).
    const workdir = request.workdir ?? (await this.execs.exec({ id, workdir: '' }, { command: 'pwd' })).stdout.trim();
    const handle = { id, workdir: workdir || '/' };
    const users = (request.users ?? []).map(
      (user) => `id -u ${shellQuote(user)} >/dev/null || { echo ${shellQuote(`no user ${user}`)} >&2; exit 1; }`
    );
    const carrier = {
      where: 'the modal sandbox',
      extractAtRoot: (at: EnvironmentHandle, archive: Readable) => this.files.extractAtRoot(at, archive),
      extractAndRun: (at: EnvironmentHandle, archive: Readable, script: string) =>
        this.files.extractAndRun(at, archive, script),
      runAsRoot: async (at: EnvironmentHandle, command: string) => {
        const { exitCode, stderr } = await this.execs.exec(at, { command, cwd: '/' });
        return { exitCode, output: stderr };
      },
    };
    await prepareStart(handle, request, carrier, { checks: users });
    // Modal has no per-sandbox process limit, and its SDK no disk size: pids_limit and storage are not enforced.
    return { handle, unenforced: ['pids', ...(request.resources.storageBytes > 0 ? ['storage'] : [])] };
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    return this.execs.exec(handle, request);
  }

  isRunning(handle: EnvironmentHandle): Promise<boolean> {
    return this.execs.isRunning(handle);
  }

  killAll(handle: EnvironmentHandle): Promise<void> {
    return this.execs.killAll(handle);
  }

  openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    return this.execs.openProcess(handle, request);
  }

  /** Cuts the sandbox off (an empty outbound allowlist) or opens it again, through Modal's network policy. */
  async setNetwork(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void> {
    const sandbox = await this.connection.sandbox(handle.id);
    const open = network === 'public';
    const policy = {
      outboundCidrAllowlist: open ? ['0.0.0.0/0', '::/0'] : [],
      outboundDomainAllowlist: open ? ['*'] : [],
    };
    await this.connection.withQuotaBackoff('setting the network', () => sandbox.updateNetworkPolicy(policy));
  }

  /** A sandbox cannot be stopped and kept: stopping terminates it. */
  stop(handle: EnvironmentHandle): Promise<void> {
    return this.remove(handle);
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    try {
      const sandbox = await ifFound(this.connection.sandbox(handle.id));
      if (sandbox) await ifFound(this.connection.withQuotaBackoff('terminating a sandbox', () => sandbox.terminate()));
    } finally {
      this.execs.forget(handle.id);
      this.connection.forget(handle.id);
    }
  }

  removeTrial(trialId: string, given?: ProviderSettings, role?: string): Promise<number> {
    const settings = given && requireSettings(given);
    return removeTrialSandboxes(
      {
        list: async (tags) => (await this.sandboxIds(tags, settings)).map((id) => ({ id, labels: null })),
        remove: (id) => this.remove({ id, workdir: '/' }),
      },
      this.owner,
      trialId,
      role
    );
  }

  /**
   * Every running sandbox of this deployment, in every App of every Modal Environment of the workspace (a listing
   * without an App is scoped to one Environment: the SDK sends the profile's unless told another).
   */
  heldEnvironments(): Promise<HeldEnvironment[]> {
    return heldSandboxes({ list: (tags) => this.taggedSandboxes(tags) }, this.owner);
  }

  /** Sandboxes carrying every tag, in every Modal Environment, with their tags (read one by one: the list has none). */
  private async taggedSandboxes(tags: Record<string, string>): Promise<ListedSandbox[]> {
    const environments = await this.connection.environmentNames();
    const listed = await this.connection.withQuotaBackoff('listing sandboxes', async () => {
      const sandboxes: Sandbox[] = [];
      for (const environment of environments) {
        for await (const sandbox of this.connection.client.sandboxes.list({ environment, tags: modalTags(tags) }))
          sandboxes.push(sandbox);
      }
      return sandboxes;
    });
    const tagged: ListedSandbox[] = [];
    for (const sandbox of listed) {
      // None when it ended since the listing.
      const tags = (await ifFound(this.connection.withQuotaBackoff('reading tags', () => sandbox.getTags()))) ?? null;
      tagged.push({ id: sandbox.sandboxId, labels: tags && labelsOfModalTags(tags) });
    }
    return tagged;
  }

  /** Released unless a sandbox of this deployment (another job's) still runs from it: see ModalImages.remove. */
  removeImage(image: string): Promise<boolean> {
    return this.images.remove(
      image,
      async (imageId) =>
        (await this.sandboxIds({ [LABEL_DEPLOYMENT]: this.owner.deployment, [TAG_IMAGE]: imageId })).length > 0
    );
  }

  /** Running sandboxes carrying every tag: in the job's App when its settings are known, else workspace-wide. */
  private async sandboxIds(tags: Record<string, string>, settings?: ModalSettings): Promise<string[]> {
    const appId = settings ? (await this.connection.app(settings)).appId : undefined;
    return this.connection.withQuotaBackoff('listing sandboxes', async () => {
      const ids: string[] = [];
      const filter = { appId, tags: modalTags(tags) };
      for await (const sandbox of this.connection.client.sandboxes.list(filter)) ids.push(sandbox.sandboxId);
      return ids;
    });
  }
}

/**
 * The sandbox of a trial: the image's ENTRYPOINT kept with our keep-alive as its command, the task's CPUs, memory
 * and GPUs, a timeout past which Modal ends it even when no worker is left to, and the tags the janitor finds it by.
 */
function sandboxParams(request: StartRequest, settings: ModalSettings, owner: EnvironmentOwner): SandboxCreateParams {
  const memoryMiB = Math.max(1, Math.ceil(request.resources.memoryBytes / MIB));
  return {
    command: [...KEEP_ALIVE],
    cpu: request.resources.cpus,
    cpuLimit: request.resources.cpus,
    memoryMiB,
    memoryLimitMiB: memoryMiB,
    // A GPU type is there whenever the task asks for GPUs: the provider's requirement refuses the job before it starts.
    ...(request.gpus ? { gpu: `${settings.gpu!}:${request.gpus}` } : {}),
    ...(settings.region ? { regions: typeof settings.region === 'string' ? [settings.region] : settings.region } : {}),
    timeoutMs: Math.min(MAX_TIMEOUT_SEC, sandboxLifetimeSec(request.budgetSec)) * 1000,
    env: request.env,
    ...(request.workdir ? { workdir: request.workdir } : {}),
    // no-network: an empty outbound allowlist, which setNetwork can open again (blockNetwork could not be).
    ...(request.network === 'none' ? { outboundCidrAllowlist: [] } : {}),
    tags: modalTags({ ...sandboxLabels(owner, request), [TAG_IMAGE]: request.image }),
  };
}

/** The job.yaml keys the trial's spec carries (see ProviderSettings), as this provider reads them. */
function requireSettings(settings: ProviderSettings | undefined): ModalSettings {
  return ModalSettingsSchema.parse(settings ?? {});
}
