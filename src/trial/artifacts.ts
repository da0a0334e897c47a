/**
 * Harbor's artifacts and collect hooks, host side: after the agent ran, [[verifier.collect]] commands snapshot state
 * in the environment's services, then each artifact (and the agent's /logs/artifacts, Harbor's convention) is copied
 * into the trial's artifacts/ folder (mirroring its source path, or at its destination); a separate verifier's
 * environment gets each back at its source path, and nothing else of the agent's environment.
 */
import { copyFile, mkdtemp, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { shellQuote } from '../agents/builtin';
import type { Environment } from '../environments/environment';
import type { CollectBudget } from '../environments/host-files';
import type { ArtifactEntry, TaskConfig } from '../task/schema';
import type { EnvironmentHandle } from './types';

/** Where agents publish files for the verifier, collected whether declared or not (Harbor's convention). */
export const ARTIFACTS_CONVENTION_DIR = '/logs/artifacts';

/** An artifact copied to the host: where it came from and where it now is. */
export interface CollectedArtifact {
  source: string;
  hostPath: string;
}

/** Runs the collect hooks in their services; a failing hook is reported (in the result), not fatal. */
export async function runCollectHooks(
  environment: Environment,
  handle: EnvironmentHandle,
  hooks: TaskConfig['verifier']['collect'],
  signal: AbortSignal,
  report: (message: string) => Promise<void>
): Promise<void> {
  for (const hook of hooks) {
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

/** Copies the convention folder and every declared artifact that exists into hostDir; returns what was copied. */
export async function collectArtifacts(
  environment: Environment,
  handle: EnvironmentHandle,
  entries: ArtifactEntry[],
  hostDir: string,
  budget: CollectBudget
): Promise<CollectedArtifact[]> {
  const collected: CollectedArtifact[] = [];
  const all = [{ source: ARTIFACTS_CONVENTION_DIR, exclude: [] }, ...entries];
  for (const entry of all) {
    const from = await serviceHandle(environment, handle, entry.service ?? 'main');
    const source = shellQuote(entry.source);
    const probe = await environment.exec(from, {
      command: `if [ -d ${source} ]; then echo dir; elif [ -e ${source} ]; then echo file; fi`,
      user: '0',
    });
    const kind = probe.stdout.trim();
    if (kind !== 'dir' && kind !== 'file') continue;
    const hostPath = path.join(hostDir, relativeHostPath(entry.destination ?? entry.source));
    // A folder's contents land in the target folder; a file lands inside its parent under its own name.
    const into = kind === 'dir' ? hostPath : path.dirname(hostPath);
    await environment.download(from, entry.source, into, budget);
    if (kind === 'file' && path.basename(hostPath) !== path.posix.basename(entry.source)) {
      // Renamed by its destination: download wrote it under its source name.
      await rename(path.join(into, path.posix.basename(entry.source)), hostPath);
    }
    collected.push({ source: entry.source, hostPath });
  }
  return collected;
}

/** Puts each collected artifact into another environment at its source path (parents created). */
export async function placeArtifacts(
  environment: Environment,
  handle: EnvironmentHandle,
  collected: CollectedArtifact[]
): Promise<void> {
  for (const { source, hostPath } of collected) {
    const isDir = (await stat(hostPath).catch(() => undefined))?.isDirectory();
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
