/**
 * Trials in Daytona sandboxes, through the official SDK (@daytonaio/sdk) configured from the worker's environment.
 * One sandbox per trial, created from the environment's snapshot (images.ts) with its size, the trial's env and
 * labels naming deployment, job and trial, and a Daytona-side lifetime derived from the trial's whole budget: a
 * sandbox whose worker died is deleted by Daytona soon after. Sandboxes are reached through the API from any worker.
 */
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';

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
import { LABEL_DEPLOYMENT, LABEL_ENV_KEY } from '../../contracts/environment';
import { prepareStart } from '../kit/prepare';
import type { ListedSandbox, SandboxListing } from '../kit/sandbox-listing';
import { heldSandboxes, removeTrialSandboxes } from '../kit/sandbox-listing';
import type { StagedTransfer } from '../kit/tar-transfer';
import { KILL_ALL } from '../trial-container';
import { sandboxLabels, sandboxLifetimeSec } from '../kit/cloud-sandbox';
import { DaytonaClients, daytonaCall, ifFound, isUnusableSnapshot } from './client';
import { SandboxExec } from './exec';
import { sandboxFiles } from './files';
import { daytonaSettings } from './settings';
import { DaytonaSnapshots, sandboxSize } from './images';
import { FilesThroughTransfer } from '../kit/file-methods';

/** How long start waits for a sandbox when the request sets no limit. */
const DEFAULT_START_TIMEOUT_MS = 10 * 60_000;

export class DaytonaEnvironment extends FilesThroughTransfer implements Environment {
  readonly type = 'daytona';
  readonly hostBound = false;
  readonly stopRemoves = true;
  // A snapshot fixes its sandboxes' CPUs, memory and disk.
  readonly imagesBySize = true;
  readonly killAllCommand = KILL_ALL;
  readonly snapshots: InstallSnapshots;
  private readonly owner: EnvironmentOwner;
  private readonly clients = new DaytonaClients();
  private readonly execs: SandboxExec;
  protected readonly files: StagedTransfer;
  private readonly images: DaytonaSnapshots;
  private readonly quotaWaitMs: number | undefined;

  constructor(options: EnvironmentOwner & { quotaWaitMs?: number }) {
    super();
    this.owner = { hostId: options.hostId, deployment: options.deployment };
    this.quotaWaitMs = options.quotaWaitMs;
    this.execs = new SandboxExec(this.clients);
    this.files = sandboxFiles(this.clients, this.execs);
    this.images = new DaytonaSnapshots(this.clients, this.quotaWaitMs);
    this.snapshots = this.images.installSnapshots();
  }

  /** The API answers these credentials (one list call; its rate-limit reply is waited out, as every call's is). */
  async ping(): Promise<void> {
    const client = this.clients.client();
    const labels = { [LABEL_DEPLOYMENT]: this.owner.deployment };
    try {
      await daytonaCall(
        async () => {
          for await (const _ of client.list({ labels, limit: 1 })) break;
        },
        { maxWaitMs: this.quotaWaitMs }
      );
    } catch (err) {
      throw new Error(
        `Daytona API unreachable at ${process.env.DAYTONA_API_URL ?? 'app.daytona.io'}: ${(err as Error).message}`,
        {
          cause: err,
        }
      );
    }
  }

  build(request: BuildRequest): Promise<BuildResult> {
    return this.images.build(request);
  }

