/**
 * A trial folder of a job in an object store: written on the host that runs the trial (its working folder), then
 * uploaded so that readers see it complete or not at all. result.json is the folder's commit mark: it is removed
 * before the folder's files change and put back last, and every reader takes a trial folder without it for absent.
 */
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent, isDirectory } from '../files/absent';
import { childFolder, keyPath } from '../files/inside';
import { isStoreUrl } from './location';
import { jobStore } from './job-folder';
import { safeKeys } from './safe-keys';
import { workingJobDir } from './working-dir';
import { TRIAL_FILES } from '../contracts/paths';

/** Files uploaded at once: enough to hide per-request latency, few enough for a small worker. */
const UPLOADS_IN_FLIGHT = 8;

/** The files under `dir`, as '/'-separated paths relative to it (temporary files of atomic writes left out). */
export async function filesUnder(dir: string): Promise<string[]> {
  const entries = (await ifPresent(readdir(dir, { recursive: true, withFileTypes: true }))) ?? [];
  return entries
    .filter((entry) => entry.isFile() && !entry.name.endsWith('.tmp'))
    .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)).split(path.sep).join('/'))
    .sort();
}

/** This host's folder of a trial; a name that is not a folder name (from a tampered plan) is refused. */
function localTrialDir(jobDir: string, trialName: string): string {
  const dir = childFolder(workingJobDir(jobDir), trialName);
  if (dir === undefined)
    throw new Error(`${jobDir}: trial name ${JSON.stringify(trialName)} refused: not a folder name`);
  return dir;
}

/** Runs `work` over `items`, `limit` at a time. */
export async function eachLimited<T>(items: T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await work(items[next++]!);
  });
  await Promise.all(lanes);
}

/**
 * Uploads what the trial's folder holds on this host (everything but result.json), streamed, multipart for large
 * files; then removes what an earlier, interrupted upload of the same trial left in the store. Until result.json
 * follows (commitTrialFolder), readers take the folder for absent.
 */
/** Trial folders this process uploaded (by working path): their commit adds only what changed since. */
const uploadedHere = new Set<string>();

export async function uploadTrialFolder(jobDir: string, trialName: string): Promise<{ files: number }> {
  const store = await jobStore(jobDir);
  const local = localTrialDir(jobDir, trialName);
  const files = (await filesUnder(local)).filter((file) => file !== TRIAL_FILES.result);
  await store.remove([`${trialName}/${TRIAL_FILES.result}`]);
  await eachLimited(files, UPLOADS_IN_FLIGHT, (file) => store.upload(`${trialName}/${file}`, path.join(local, file)));
  const uploaded = new Set(files.map((file) => `${trialName}/${file}`));
  const strays = (await store.list(`${trialName}/`)).filter((entry) => !uploaded.has(entry.key));
  await store.remove(strays.map((entry) => entry.key));
  uploadedHere.add(local);
  return { files: files.length };
}

/**
 * On a host that does not hold the trial's folder (its own host is gone): what the upload put in the store, fetched
 * into this host's working folder, so its result is written over the same files.
 */
export async function restoreTrialFolder(jobDir: string, trialName: string): Promise<void> {
  const local = localTrialDir(jobDir, trialName);
  if (!isStoreUrl(jobDir) || (await isDirectory(local))) return;
  const store = await jobStore(jobDir);
  uploadedHere.add(local);
  const stored = safeKeys(jobDir, await store.list(`${trialName}/`));
  await eachLimited(stored, UPLOADS_IN_FLIGHT, async (entry) => {
    await store.download(entry.key, keyPath(local, entry.key.slice(trialName.length + 1)));
  });
}

/**
 * The trial's last files (`changed`, relative to its folder, as written with its result; the whole folder when it
 * was not uploaded yet: a cancelled trial), then result.json, which completes the folder in the store; this host's
 * copy is then removed (nothing of it is needed any more).
 */
export async function commitTrialFolder(jobDir: string, trialName: string, changed: string[]): Promise<void> {
  const store = await jobStore(jobDir);
  const local = localTrialDir(jobDir, trialName);
  if (uploadedHere.has(local)) {
    const present = new Set(await filesUnder(local));
    const files = changed.filter((file) => present.has(file) && file !== TRIAL_FILES.result);
    await eachLimited(files, UPLOADS_IN_FLIGHT, (file) => store.upload(`${trialName}/${file}`, path.join(local, file)));
  } else {
    await uploadTrialFolder(jobDir, trialName);
  }
  await store.upload(`${trialName}/${TRIAL_FILES.result}`, path.join(local, TRIAL_FILES.result));
  uploadedHere.delete(local);
  await rm(local, { recursive: true, force: true });
}
