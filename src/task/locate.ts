import { isDirectory } from '../files/absent';
import { fetchTaskArchive } from './archives';
import type { TrialSpec } from '../contracts/trial';
import { cachedTaskDir, fetchTasks } from '../registry/git-cache';

/** Downloads under way in this process, by cache folder: trials of one task on this host fetch it once. */
const fetching = new Map<string, Promise<string>>();

/**
 * The trial's task folder on this host. A registry task was downloaded into the cache of the host that planned the
 * job; a worker on another host (another cache) fetches it itself from its pinned coordinates, with the cache's rules
 * (a temporary folder renamed into place, re-used offline). A local dataset's task is used where it is, or, for a job
 * in an object store, fetched from there by its digest.
 */
export async function trialTaskDir(
  spec: Pick<TrialSpec, 'taskDir' | 'taskSource' | 'taskArchive'>,
  log: (line: string) => Promise<void>
): Promise<string> {
  if (spec.taskArchive) return fetchTaskArchive(spec.taskArchive);
  const source = spec.taskSource;
  if (!source) return spec.taskDir;
  const dir = cachedTaskDir(source);
  if (await isDirectory(dir)) return dir;
  let pending = fetching.get(dir);
  if (!pending) {
    const lines: Promise<void>[] = [];
    pending = fetchTasks(source.dataset, [source], (line) => lines.push(log(`${line} (into this host's cache)`)))
      .then(async (dirs) => {
        await Promise.all(lines);
        return dirs.get(source) ?? dir;
      })
      .finally(() => fetching.delete(dir));
    fetching.set(dir, pending);
  }
  return pending;
}
