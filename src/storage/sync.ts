/**
 * Copies of jobs between a store and a local folder (`rollout pull`, `rollout push`, and the local copy the readers
 * of an s3:// job read). Only complete trial folders travel: a trial folder counts once its result.json is there
 * (src/storage/trial-folder.ts), so nothing half-written is ever copied, and result.json is put last.
 */
import { keyPath } from '../files/inside';
import { safeKeys } from './safe-keys';
import { readStoredJson, writeStoredJson } from './store';
import type { Store, StoredFile } from './store';
import { openStore } from './store';
import { eachLimited } from './trial-folder';
import { TRIAL_FILES } from '../contracts/paths';

/** What a local copy already holds, by key: the version each file was copied at. */
const INDEX_FILE = '.rollout-copied.json';
const TRANSFERS_IN_FLIGHT = 8;

/** Which files of a job a copy takes: all, or the job's own files and trial results (what status and the gate read). */
export type CopySelection = 'all' | 'results';

/**
 * The files of the jobs under a store root that are complete: a job is a folder holding config.json (the root
 * itself, or folders below it); its own files count, and a trial folder's once its result.json is there.
 */
export function completeFiles(files: StoredFile[], selection: CopySelection = 'all'): StoredFile[] {
  const keys = new Set(files.map((file) => file.key));
  const jobRoots = files
    .filter((file) => file.key === 'config.json' || file.key.endsWith('/config.json'))
    .map((file) => file.key.slice(0, -'config.json'.length))
    .sort((a, b) => b.length - a.length);
  return files.filter(({ key }) => {
    const root = jobRoots.find((candidate) => key.startsWith(candidate));
    if (root === undefined || key.endsWith('.tmp')) return false;
    const relative = key.slice(root.length);
    const slash = relative.indexOf('/');
    if (slash === -1) return !relative.startsWith('.');
    const trial = relative.slice(0, slash);
    if (trial.startsWith('.') || !keys.has(`${root}${trial}/${TRIAL_FILES.result}`)) return false;
    return selection === 'all' || relative === `${trial}/${TRIAL_FILES.result}`;
  });
}

/** result.json files after every other, deepest first: a folder is complete only once all its files are. */
function commitOrder(files: StoredFile[]): [StoredFile[], StoredFile[]] {
  const isCommit = (file: StoredFile) => file.key === TRIAL_FILES.result || file.key.endsWith(`/${TRIAL_FILES.result}`);
  const commits = files.filter(isCommit).sort((a, b) => b.key.split('/').length - a.key.split('/').length);
  return [files.filter((file) => !isCommit(file)), commits];
}

export interface CopyReport {
  files: number;
  bytes: number;
  /** Files already there at the same version, not copied again. */
  unchanged: number;
}

/**
 * Brings the complete files under `url` into `dir`, each file once per version (the copy keeps an index of what it
 * holds): run again, it fetches only what changed. Files are written through temporary files renamed into place.
 */
export async function pullFromStore(url: string, dir: string, selection: CopySelection = 'all'): Promise<CopyReport> {
  const [source, target] = await Promise.all([openStore(url), openStore(dir)]);
  const index = (await readStoredJson<Record<string, string>>(target, INDEX_FILE)) ?? {};
  const wanted = safeKeys(url, completeFiles(await source.list(''), selection));
  const report: CopyReport = { files: 0, bytes: 0, unchanged: 0 };
  const changed = wanted.filter((file) => index[file.key] !== file.version);
  report.unchanged = wanted.length - changed.length;
  const [files, commits] = commitOrder(changed);
  const fetch = async (file: StoredFile) => {
    if (await source.download(file.key, keyPath(dir, file.key))) {
      index[file.key] = file.version;
      report.files += 1;
      report.bytes += file.size;
    }
  };
  try {
    await eachLimited(files, TRANSFERS_IN_FLIGHT, fetch);
    for (const file of commits) await fetch(file);
  } finally {
    await writeStoredJson(target, INDEX_FILE, index);
  }
  return report;
}

/** Puts the complete jobs of a local folder (one job, or a jobs_dir) into the store at `url`, result.json files last. */
export async function pushToStore(dir: string, url: string): Promise<CopyReport> {
  const [source, target] = await Promise.all([openStore(dir), openStore(url)]);
  const wanted = completeFiles(await source.list(''));
  if (wanted.length === 0) throw new Error(`${dir}: no job folder here (no config.json)`);
  const report: CopyReport = { files: 0, bytes: 0, unchanged: 0 };
  const [files, commits] = commitOrder(wanted);
  const send = (store: Store) => async (file: StoredFile) => {
    await store.upload(file.key, keyPath(dir, file.key));
    report.files += 1;
    report.bytes += file.size;
  };
  await eachLimited(files, TRANSFERS_IN_FLIGHT, send(target));
  for (const file of commits) await send(target)(file);
  return report;
}
