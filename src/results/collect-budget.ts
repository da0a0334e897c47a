/**
 * The collect limits (job.yaml `environment.collect_max_bytes`, `collect_max_files`) are per trial: a task of 100
 * steps gets no more of the host's disk than a task of one. Each download into a trial folder is charged with what
 * earlier steps (and activities, perhaps on another worker) already brought there.
 */
import { lstat, readdir } from 'node:fs/promises';
import path from 'node:path';

import { CollectBudget } from '../environments/host-files';
import type { CollectLimits } from '../contracts/trial';
import { LOG_FOLDERS, trialLayout } from '../contracts/paths';

/** A trial folder's folders that hold what came out of its environment: logs and artifacts, of every step. */
const COLLECTED_FOLDERS = [...LOG_FOLDERS, 'artifacts', 'steps'];

/**
 * A budget for a download into `trialDir`, charged with everything collected there so far but the folders this
 * download replaces (a retried step writes them again) and the gateway's own call records.
 */
export async function trialCollectBudget(
  trialDir: string,
  limits: CollectLimits,
  replacing: readonly string[]
): Promise<CollectBudget> {
  const skipped = new Set([...replacing.map((dir) => path.resolve(dir)), trialLayout(trialDir).llmCalls]);
  const spent = { entries: 0, bytes: 0 };
  const walk = async (entry: string): Promise<void> => {
    if (skipped.has(entry)) return;
    const info = await lstat(entry).catch(absent);
    if (!info) return;
    spent.entries += 1;
    if (info.isFile()) spent.bytes += info.size;
    if (!info.isDirectory()) return;
    for (const name of await readdir(entry)) await walk(path.join(entry, name));
  };
  for (const folder of COLLECTED_FOLDERS) {
    const dir = path.join(path.resolve(trialDir), folder);
    // The top folders themselves are Rollout's, not the environment's.
    if (skipped.has(dir)) continue;
    for (const name of (await readdir(dir).catch(absent)) ?? []) await walk(path.join(dir, name));
  }
  return new CollectBudget(limits, spent);
}

function absent(err: NodeJS.ErrnoException): undefined {
  if (err.code === 'ENOENT') return undefined;
  throw err;
}
