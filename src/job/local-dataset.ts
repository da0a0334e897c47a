import path from 'node:path';

import type { Problem } from '../contracts/errors';
import type { EnvironmentRequirement } from '../contracts/provider';
import type { Task } from '../task/load';
import { listDataset, loadEntries } from '../task/load';
import type { TaskSelection } from './select';
import { selectTasks } from './select';

/**
 * A dataset folder as a job selects it: only the selected tasks are read and validated, so a broken task the job
 * does not run never blocks it. Unusable entries it does not select are at most one warning line.
 */
export async function loadLocalDataset(
  dataset: { path: string } & TaskSelection,
  where: { file: string; field: string },
  requirement?: EnvironmentRequirement
): Promise<{ name: string; tasks: Task[]; problems: Problem[]; warnings: string[] }> {
  const name = path.basename(dataset.path);
  const listed = await listDataset(dataset.path);
  const selected = selectTasks(listed.entries, dataset);
  const loaded = await loadEntries(selected.tasks, requirement);
  const skipped = listed.entries.filter((entry) => entry.problem && !selected.tasks.includes(entry));
  const first = skipped[0]?.problem;
  const warnings = first
    ? [
        `${dataset.path}: ${skipped.length} ${skipped.length === 1 ? 'entry' : 'entries'} the job does not select ` +
          `left unread, though unusable (${first.file}: ${first.message}${skipped.length > 1 ? ', …' : ''})`,
      ]
    : [];
  return {
    name,
    tasks: loaded.tasks,
    problems: [...listed.problems, ...unmatchedProblems(where, selected.unmatched, name), ...loaded.problems],
    warnings,
  };
}

/** An include glob that matches no task of the dataset: almost always a typo. */
export function unmatchedProblems(where: { file: string; field: string }, globs: string[], dataset: string): Problem[] {
  return globs.map((glob) => ({
    file: where.file,
    field: `${where.field}.task_names`,
    message: `"${glob}" matches no task of ${dataset}`,
  }));
}
