/**
 * Harbor's artifacts and collect hooks, host side: after the agent ran, [[verifier.collect]] commands snapshot state
 * in the environment's services, then each artifact (and the agent's /logs/artifacts, Harbor's convention) is copied
 * into the trial's artifacts/ folder (mirroring its source path, or at its destination); a separate verifier's
 * environment gets each back at its source path, and nothing else of the agent's environment.
 */
import { copyFile, mkdtemp, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { ifPresent } from '../files/absent';
import { shellQuote } from '../shell';
import type { Environment } from '../contracts/environment';
import type { CollectBudget } from '../environments/host-files';
import type { ArtifactEntry, TaskConfig } from '../contracts/task-config';
import type { EnvironmentHandle } from '../contracts/trial';
import { CONTAINER_PATHS } from '../contracts/paths';

/** Where agents publish files for the verifier, collected whether declared or not (Harbor's convention). */
export const ARTIFACTS_CONVENTION_DIR = CONTAINER_PATHS.artifacts;

/** The main service's name: the trial's container. */
const MAIN = 'main';

/** An artifact copied to the host: where it came from and where it now is. */
export interface CollectedArtifact {
  source: string;
  hostPath: string;
}

export interface ArtifactCollection {
  hooks: TaskConfig['verifier']['collect'];
  entries: ArtifactEntry[];
  hostDir: string;
  budget: CollectBudget;
  signal: AbortSignal;
  report: (message: string) => Promise<void>;
  /**
   * Run between the main service's pass and the sidecars' (only when there is a sidecar pass): a separate verifier's
   * trial stops main there, as Harbor does, so nothing the agent left can touch the sidecars' evidence.
   */
  beforeSidecars?: () => Promise<void>;
}

/**
 * Harbor's collection pass: the main service's collect hooks, then its artifacts (the convention folder
 * /logs/artifacts always, unless an entry declares it), then the sidecars' hooks and artifacts. Returns what was
 * copied into hostDir (mirroring each source path, or at its destination).
 */
export async function collectArtifacts(
  environment: Environment,
  handle: EnvironmentHandle,
  collection: ArtifactCollection
): Promise<CollectedArtifact[]> {
  const onMain = (service: string | null | undefined) => (service ?? MAIN) === MAIN;
  const declaresConvention = collection.entries.some(
    (entry) => onMain(entry.service) && entry.source.replace(/\/+$/, '') === ARTIFACTS_CONVENTION_DIR
  );
  const entries = declaresConvention
    ? collection.entries
    : [{ source: ARTIFACTS_CONVENTION_DIR, exclude: [] }, ...collection.entries];
  const collected: CollectedArtifact[] = [];
  const pass = async (main: boolean) => {
    await runCollectHooks(environment, handle, collection, (hook) => onMain(hook.service) === main);
    for (const entry of entries.filter((e) => onMain(e.service) === main)) {
      const copied = await collectArtifact(environment, handle, entry, collection);
      if (copied) collected.push(copied);
    }
  };
  await pass(true);
  const sidecars = [...collection.hooks, ...entries].some((item) => !onMain(item.service));
  if (!sidecars) return collected;
  await collection.beforeSidecars?.();
  await pass(false);
  return collected;
}

/** Runs the chosen collect hooks in their services; a failing hook is reported (in trial.log), not fatal. */
async function runCollectHooks(
  environment: Environment,
  handle: EnvironmentHandle,
  { hooks, signal, report }: ArtifactCollection,
  chosen: (hook: ArtifactCollection['hooks'][number]) => boolean
): Promise<void> {
  for (const hook of hooks.filter(chosen)) {
    const target = await serviceHandle(environment, handle, hook.service);
    const run = await environment.exec(target, {
      command: hook.command,
      user: hook.user === null || hook.user === undefined ? undefined : String(hook.user),
      timeoutMs: hook.timeout_sec * 1000,
      signal,
    });
    const outcome = run.timedOut ? `timed out after ${hook.timeout_sec} s` : `exit ${run.exitCode}`;
    await report(`collect hook in ${hook.service}: ${outcome}${run.exitCode ? `: ${run.stderr.trim()}` : ''}`);
  }
}

/**
 * One artifact into the host folder, when it exists. A folder with `exclude` patterns is first copied inside its
 * service through `tar --exclude` (Harbor's meaning of the patterns) into a scratch folder, which is then downloaded.
 */
async function collectArtifact(
  environment: Environment,
  handle: EnvironmentHandle,
  entry: ArtifactEntry,
  { hostDir, budget, report }: ArtifactCollection
): Promise<CollectedArtifact | null> {
  const from = await serviceHandle(environment, handle, entry.service ?? MAIN);
  const hostPath = path.join(hostDir, relativeHostPath(entry.destination ?? entry.source));
  if (entry.source === ARTIFACTS_CONVENTION_DIR && !entry.exclude.length && !entry.destination) {
    // A folder when it exists: no probe, one transfer (every trial collects it); a missing one writes nothing.
    await environment.download(from, entry.source, hostPath, budget);
    return (await ifPresent(stat(hostPath))) ? { source: entry.source, hostPath } : null;
  }
  const source = shellQuote(entry.source);
  const excludes = entry.exclude.map((pattern) => shellQuote(`--exclude=${pattern}`)).join(' ');
  const stage = excludes
    ? `d=$(mktemp -d) && tar -C ${source} -cf - ${excludes} . | tar -C "$d" -xf - && echo "dir $d"`
    : 'echo dir';
  const probe = await environment.exec(from, {
    command: `if [ -d ${source} ]; then ${stage}; elif [ -e ${source} ]; then echo file; fi`,
    user: '0',
  });
  if (probe.exitCode !== 0) {
    // Best effort, as Harbor's: the trial goes on without it.
    await report(`artifact ${entry.source}: not collected: ${(probe.stderr || probe.stdout).trim()}`);
    return null;
  }
  const [kind, staged] = probe.stdout.trim().split(' ');
  if (kind !== 'dir' && kind !== 'file') return null;
  // A folder's contents land in the target folder; a file lands inside its parent under its own name, except at the
  // artifacts folder itself (a destination of `/` or `.`), whose parent is the trial folder: there it lands inside,
  // under its own name, never beside the trial's own files (sandboxes.jsonl, trial.log, result.json).
  const atRoot = hostPath === hostDir;
  const into = kind === 'dir' || atRoot ? hostPath : path.dirname(hostPath);
  try {
    await environment.download(from, staged ?? entry.source, into, budget);
  } finally {
    if (staged) await environment.exec(from, { command: `rm -rf ${shellQuote(staged)}`, user: '0' });
  }
  if (kind === 'file' && !atRoot && path.basename(hostPath) !== path.posix.basename(entry.source)) {
    // Renamed by its destination: download wrote it under its source name.
    await rename(path.join(into, path.posix.basename(entry.source)), hostPath);
  }
  return {
    source: entry.source,
    hostPath: atRoot && kind === 'file' ? path.join(into, path.posix.basename(entry.source)) : hostPath,
  };
}

/** Puts each collected artifact into another environment at its source path (parents created). */
export async function placeArtifacts(
  environment: Environment,
  handle: EnvironmentHandle,
  collected: CollectedArtifact[]
): Promise<void> {
  for (const { source, hostPath } of collected) {
    const isDir = (await ifPresent(stat(hostPath)))?.isDirectory();
    if (isDir === undefined) continue;
    if (isDir) {
      await environment.upload(handle, hostPath, source);
      continue;
    }
    // A file lands under its own name: under its source's name, whatever its destination on the host.
    const dir = await mkdtemp(path.join(tmpdir(), 'rollout-artifact-'));
    try {
      const named = path.join(dir, path.posix.basename(source));
      await copyFile(hostPath, named);
      await environment.upload(handle, named, path.posix.dirname(source));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
}

function serviceHandle(environment: Environment, handle: EnvironmentHandle, service: string) {
  if (service === 'main') return Promise.resolve(handle);
  if (!environment.service) {
    throw new Error(`service ${service}: the ${environment.type} environment has no services besides main`);
  }
  return environment.service(handle, service);
}

/** A container path (or a destination) as a path under the trial's artifacts folder: never outside it. */
function relativeHostPath(containerPath: string): string {
  const parts = containerPath.split('/').filter((part) => part && part !== '.' && part !== '..');
  return path.join(...(parts.length ? parts : ['.']));
}
