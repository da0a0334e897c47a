import { readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseToml } from 'smol-toml';

import type { Problem } from '../errors';
import { zodProblems } from '../errors';
import type { TaskConfig, TaskResources } from './schema';
import { TaskConfigSchema, taskResources } from './schema';

/** A task folder, read and validated: instruction, config and what it provides. */
export interface Task {
  name: string;
  dir: string;
  config: TaskConfig;
  instruction: string;
  resources: TaskResources;
  hasSolution: boolean;
}

export type TaskLoad = { task: Task; problems: [] } | { task?: undefined; problems: Problem[] };

/** Which files an environment type needs in environment/ (the spec leaves this to each type). */
export type EnvironmentRequirement = (task: { dir: string; config: TaskConfig }) => Promise<Problem[]>;

export async function loadTask(dir: string, requirement?: EnvironmentRequirement): Promise<TaskLoad> {
  const absolute = path.resolve(dir);
  const tomlPath = path.join(absolute, 'task.toml');
  const problems: Problem[] = [];

  let config: TaskConfig | undefined;
  const toml = await readText(tomlPath, problems);
  if (toml !== undefined) {
    let raw: unknown;
    try {
      raw = parseToml(toml);
    } catch (err) {
      problems.push({ file: tomlPath, message: `invalid TOML: ${firstLine(err)}` });
    }
    if (raw !== undefined) {
      const parsed = TaskConfigSchema.safeParse(raw);
      if (parsed.success) config = parsed.data;
      else problems.push(...zodProblems(tomlPath, parsed.error.issues));
    }
  }

  const instruction = await readText(path.join(absolute, 'instruction.md'), problems);
  if (!(await isFile(path.join(absolute, 'tests', 'test.sh')))) {
    problems.push({
      file: path.join(absolute, 'tests', 'test.sh'),
      message: 'missing (every task needs tests/test.sh)',
    });
  }
  if (config && requirement) problems.push(...(await requirement({ dir: absolute, config })));
  if (problems.length > 0 || !config || instruction === undefined) return { problems };

  return {
    task: {
      name: path.basename(absolute),
      dir: absolute,
      config,
      instruction,
      resources: taskResources(config.environment),
      hasSolution: await isFile(path.join(absolute, 'solution', 'solve.sh')),
    },
    problems: [],
  };
}

/**
 * A dataset path is either one task folder (it has task.toml) or a folder of task folders. Every sub-folder must be
 * a valid task: an invalid one is reported, never skipped.
 */
export async function loadDataset(
  dir: string,
  requirement?: EnvironmentRequirement
): Promise<{ tasks: Task[]; problems: Problem[] }> {
  const absolute = path.resolve(dir);
  if (!(await isDirectory(absolute))) {
    return { tasks: [], problems: [{ file: absolute, message: 'dataset path is not a folder' }] };
  }
  const taskDirs = (await isFile(path.join(absolute, 'task.toml')))
    ? [absolute]
    : (await readdir(absolute, { withFileTypes: true }))
        .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.'))
        .map((entry) => path.join(absolute, entry.name))
        .sort();
  if (taskDirs.length === 0) {
    return { tasks: [], problems: [{ file: absolute, message: 'dataset holds no task folders' }] };
  }
  const loads = await Promise.all(taskDirs.map((taskDir) => loadTask(taskDir, requirement)));
  return {
    tasks: loads.flatMap((load) => (load.task ? [load.task] : [])),
    problems: loads.flatMap((load) => load.problems),
  };
}

async function readText(file: string, problems: Problem[]): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    problems.push({ file, message: code === 'ENOENT' ? 'missing' : `unreadable (${code ?? firstLine(err)})` });
    return undefined;
  }
}

export async function isFile(file: string): Promise<boolean> {
  return stat(file).then(
    (s) => s.isFile(),
    () => false
  );
}

export async function isDirectory(dir: string): Promise<boolean> {
  return stat(dir).then(
    (s) => s.isDirectory(),
    () => false
  );
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}
