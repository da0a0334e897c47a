import { constants } from 'node:fs';
import { copyFile, lstat, mkdir, mkdtemp, readFile, readdir, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import type { EnvironmentHandle } from '../../contracts/trial';
import type {
  BuildResult,
  Environment,
  EnvironmentOwner,
  ExecRequest,
  ExecResult,
  StartRequest,
  StartResult,
} from '../../contracts/environment';
import { INSTRUCTION_FILE } from '../../contracts/environment';
import type { CollectBudget } from '../host-files';
import { makeRealDirectory } from '../host-files';
import { ifPresent } from '../../files/absent';
import { killProcess, runCommand } from './exec';

/** Container paths a local environment maps into its root folder. */
const MAPPED_PATHS = ['/logs', '/tests', '/oracle', '/solution', '/installed-agent', '/app', '/rollout'];
const ROOT_PREFIX = 'rollout-local-env-';
/** The environment variables of start(), kept in the root for every later exec (as a container keeps its Env). */
const START_ENV_FILE = 'start-env.json';
/**
 * What a command gets of the worker's own environment: enough to find programs and a home folder, nothing else (no
 * credentials the worker holds). Everything else a command sees it was given: start env, Rollout's paths, its own.
 */
const HOST_VARIABLES = ['PATH', 'HOME', 'LANG', 'TMPDIR'];

/**
 * Runs a trial's steps as host processes in a temporary folder: no isolation, no resource limits. For smoke tests and
 * orchestration benchmarks (ExecRequest.user is ignored). Nothing in a command is rewritten: tasks and agents meant for the local environment
 * refer to $ROLLOUT_LOGS_DIR, $ROLLOUT_TESTS_DIR, $ROLLOUT_ORACLE_DIR, $ROLLOUT_AGENT_DIR and $ROLLOUT_APP_DIR (or
 * $ROLLOUT_ROOT) instead of /logs, /tests, /oracle, /installed-agent and /app. Rollout's own paths (exec cwd, upload
 * and download) are mapped by mapContainerPath.
 */
export class LocalEnvironment implements Environment {
  readonly type = 'local';
  readonly hostBound = true;

  constructor(private readonly owner: EnvironmentOwner) {}

  /** Roots are named after the deployment and trial: another deployment's trial of the same id is not this one. */
  private rootPrefix(trialId: string): string {
    return `${ROOT_PREFIX}${this.owner.deployment}-${trialTag(trialId)}-`;
  }

  ping(): Promise<void> {
    return Promise.resolve();
  }

  build(): Promise<BuildResult> {
    return Promise.resolve({ image: 'local', built: false });
  }

  async start(request: StartRequest): Promise<StartResult> {
    const root = await mkdtemp(path.join(tmpdir(), this.rootPrefix(request.trialId)));
    for (const dir of ['logs/agent', 'logs/verifier', 'app']) await mkdir(path.join(root, dir), { recursive: true });
    await writeFile(path.join(root, START_ENV_FILE), JSON.stringify(request.env));
    const handle = { id: root, workdir: path.join(root, 'app') };
    for (const file of request.files ?? []) {
      const target = mapContainerPath(root, file.containerPath);
      await mkdir(path.dirname(target), { recursive: true });
      if ('text' in file) await writeFile(target, file.text, { mode: 0o644 });
      else await copyFile(file.hostPath, target);
    }
    if (request.setup) {
      const setup = await this.exec(handle, { command: request.setup });
      if (setup.exitCode !== 0) throw new Error(`${request.setup} failed: ${setup.stderr}`);
    }
    // The host's own processes: no limits, the host's network and GPUs, and the worker's user.
    const unenforced = ['cpus', 'memory', 'storage', 'pids'];
    if (request.network === 'none') unenforced.push('network');
    if (request.gpus) unenforced.push('gpus');
    if (request.users?.length) unenforced.push('user');
    return { handle, unenforced };
  }

  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const root = handle.id;
    const startEnv = JSON.parse(await readFile(path.join(root, START_ENV_FILE), 'utf8')) as Record<string, string>;
    const { outcome, stdout, stderr } = await runCommand(
      {
        command: request.command,
        cwd: request.cwd ? mapContainerPath(root, request.cwd) : handle.workdir,
        env: { ...hostVariables(), ...startEnv, ...localVariables(root), ...request.env },
        timeoutMs: request.timeoutMs,
      },
      request.signal
    );
    if (outcome === 'aborted') throw request.signal?.reason;
    const exitCode = outcome === 'timedOut' ? null : outcome;
    return { exitCode, stdout, stderr, timedOut: outcome === 'timedOut' };
  }

  /**
   * Kills every process that still carries this root's ROLLOUT_ROOT: what commands started, including processes
   * that left their process group (setsid, daemons). A process that cleared its environment escapes: the local
   * environment isolates nothing.
   */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    const marker = `\0ROLLOUT_ROOT=${handle.id}\0`;
    for (const pid of (await readdir('/proc')).filter((name) => /^\d+$/.test(name))) {
      const environ = await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '');
      if (`\0${environ}`.includes(marker)) killProcess(Number(pid));
    }
  }

  /** A folder's contents land inside containerPath; a single file lands as containerPath/<its name>. */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const source = await realpath(hostPath); // Rollout's own path: a link to it is fine
    for (const target of typeof containerPath === 'string' ? [containerPath] : containerPath) {
      const mapped = mapContainerPath(handle.id, target);
      await mkdir(mapped, { recursive: true });
      await copyRegular(source, mapped);
    }
  }

  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const source = mapContainerPath(handle.id, containerPath);
    if (!(await ifPresent(lstat(source)))) return;
    await mkdir(hostDir, { recursive: true });
    await copyRegular(source, hostDir, budget);
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    await rm(handle.id, { recursive: true, force: true });
  }

  async removeTrial(trialId: string): Promise<number> {
    const prefix = this.rootPrefix(trialId);
    const roots = (await readdir(tmpdir())).filter((name) => name.startsWith(prefix));
    await Promise.all(roots.map((name) => rm(path.join(tmpdir(), name), { recursive: true, force: true })));
    return roots.length;
  }

  /** Local roots are temporary folders named after a shortened trial id: nothing to reclaim by id. */
  heldEnvironments(): Promise<[]> {
    return Promise.resolve([]);
  }

  removeImage(): Promise<boolean> {
    return Promise.resolve(true);
  }
}

