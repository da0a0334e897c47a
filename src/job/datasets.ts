import { isDeepStrictEqual } from 'node:util';

import type { Problem } from '../contracts/errors';
import { InputError } from '../contracts/errors';
import type { PinnedTask } from '../contracts/registry';
import { fetchTasks, pinTasks } from '../registry/git-cache';
import { findDataset, readRegistry, registryLabel } from '../registry/load';
import type { EnvironmentRequirement } from '../contracts/provider';
import type { Task } from '../task/load';
import { loadTask } from '../task/load';
import { loadLocalDataset, unmatchedProblems } from './local-dataset';
import type { ResolvedJob } from './load';
import type { DatasetConfig, RegistryDatasetConfig } from '../contracts/job-config';
import { selectTasks } from './select';

export interface LoadedDataset {
  name: string;
  tasks: Task[];
}

export interface DatasetOptions {
  requirement?: EnvironmentRequirement;
  /** The job as an earlier run saved it: its pinned registry tasks are reused, so HEAD is resolved only once. */
  previous?: ResolvedJob;
  log?: (line: string) => void;
}

/**
 * Every dataset of a job, as validated tasks: local folders read in place, registry datasets pinned to full commits
 * and fetched into the task cache. Returns the job with its registry datasets' `pinned_tasks` filled in, which is
 * what config.json must keep.
 */
export async function loadJobDatasets(
  job: ResolvedJob,
  options: DatasetOptions = {}
): Promise<{ job: ResolvedJob; datasets: LoadedDataset[]; warnings: string[] }> {
  const log = options.log ?? ((line: string) => console.error(`[datasets] ${line}`));
  const file = job.file;
  const problems: Problem[] = [];
  const warnings: string[] = [];
  const datasets: LoadedDataset[] = [];
  const configs: DatasetConfig[] = [];
  for (const [index, dataset] of job.datasets.entries()) {
    const field = `datasets.${index}`;
    if ('path' in dataset) {
      const loaded = await loadLocalDataset(dataset, { file, field }, options.requirement);
      problems.push(...loaded.problems);
      warnings.push(...loaded.warnings);
      datasets.push({ name: loaded.name, tasks: loaded.tasks });
      configs.push(dataset);
      continue;
    }
    const pinned =
      dataset.pinned_tasks ?? previousPins(options.previous, dataset) ?? (await pinDataset(dataset, file, field, log));
    if (!Array.isArray(pinned)) {
      problems.push(pinned);
      configs.push(dataset);
      continue;
    }
    const name = dataset.version ? `${dataset.name}@${dataset.version}` : dataset.name;
    const dirs = await fetchTasks(name, pinned, log);
    const loads = await Promise.all(
      pinned.map(async (task) => {
        const load = await loadTask(dirs.get(task) as string, options.requirement);
        return load.task
          ? { ...load, task: { ...load.task, name: task.name, source: { ...task, dataset: name } } }
          : load;
      })
    );
    problems.push(...loads.flatMap((load) => load.problems));
    datasets.push({ name, tasks: loads.flatMap((load) => (load.task ? [load.task] : [])) });
    configs.push({ ...dataset, pinned_tasks: pinned });
  }
  if (problems.length > 0) throw new InputError(problems);
  return { job: { ...job, datasets: configs }, datasets, warnings };
}

/** The registry's tasks for this entry, selected, each at a full commit. */
async function pinDataset(
  dataset: RegistryDatasetConfig,
  file: string,
  field: string,
  log: (line: string) => void
): Promise<PinnedTask[] | Problem> {
  const registry = await readRegistry(dataset.registry);
  const found = findDataset(registry, dataset, { file, field });
  if (!('tasks' in found)) return found;
  const selected = selectTasks(found.tasks, dataset);
  const [unmatched] = unmatchedProblems({ file, field }, selected.unmatched, `${found.name}@${found.version}`);
  if (unmatched) return unmatched;
  if (selected.tasks.length === 0) {
    return {
      file,
      field,
      message: `no tasks selected from ${found.name}@${found.version} (${registryLabel(dataset.registry)})`,
    };
  }
  return pinTasks(`${found.name}@${found.version}`, selected.tasks, log);
}

/** The pins an earlier run of this job saved for the same dataset entry, if any. */
function previousPins(previous: ResolvedJob | undefined, dataset: RegistryDatasetConfig): PinnedTask[] | undefined {
  const same = previous?.datasets.find(
    (earlier): earlier is RegistryDatasetConfig =>
      !('path' in earlier) &&
      isDeepStrictEqual({ ...earlier, pinned_tasks: undefined }, { ...dataset, pinned_tasks: undefined })
  );
  return same?.pinned_tasks;
}
