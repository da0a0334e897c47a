/**
 * One interface for every place a trial can run (Docker, Kubernetes, local processes; cloud sandboxes): what a
 * provider (provider.ts) creates.
 * Methods take serialisable handles so that any activity attempt, on any worker of the same host, can address an
 * environment started by an earlier one.
 */
import type { PhaseNetwork } from './task-config';
import type { CollectReport, EnvironmentHandle, TrialResources } from './trial';

/**
 * Labels on every container and image Rollout creates: who owns it, so anything left behind can be found, and
 * clean-up removes only what it owns (another Rollout on the same Docker host, against another Temporal server, has
 * another deployment).
 */
export const LABEL_JOB = 'rollout.job';
export const LABEL_TRIAL = 'rollout.trial';
/** The host id (`--host-id`, default the machine's name) whose janitor looks after it. */
export const LABEL_HOST = 'rollout.host';
/** The worker process's own host id (its task queue), leased from the host id: see workers/host-lease.ts. */
export const LABEL_WORKER = 'rollout.worker';
export const LABEL_DEPLOYMENT = 'rollout.deployment';
export const LABEL_ENV_KEY = 'rollout.env-key';
/** On install snapshots: the id of the image the snapshot was taken over (removed with it). */
export const LABEL_SNAPSHOT_OF = 'rollout.snapshot-of';
export const LABEL_AGENT = 'rollout.agent';
/**
 * On images that belong to a trial's main image (compose sidecars, a separate verifier's): the main image's env key.
 * They go when it goes.
 */
export const LABEL_PART_OF = 'rollout.part-of';
/** On a separate verifier's container: it stands beside the trial's own environment. */
export const LABEL_ROLE = 'rollout.role';

/**
 * Install snapshots: an image of a container taken right after an agent's install, so later trials of the same image
 * and agent start with it installed. `key` names the install (recipe, version, container env); the base image's
 * identity is added by the environment.
 */
export interface InstallSnapshots {
  /** The snapshot of `key` over `baseImage` on this host, or null. */
  find(baseImage: string, key: string): Promise<string | null>;
  /** Commits the environment as the snapshot of `key` over the image it was started from. */
  take(handle: EnvironmentHandle, key: string, agent: string): Promise<string>;
}

/**
 * A provider's own job.yaml `environment:` keys (e.g. kubernetes' namespace, image_registry), as its settings schema
 * parsed them: JSON, opaque to the core, read only by the provider (see provider.ts).
 */
export type ProviderSettings = Record<string, unknown>;

/** Who a worker's environments belong to. */
export interface EnvironmentOwner {
  /** The host id the janitor scans (`--host-id`). */
  hostId: string;
  /** The Temporal server and namespace the worker serves (src/temporal/deployment.ts). */
  deployment: string;
}

/** A container (or local root) this host holds for a trial, and the worker that made it. */
export interface HeldEnvironment {
  /** What remove() takes as the handle's id. */
  id: string;
  trialId: string;
  workerId: string | null;
  /**
   * Made under another host id of this deployment (a Docker daemon several hosts share, one of them gone for good):
   * the janitor removes it only once its trial no longer runs.
   */
  elsewhere?: boolean;
}

/** The instruction as a file in every environment: $ROLLOUT_TASK_INSTRUCTION_FILE (local maps the folder). */
export const INSTRUCTION_DIR = '/rollout';
export const INSTRUCTION_FILE = `${INSTRUCTION_DIR}/instruction.md`;

export interface BuildRequest {
  /** The task's environment/ folder. */
  contextDir: string;
  /** Content hash of contextDir + dockerImage: the image tag, so identical environments build once. */
  envKey: string;
  /** task.toml environment.docker_image: used directly when present. */
  dockerImage: string | null;
  force: boolean;
  jobName: string;
  timeoutMs: number;
  signal?: AbortSignal;
  /** Called with build output lines (for trial.log and heartbeats). */
  onOutput?: (line: string) => void;
  /**
   * The env key of the trial's main image when this image belongs to it (a separate verifier's): it is removed with
   * that image's last job reference, and the job gets no reference of its own to release (`built` is false).
   */
  partOf?: string;
  /**
   * Images will be built as parts of this one (a separate verifier's, compose sidecars'): the job gets a reference to
   * release even for an image Rollout did not build (a present docker_image), so that its parts go with it.
   */
  referenced?: boolean;
  /** The provider's own job.yaml settings (see ProviderSettings). */
  settings?: ProviderSettings;
  /**
   * The trial's resources and GPUs: for providers whose built image fixes the size of what starts from it (a Daytona
   * snapshot). Absent: the provider's default size.
   */
  resources?: TrialResources;
  gpus?: number;
}

export interface BuildResult {
  image: string;
  /**
   * True when the image is Rollout's own and `image` is the job's reference to it, to release (removeImage) when
   * the job is done with it; false for an image Rollout does not manage (a present docker_image).
   */
  built: boolean;
}

