/**
 * Trials in E2B sandboxes (Firecracker microVMs), through E2B's SDK: templates built by E2B from the task's
 * Dockerfile (images.ts), one sandbox per trial with a platform-side timeout from the trial's budget, commands and
 * files through the sandbox's daemon, envd. Sandboxes are reached through E2B's API from any worker with the
 * credentials, so handles (the sandbox id) are not bound to a host; each carries its deployment, job and trial in
 * its metadata, where removeTrial and the janitor find it.
 */
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
import type { ListedSandbox, SandboxListing } from '../kit/sandbox-listing';
import { heldSandboxes, removeTrialSandboxes } from '../kit/sandbox-listing';
import type { StagedTransfer } from '../kit/tar-transfer';
import { SandboxCommands } from './exec';
import { sandboxFiles } from './files';
import { E2B_KILL_ALL } from './kill-all';
import type { QuotaWaitMs, Sandbox } from './client';
import { ifFound, sdk, withE2BQuota } from './client';
import type { E2BSettings } from './settings';
import { E2BSettingsSchema } from './settings';
import { e2bSnapshots } from './snapshots';
import { PREBUILT_TAG, jobTag, templateName } from './names';
import { buildTemplate, releaseTemplate } from './images';
import { FilesThroughTransfer } from '../kit/file-methods';

/** E2B's longest sandbox timeout (its Pro plan's 24 h). */
const MAX_TIMEOUT_SEC = 24 * 3600;

export class E2BEnvironment extends FilesThroughTransfer implements Environment {
  readonly type = 'e2b';
  readonly hostBound = false;
  readonly stopRemoves = true;
  readonly killAllCommand = E2B_KILL_ALL;
  readonly snapshots: InstallSnapshots;
  private readonly owner: EnvironmentOwner;
  /** How long quota replies are waited on (undefined: ROLLOUT_CLOUD_QUOTA_WAIT_SEC's). */
  private readonly quotaWaitMs: QuotaWaitMs;
  /** Sandboxes this worker has connected to, by id (a connect per activity would cost an API call each). */
  private readonly connected = new Map<string, Promise<Sandbox>>();
  private readonly building = new Map<string, Promise<{ image: string; fresh: boolean }>>();
  private readonly commands: SandboxCommands;
  protected readonly files: StagedTransfer;

  constructor(options: EnvironmentOwner & { quotaWaitMs?: number }) {
    super();
    this.owner = { hostId: options.hostId, deployment: options.deployment };
    this.quotaWaitMs = options.quotaWaitMs;
    const sandboxOf = (handle: EnvironmentHandle) => this.sandbox(handle.id);
    this.commands = new SandboxCommands(sandboxOf);
    this.files = sandboxFiles(sandboxOf, this.commands);
    this.snapshots = e2bSnapshots(this.quotaWaitMs);
  }

  /** The API answers these credentials (one list call; its rate-limit reply is waited out, as every call's is). */
  async ping(): Promise<void> {
    const query = { metadata: { [LABEL_DEPLOYMENT]: this.owner.deployment } };
    try {
      await withE2BQuota('checking the API', this.quotaWaitMs, () =>
        sdk().Sandbox.list({ limit: 1, query }).nextItems()
      );
    } catch (err) {
      throw new Error(`E2B API unreachable: ${(err as Error).message}`, { cause: err });
    }
  }

  async build(request: BuildRequest): Promise<BuildResult> {
    const { image } = await this.template(request, jobTag(request.jobName));
    return { image, built: true };
  }

  prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    return this.template(request, PREBUILT_TAG);
  }

  /** One build at a time per template and tag in this worker: a job's concurrent trials wait for the first's. */
  private template(request: BuildRequest, tag: string): Promise<{ image: string; fresh: boolean }> {
    const settings = settingsOf(request.settings);
    const key = `${templateName(request.envKey, settings)}:${tag}:${request.force}`;
    let building = this.building.get(key);
    if (!building) {
      building = buildTemplate(request, settings, this.quotaWaitMs, tag).finally(() => this.building.delete(key));
      this.building.set(key, building);
    }
    return building;
  }

  async start(request: StartRequest): Promise<StartResult> {
    const settings = settingsOf(request.settings);
    // What an earlier, crashed attempt left (none when no creation was ever begun for the trial).
    if (!request.firstCreation) await this.removeTrial(request.trialId, request.settings);
    const { Sandbox } = sdk();
    const timeoutSec = Math.min(MAX_TIMEOUT_SEC, sandboxLifetimeSec(request.budgetSec));
    const create = (lifetimeSec: number) =>
      withE2BQuota(
        'sandbox creation',
        this.quotaWaitMs,
        () =>
          Sandbox.create(request.image, {
            metadata: sandboxLabels(this.owner, request),
            envs: request.env,
            allowInternetAccess: request.network !== 'none',
            timeoutMs: lifetimeSec * 1000,
            signal: request.signal,
          }),
        request.signal
      );
    const warnings: string[] = [];
    const sandbox = await create(timeoutSec).catch((err: unknown) => {
      // The team's plan caps a sandbox's length (Hobby: 1 h), checked at creation (e2b-dev/infra
      // handlers/timeout_helper.go:30-33): the sandbox is created for that long, and the trial log says so.
      const hours = /Timeout cannot be greater than (\d+) hours/.exec(err instanceof Error ? err.message : '')?.[1];
      if (!hours) throw err;
      warnings.push(
        `e2b: the team's plan lets a sandbox live at most ${hours} h, less than the trial's budget and clean-up ` +
          `(${Math.ceil(timeoutSec / 60)} min): E2B may end it before the trial does`
      );
      return create(Number(hours) * 3600);
    });
    this.connected.set(sandbox.sandboxId, Promise.resolve(sandbox));
    const id = sandbox.sandboxId;
    try {
      const started = await this.prepare({ id, workdir: '/' }, request, settings);
      return warnings.length ? { ...started, warnings } : started;
    } catch (err) {
      await this.remove({ id, workdir: '/' });
      throw err;
    }
  }

  /** The workdir (the template's, unless the task names one), the start files, the logs folders, the setup. */
  private async prepare(handle: EnvironmentHandle, request: StartRequest, settings: E2BSettings): Promise<StartResult> {
    // First: what runs before the trial's own commands (the sandbox's services) outlives every kill of all.
    const home = await this.commands.settle(handle);
    const workdir = request.workdir ?? (home || '/');
    const started = { id: handle.id, workdir };
    await prepareStart(started, request, {
      where: 'the sandbox',
      extractAtRoot: (at, archive) => this.files.extractAtRoot(at, archive),
      extractAndRun: (at, archive, script) => this.files.extractAndRun(at, archive, script),
      runAsRoot: async (at, command) => {
        const { exitCode, stderr } = await this.commands.exec(at, { command, cwd: '/' });
        return { exitCode, output: stderr };
      },
    });
    return { handle: started, unenforced: unenforced(request, settings) };
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    return this.commands.exec(handle, request);
  }

  /** E2B's internet access of a running sandbox, switched for a phase (envd's own channel stays). */
  async setNetwork(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void> {
    const allowInternetAccess = network !== 'none';
    await withE2BQuota('sandbox network', this.quotaWaitMs, () =>
      sdk().Sandbox.updateNetwork(handle.id, { allowInternetAccess })
    );
  }

  killAll(handle: EnvironmentHandle): Promise<void> {
    return this.commands.killAll(handle);
  }

  openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    return this.commands.openProcess(handle, request);
  }

  async isRunning(handle: EnvironmentHandle): Promise<boolean> {
    const info = await ifFound(withE2BQuota('sandbox info', this.quotaWaitMs, () => sdk().Sandbox.getInfo(handle.id)));
    return info?.state === 'running';
  }

  /** A sandbox cannot be stopped and kept here (pausing keeps it billed for storage): stopping kills it. */
  stop(handle: EnvironmentHandle): Promise<void> {
    return this.remove(handle);
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    this.connected.delete(handle.id);
    // False when it was gone already: idempotent.
    await withE2BQuota('sandbox kill', this.quotaWaitMs, () => sdk().Sandbox.kill(handle.id));
  }

  removeTrial(trialId: string, _settings?: ProviderSettings): Promise<number> {
    return removeTrialSandboxes(this.listing, this.owner, trialId);
  }

  heldEnvironments(): Promise<HeldEnvironment[]> {
    return heldSandboxes(this.listing, this.owner);
  }

  removeImage(image: string): Promise<boolean> {
    return releaseTemplate(image, this.quotaWaitMs);
  }

  /** Sandboxes (running or paused) by their metadata, through every page. */
  private readonly listing: SandboxListing = {
    list: async (labels) => {
      const paginator = sdk().Sandbox.list({ query: { metadata: labels } });
      const listed: ListedSandbox[] = [];
      while (paginator.hasNext) {
        const page = await withE2BQuota('sandbox list', this.quotaWaitMs, () => paginator.nextItems());
        listed.push(...page.map((sandbox) => ({ id: sandbox.sandboxId, labels: sandbox.metadata })));
      }
      return listed;
    },
    remove: (id) => this.remove({ id, workdir: '/' }),
  };

  /** The SDK's sandbox of an id: the one this worker created or connected to, else a connect (another worker's). */
  private sandbox(id: string): Promise<Sandbox> {
    let sandbox = this.connected.get(id);
    if (!sandbox) {
      sandbox = withE2BQuota('sandbox connect', this.quotaWaitMs, () => sdk().Sandbox.connect(id));
      sandbox.catch(() => this.connected.delete(id));
      this.connected.set(id, sandbox);
    }
    return sandbox;
  }
}

function settingsOf(settings: ProviderSettings | undefined): E2BSettings {
  return E2BSettingsSchema.parse(settings ?? {});
}

/**
 * What E2B does not enforce per sandbox: vCPUs and memory are the template's (job.yaml cpu_count and memory_mb, else
 * E2B's defaults), disk is the plan's, and there is no process limit.
 */
function unenforced(request: StartRequest, settings: E2BSettings): string[] {
  const { cpus, memoryBytes, storageBytes } = request.resources;
  return [
    ...(settings.cpu_count === undefined || settings.cpu_count !== Math.ceil(cpus) ? ['cpus'] : []),
    ...(settings.memory_mb === undefined || settings.memory_mb * 2 ** 20 < memoryBytes ? ['memory'] : []),
    ...(storageBytes > 0 ? ['storage'] : []),
    'pids',
  ];
}