  /**
   * `rollout build`: the environment's snapshot ahead of any job. No job releases it: a job that finds it there
   * built nothing (`built: false`), and only what a job built goes with `delete: true`.
   */
  async prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    const { image, built } = await this.images.build(request);
    return { image, fresh: built };
  }

  async start(request: StartRequest): Promise<StartResult> {
    const settings = daytonaSettings(request.settings);
    const size = sandboxSize(request.resources, request.gpus);
    const client = this.clients.client(settings.target);
    const timeout = Math.ceil((request.timeoutMs ?? DEFAULT_START_TIMEOUT_MS) / 1000);
    // Nothing to list before the first try when no creation was ever begun for the trial.
    let listFirst = request.firstCreation !== true;
    const create = () =>
      daytonaCall(
        async () => {
          // What an earlier, crashed attempt left (all of the trial's sandboxes, or only its separate verifier's),
          // or a creation that a rate limit cut off while it waited for the sandbox to start.
          if (listFirst) await this.removeTrial(request.trialId, request.settings, request.role);
          listFirst = true;
          return client.create(
            {
              snapshot: request.image,
              name: `rollout-${randomUUID()}`,
              user: 'root',
              envVars: request.env,
              labels: {
                ...sandboxLabels(this.owner, request),
                // What removeImage asks: does a sandbox of any job still run from this environment's snapshots?
                ...(request.envKey ? { [LABEL_ENV_KEY]: request.envKey } : {}),
              },
              // Its lifetime on Daytona's side: never stopped for idleness (an agent's long command is no activity
              // of the API's), deleted as soon as it stops, and destroyed at the end of the trial's budget and a
              // margin (its worker died).
              autoStopInterval: 0,
              autoDeleteInterval: 0,
              ttlMinutes: Math.ceil(sandboxLifetimeSec(request.budgetSec) / 60),
              networkBlockAll: request.network === 'none',
            },
            { timeout }
          );
        },
        { maxWaitMs: this.quotaWaitMs, signal: request.signal }
      );
    const sandbox = await create().catch(async (err: unknown) => {
      // Released by another job meanwhile (delete: true), or deactivated by Daytona after 14 days unused: built or
      // activated again (see isUnusableSnapshot).
      if (!isUnusableSnapshot(err) || !request.environmentDir || !request.envKey) throw err;
      await this.images.ensure(request.image, {
        contextDir: request.environmentDir,
        envKey: request.envKey,
        dockerImage: null,
        force: false,
        jobName: request.jobName,
        timeoutMs: timeout * 1000,
        settings: request.settings,
        resources: request.resources,
        gpus: request.gpus,
        signal: request.signal,
      });
      return create();
    });
    this.clients.remember(sandbox);
    const handle = { id: sandbox.id, workdir: '/' };
    const carrier = {
      where: 'the sandbox',
      extractAtRoot: (at: EnvironmentHandle, archive: Readable) => this.files.extractAtRoot(at, archive),
      extractAndRun: (at: EnvironmentHandle, archive: Readable, script: string) =>
        this.files.extractAndRun(at, archive, script),
      runAsRoot: (at: EnvironmentHandle, script: string) => this.execs.root(at.id, script),
    };
    const output = await prepareStart(handle, request, carrier, {
      // The image's WORKDIR (the daemon's own), where an exec starts when the task names none; Daytona starts the
      // daemon of an image without one in the user's home and says so: that is `/` on Docker.
      last: ['if [ "$DAYTONA_USER_HOME_AS_WORKDIR" = true ]; then echo /; else pwd; fi'],
    });
    handle.workdir = request.workdir ?? (output.trim().split('\n').pop() || '/');
    // Daytona has no per-sandbox process limit; a size rounded up to whole CPUs and GiB is not the task's exact one.
    return { handle, unenforced: ['pids', ...size.inexact] };
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    return this.execs.exec(handle, request);
  }

  killAll(handle: EnvironmentHandle): Promise<void> {
    return this.execs.killAll(handle);
  }

  openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    return this.execs.openProcess(handle, request);
  }

  async isRunning(handle: EnvironmentHandle): Promise<boolean> {
    const sandbox = await ifFound(
      (async () => {
        const found = await this.clients.sandbox(handle.id);
        await daytonaCall(() => found.refreshData());
        return found;
      })()
    );
    return sandbox?.state === 'started';
  }

  /** A phase's network: Daytona blocks the sandbox's outbound traffic, or lets it through again. */
  async setNetwork(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void> {
    const sandbox = await this.clients.sandbox(handle.id);
    await daytonaCall(() => sandbox.updateNetworkSettings({ networkBlockAll: network === 'none' }));
  }

  /** A stopped sandbox is deleted by Daytona at once (autoDeleteInterval 0): stopping is removing. */
  stop(handle: EnvironmentHandle): Promise<void> {
    return this.remove(handle);
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    this.execs.forget(handle.id);
    this.clients.forget(handle.id);
    const sandbox = await ifFound(daytonaCall(() => this.clients.client().get(handle.id)));
    if (sandbox) await ifFound(daytonaCall(() => sandbox.delete()));
  }

  removeTrial(trialId: string, settings?: ProviderSettings, role?: string): Promise<number> {
    return removeTrialSandboxes(this.listing(daytonaSettings(settings).target), this.owner, trialId, role);
  }

  /** Every sandbox of this deployment, whichever worker made it: the janitor removes those whose trial has ended. */
  heldEnvironments(): Promise<HeldEnvironment[]> {
    return heldSandboxes(this.listing(), this.owner);
  }

  /** Sandboxes by their labels, in `target` (else the default one). */
  private listing(target?: string): SandboxListing {
    return {
      list: (labels) =>
        daytonaCall(async () => {
          const listed: ListedSandbox[] = [];
          for await (const sandbox of this.clients.client(target).list({ labels })) {
            listed.push({ id: sandbox.id, labels: sandbox.labels });
          }
          return listed;
        }),
      remove: (id) => this.remove({ id, workdir: '/' }),
    };
  }

  /** Releases a snapshot this job built (see DaytonaSnapshots.remove); `image` is its name. */
  removeImage(image: string): Promise<boolean> {
    const envKey = /^rollout-([0-9a-f]+)-/.exec(image)?.[1];
    return envKey ? this.images.remove(image, envKey) : Promise.resolve(true);
  }
}
