import { minimatch } from 'minimatch';

/** Harbor's per-dataset task selection: include and exclude globs, then at most n tasks, sampled when seeded. */
export interface TaskSelection {
  task_names?: string[];
  exclude_task_names?: string[];
  n_tasks?: number;
  sample_seed?: number;
}

/**
 * The tasks a dataset entry selects, in the dataset's order (or the seeded sample's order). An include glob that
 * matches no task is reported: it is almost always a typo.
 */
export function selectTasks<T extends { name: string }>(
  tasks: T[],
  selection: TaskSelection
): { tasks: T[]; unmatched: string[] } {
  const matches = (name: string, glob: string) => minimatch(name, glob, { dot: true });
  const include = selection.task_names;
  const unmatched = (include ?? []).filter((glob) => !tasks.some((task) => matches(task.name, glob)));
  let selected = tasks.filter(
    (task) =>
      (!include || include.some((glob) => matches(task.name, glob))) &&
      !(selection.exclude_task_names ?? []).some((glob) => matches(task.name, glob))
  );
  if (selection.sample_seed !== undefined) selected = seededShuffle(selected, selection.sample_seed);
  if (selection.n_tasks !== undefined) selected = selected.slice(0, selection.n_tasks);
  return { tasks: selected, unmatched };
}

/** Fisher–Yates with mulberry32: the same seed picks the same tasks on every machine and every run. */
function seededShuffle<T>(items: T[], seed: number): T[] {
  let state = seed >>> 0;
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const shuffled = [...items];
  for (let i = shuffled.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [shuffled[i], shuffled[j]] = [shuffled[j] as T, shuffled[i] as T];
  }
  return shuffled;
}