export interface StartRequest {
  image: string;
  jobName: string;
  trialId: string;
  trialName: string;
  /** The worker's own host id (its task queue): recorded so a janitor can tell a stale attempt's container. */
  workerId: string;
  resources: TrialResources;
  /** Environment variables of the environment itself (ROLLOUT_TASK_INSTRUCTION, [environment.env]). */
  env: Record<string, string>;
  /** Working directory override ([environment].workdir); else the image's. */
  workdir?: string;
  /**
   * The task's environment/ folder and its content key (as built): a docker-compose.yaml there adds services around
   * the trial's container (docker only).
   */
  environmentDir?: string;
  envKey?: string;
  /**
   * 'verifier': a separate verifier's environment, started beside the trial's own (which it leaves standing; an
   * earlier attempt's verifier environment is replaced). Removed with the trial.
   */
  role?: 'verifier';
  /** The network it starts with (task.toml's baseline); default public. */
  network?: PhaseNetwork;
  /** GPUs the task asks for ([environment] gpus): a host that has none refuses the task. */
  gpus?: number;
  /** Users commands will run as ([agent] / [verifier] user): each must exist in the environment. */
  users?: string[];
  /**
   * Files put in place before start returns (the instruction, a CA bundle), in one transfer where the environment
   * can: each a container file path and its text or the host file to copy. A host file may be mounted read-only
   * (docker): one that a later step writes again must be given as text.
   */
  files?: StartFile[];
  /** A shell command run as root once the files are in place, in the same round trip as the environment's setup. */
  setup?: string;
  /** The provider's own job.yaml settings (see ProviderSettings). */
  settings?: ProviderSettings;
  /** The trial's whole remaining budget (agent, verifier and slack): an environment may not outlive it. */
  budgetSec?: number;
  /** How long start may wait for the environment to be up (a pod to be scheduled and pulled). */
  timeoutMs?: number;
  /**
   * True when the trial's sandbox record shows that no creation was ever begun for it (no earlier attempt, on any
   * host): a provider that lists what an earlier attempt left before creating may skip that list, an API call.
   */
  firstCreation?: boolean;
  signal?: AbortSignal;
}

export type StartFile = { containerPath: string } & ({ text: string } | { hostPath: string });

export interface StartResult {
  handle: EnvironmentHandle;
  /** Resource limits that could not be enforced here, e.g. ["storage"]. */
  unenforced: string[];
  /** What the trial log should say of the start, e.g. the task's size rounded up to the vendor's nearest. */
  warnings?: string[];
}

/** One command of a session's shell (see Environment.runStep). */
export interface ShellStep {
  command: string;
  /** Output past this many bytes is cut in the environment (one more is kept, so a cut shows). */
  outputLimitBytes: number;
  timeoutMs: number;
  signal?: AbortSignal;
}