/**
 * Where a container path lives on the host for a local environment rooted at `root`: /logs, /tests, /oracle,
 * /installed-agent and /app (and paths below them) map to the same path under root; other paths are the host's own.
 */
export function mapContainerPath(root: string, containerPath: string): string {
  const normalised = path.posix.normalize(containerPath);
  const mapped = MAPPED_PATHS.some((prefix) => normalised === prefix || normalised.startsWith(`${prefix}/`));
  return mapped ? path.join(root, normalised) : containerPath;
}

function localVariables(root: string): Record<string, string> {
  return {
    ROLLOUT_ROOT: root,
    ROLLOUT_LOGS_DIR: path.join(root, 'logs'),
    ROLLOUT_TESTS_DIR: path.join(root, 'tests'),
    ROLLOUT_ORACLE_DIR: path.join(root, 'oracle'),
    ROLLOUT_AGENT_DIR: path.join(root, 'installed-agent'),
    ROLLOUT_APP_DIR: path.join(root, 'app'),
    ROLLOUT_TASK_INSTRUCTION_FILE: mapContainerPath(root, INSTRUCTION_FILE),
  };
}

function hostVariables(): Record<string, string> {
  return Object.fromEntries(HOST_VARIABLES.flatMap((name) => (process.env[name] ? [[name, process.env[name]]] : [])));
}

/**
 * Copies a file (as target/<its name>) or a folder's contents into target. As with a container's files, only regular
 * files and folders are copied and links on either side are never followed, so nothing lands outside target.
 */
async function copyRegular(source: string, target: string, budget?: CollectBudget): Promise<void> {
  const info = await lstat(source);
  const name = path.basename(source);
  if (info.isFile() && (!budget || budget.admit(name, info.size, 'file'))) {
    await copyFresh(source, path.join(target, name));
  } else if (info.isDirectory()) {
    await copyFolder(source, target, budget, name);
  }
}

/** A folder's contents into target, within the budget; `reportAs` names the folder in the budget's report. */
async function copyFolder(source: string, target: string, budget?: CollectBudget, reportAs = ''): Promise<void> {
  for (const entry of await readdir(source, { withFileTypes: true })) {
    if (budget?.exhausted) return;
    const from = path.join(source, entry.name);
    const to = path.join(target, entry.name);
    const name = path.join(reportAs, entry.name);
    if (entry.isDirectory()) {
      if (budget && !budget.admit(name, 0, 'folder')) return;
      await makeRealDirectory(target, to);
      await copyFolder(from, to, budget, name);
    } else if (entry.isFile()) {
      if (budget && !budget.admit(name, (await lstat(from)).size, 'file')) return;
      await copyFresh(from, to);
    }
  }
}

/** A new file at `to` (whatever was there removed first), with the source's mode; an existing link is not followed. */
async function copyFresh(from: string, to: string): Promise<void> {
  await rm(to, { recursive: true, force: true });
  await copyFile(from, to, constants.COPYFILE_EXCL);
}

function trialTag(trialId: string): string {
  return trialId.replace(/[^A-Za-z0-9._-]/g, '_').slice(-80);
}