export interface ExecRequest {
  command: string;
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
  /** When it passes, every process the command started in the environment is killed and `timedOut` is true. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ExecResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/**
 * A process in the environment whose stdin and stdout stay open both ways while it runs: the channel of the model
 * gateway's relay (src/gateway/relay/) for environments that cannot reach the worker (a cloud sandbox). Text, not
 * bytes, because that is what every vendor's exec stream carries; the relay frames and encodes what it sends.
 */
export interface StreamedProcessRequest {
  command: string;
  env?: Record<string, string>;
  /** Each chunk of the process's stdout as it arrives, decoded as UTF-8, in order. */
  onStdout: (chunk: string) => void;
  /** Each chunk of its stderr (diagnostics, for the trial log). */
  onStderr?: (chunk: string) => void;
}

export interface StreamedProcess {
  /** Writes to the process's stdin; resolves once the environment has taken it. */
  write(data: string): Promise<void>;
  /** Resolves with the exit code when the process ends (null: killed, or the stream was lost). */
  readonly exited: Promise<number | null>;
  /** Ends the process (idempotent). */
  kill(): Promise<void>;
}

export interface Environment {
  readonly type: string;
  /**
   * True when a handle is only usable on the host that started it (a local Docker container): the trial's steps
   * then go to that host's own queue. False when any worker can reach it (a pod, through the cluster's API).
   */
  readonly hostBound: boolean;
  /** Checks that the environment's backend answers (e.g. the Docker daemon); throws a one-line reason if not. */
  ping(): Promise<void>;
  build(request: BuildRequest): Promise<BuildResult>;
  /**
   * `rollout build`: the environment's image built (or pulled) ahead of any job, where the provider builds it, owned
   * by no job (`delete: true` never removes it). `fresh`: it was not there before. Absent where nothing is built.
   */
  prebuild?(request: BuildRequest): Promise<{ image: string; fresh: boolean }>;
  /**
   * True where an image fixes the size of what starts from it (a Daytona snapshot): one image per environment and
   * size (BuildRequest.resources, gpus). Absent: one per environment, whatever the size.
   */
  readonly imagesBySize?: boolean;
  start(request: StartRequest): Promise<StartResult>;
  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult>;
  /**
   * A session step's command through a shell kept open in the environment (opened on first use, reopened after a
   * step killed it): no exec to set up per step. Its output (stdout and stderr as one) is cut at `outputLimitBytes`
   * + 1 in the environment. Null where no such shell can run (the step is then an exec); absent likewise.
   */
  runStep?(handle: EnvironmentHandle, step: ShellStep): Promise<ExecResult | null>;
  /**
   * Whether the environment still runs, asked of its backend without running anything in it (one API call, where an
   * exec costs several): the warm pool's check before hand-out. Absent: callers run `true` in it instead.
   */
  isRunning?(handle: EnvironmentHandle): Promise<boolean>;
  /**
   * Kills every process commands started in the environment, daemons and processes that left their process group
   * included (after the agent's step, so nothing of it runs during verification).
   */
  killAll(handle: EnvironmentHandle): Promise<void>;
  /**
   * What killAll runs, as a shell command, where it is one: a root exec may start with it, and a step saves the
   * exec killAll would cost. Absent where killAll is not a command in the environment (local).
   */
  readonly killAllCommand?: string;
  /**
   * Copies a host file or folder to `containerPath` (a folder's contents land inside containerPath), or to each of
   * several container paths in one transfer.
   */
  upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void>;
  /**
   * Copies the contents of `containerPath` into `hostDir`. Only regular files and folders are written; links are
   * skipped and nothing is written outside hostDir. With a budget, nothing is written once a limit is reached.
   */
  download(handle: EnvironmentHandle, containerPath: string, hostDir: string, budget?: CollectBudget): Promise<void>;
  /**
   * Downloads some folders of `containerPath`, each into hostDir/<name> (as `download` of each would), in one
   * transfer. False when it gave up (see FolderSelection): then nothing is complete, and each is to be downloaded.
   * Absent where one transfer is not cheaper.
   */
  downloadFolders?(
    handle: EnvironmentHandle,
    containerPath: string,
    selection: FolderSelection,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<boolean>;
  stop(handle: EnvironmentHandle): Promise<void>;
  /**
   * True when stop() removes the environment (a cloud sandbox: a stopped one is still billed): the trial's sandbox
   * record then says it is gone, and clean-up need not list the trial's sandboxes again.
   */
  readonly stopRemoves?: boolean;
  /**
   * Stops the environment but keeps it (Harbor's stop_service of main): nothing runs in it any more, and files can
   * still be copied in and out until stop() or remove(). Optional: an environment without it is left running.
   */
  halt?(handle: EnvironmentHandle): Promise<void>;
  /** Removes the environment; idempotent (a missing one is not an error). */
  remove(handle: EnvironmentHandle): Promise<void>;
  /** Removes everything this host and deployment still hold for a trial (by label); returns how many were removed. */
  removeTrial(trialId: string, settings?: ProviderSettings): Promise<number>;
  /**
   * What this host and deployment still hold (by label), so a janitor can clean up after crashes and lost hosts; on a
   * backend several hosts share, other hosts' too (marked `elsewhere`).
   */
  heldEnvironments(): Promise<HeldEnvironment[]>;
  /**
   * Releases a job's reference to an image (a `built` build result); the image (and its install snapshots) goes with
   * the last reference of the job that built it. Idempotent; false while a container still uses the image.
   */
  removeImage(image: string): Promise<boolean>;
  /**
   * The container of another service of a multi-container environment (docker-compose), to exec in or copy from;
   * absent where environments have a single container.
   */
  service?(handle: EnvironmentHandle, name: string): Promise<EnvironmentHandle>;
  /**
   * Connects the environment to the network or cuts it off (only loopback left), for a phase whose task.toml
   * network_mode differs from the baseline. Absent where the network cannot be changed (local: the host's own).
   */
  setNetwork?(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void>;
  /** Absent where environments cannot be snapshotted (local): agents then install in every trial. */
  readonly snapshots?: InstallSnapshots;
  /**
   * The address at which processes in this environment reach this host (where the model gateway listens); the
   * gateway binds only there, never on all interfaces. Absent: loopback (the environment is the host itself).
   */
  gatewayHost?(): Promise<string>;
  /**
   * Starts a process in the environment with stdin and stdout streamed while it runs (see StreamedProcess): how the
   * gateway relay reaches an environment that cannot reach this host. Absent where `gatewayHost` serves instead.
   */
  openProcess?(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess>;
}

/**
 * An error of the task itself (its Dockerfile fails to build) or of what ran in the environment (an agent deleted
 * /bin): not retried, recorded as the trial's error.
 */
export class TaskEnvironmentError extends Error {
  constructor(
    readonly type: 'EnvironmentBuildError' | 'EnvironmentStartError' | 'EnvironmentBrokenError',
    message: string
  ) {
    super(message);
    this.name = type;
  }
}

/** Only these folders of an archive are extracted; the others' bytes, up to maxSkippedBytes, are read past. */
export interface FolderSelection {
  folders: readonly string[];
  maxSkippedBytes: number;
}

/** What collect may still copy to the host (src/environments/host-files.ts counts it): each entry is admitted or not. */
export interface CollectBudget {
  admit(name: string, size: number, kind?: 'file' | 'folder'): boolean;
  readonly exhausted: boolean;
  report(): CollectReport;
}
