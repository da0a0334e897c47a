import { readFile, readdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseToml } from 'smol-toml';

import type { Problem } from '../errors';
import { zodProblems } from '../errors';
import type { RegistryTaskSource } from '../registry/git-cache';
import type { TaskConfig, TaskResources } from './schema';
import { TaskConfigSchema, taskResources } from './schema';

/**
 * A task folder, read and validated: instruction, config and what it provides. For a multi-step task (`[[steps]]`),
 * the instruction, solution and tests are those of its first step until `taskAtStep` (src/task/steps.ts) gives the
 * view of another one.
 */
export interface Task {
  name: string;
  dir: string;
  config: TaskConfig;
  instruction: string;
  resources: TaskResources;
  hasSolution: boolean;
  /** The folder the oracle runs solve.sh from. */
  solutionDir: string;
  /** Folders copied to /tests in this order (a step's own tests/ over the task's shared one). */
  testsDirs: string[];
  /** The `[[steps]]` in order; empty for a single-step task. */
  steps: TaskStep[];
  /** A registry task: where it comes from, so a worker on another host can fetch it into its own cache. */
  source?: RegistryTaskSource;
}

/** One step of a multi-step task, read from steps/<name>/. */
export interface TaskStep {
  name: string;
  dir: string;
  instruction: string;
  hasSolution: boolean;
  /** The task's shared tests/ (when it exists), then the step's own (when it exists): copied to /tests in order. */
  testsDirs: string[];
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

  const sharedTests = path.join(absolute, 'tests');
  const steps = config?.steps ? await loadSteps(absolute, config.steps, problems) : [];
  const instruction = config?.steps
    ? steps[0]?.instruction
    : await readText(path.join(absolute, 'instruction.md'), problems);
  if (!config?.steps && !(await isFile(path.join(sharedTests, 'test.sh')))) {
    problems.push({
      file: path.join(sharedTests, 'test.sh'),
      message: 'missing (every task needs tests/test.sh)',
    });
  }
  if (config && requirement) problems.push(...(await requirement({ dir: absolute, config })));
  if (problems.length > 0 || !config || instruction === undefined) return { problems };

  const first = steps[0];
  const solutionDir = first ? path.join(first.dir, 'solution') : path.join(absolute, 'solution');
  return {
    task: {
      name: path.basename(absolute),
      dir: absolute,
      config,
      instruction,
      resources: taskResources(config.environment),
      hasSolution: await isFile(path.join(solutionDir, 'solve.sh')),
      solutionDir,
      testsDirs: first ? first.testsDirs : [sharedTests],
      steps,
    },
    problems: [],
  };
}

/**
 * The steps' folders, as Harbor lays them out: steps/<name>/instruction.md, and a test.sh in the step's tests/ or in
 * the task's shared tests/ (whose files every step gets, under its own).
 */
async function loadSteps(taskDir: string, configs: { name: string }[], problems: Problem[]): Promise<TaskStep[]> {
  const sharedTests = path.join(taskDir, 'tests');
  const sharedTest = await isFile(path.join(sharedTests, 'test.sh'));
  const hasSharedTests = await isDirectory(sharedTests);
  const steps: TaskStep[] = [];
  for (const { name } of configs) {
    const dir = path.join(taskDir, 'steps', name);
    if (!(await isDirectory(dir))) {
      problems.push({ file: dir, message: `missing (task.toml declares the step "${name}")` });
      continue;
    }
    const instruction = await readText(path.join(dir, 'instruction.md'), problems);
    const testScript = path.join(dir, 'tests', 'test.sh');
    if (!sharedTest && !(await isFile(testScript))) {
      problems.push({
        file: testScript,
        message: "missing (every step needs its tests/test.sh or the task's tests/test.sh)",
      });
    }
    if (instruction === undefined) continue;
    steps.push({
      name,
      dir,
      instruction,
      hasSolution: await isFile(path.join(dir, 'solution', 'solve.sh')),
      testsDirs: [
        ...(hasSharedTests ? [sharedTests] : []),
        ...((await isDirectory(path.join(dir, 'tests'))) ? [path.join(dir, 'tests')] : []),
      ],
    });
  }
  return steps;
}

/** An entry of a dataset path: a task folder to read, or what makes it unusable (a dangling or looping link). */
export interface DatasetEntry {
  /** The folder's (or link's) name: the task's name, which job selections match. */
  name: string;
  dir: string;
  problem?: Problem;
}

/**
 * A dataset path is either one task folder (it has task.toml) or a folder of task folders: its entries, not read yet,
 * so that a job reads only the tasks it selects. `problems` are the dataset's own (not a folder, no tasks).
 */
export async function listDataset(dir: string): Promise<{ entries: DatasetEntry[]; problems: Problem[] }> {
  const absolute = path.resolve(dir);
  if (!(await isDirectory(absolute))) {
    return { entries: [], problems: [{ file: absolute, message: 'dataset path is not a folder' }] };
  }
  const entries = (await isFile(path.join(absolute, 'task.toml')))
    ? [{ name: path.basename(absolute), dir: absolute }]
    : await taskFolders(absolute);
  if (entries.length === 0) {
    return { entries: [], problems: [{ file: absolute, message: 'dataset holds no task folders' }] };
  }
  return { entries, problems: [] };
}

/** Every task of a dataset path. Every entry must be a valid task: an invalid one is reported, never skipped. */
export async function loadDataset(
  dir: string,
  requirement?: EnvironmentRequirement
): Promise<{ tasks: Task[]; problems: Problem[] }> {
  const listed = await listDataset(dir);
  const loaded = await loadEntries(listed.entries, requirement);
  return { tasks: loaded.tasks, problems: [...listed.problems, ...loaded.problems] };
}

/** These entries of a dataset, read and validated; an unusable entry is a problem. */
export async function loadEntries(
  entries: DatasetEntry[],
  requirement?: EnvironmentRequirement
): Promise<{ tasks: Task[]; problems: Problem[] }> {
  const loads = await Promise.all(
    entries.map(async (entry) => (entry.problem ? { problems: [entry.problem] } : loadTask(entry.dir, requirement)))
  );
  return {
    tasks: loads.flatMap((load) => ('task' in load && load.task ? [load.task] : [])),
    problems: loads.flatMap((load) => load.problems),
  };
}

/**
 * The task folders of a dataset folder: its sub-folders, and links to folders (followed, so a dataset may be assembled
 * from links). A link that loops, dangles, or leads back to the dataset or a folder above it is an entry with its
 * problem.
 */
async function taskFolders(dataset: string): Promise<DatasetEntry[]> {
  const entries: DatasetEntry[] = [];
  const datasetReal = await realpath(dataset);
  for (const entry of await readdir(dataset, { withFileTypes: true })) {
    if (entry.name.startsWith('.')) continue;
    const full = path.join(dataset, entry.name);
    if (entry.isDirectory()) entries.push({ name: entry.name, dir: full });
    if (!entry.isSymbolicLink()) continue;
    let target: string;
    try {
      target = await realpath(full);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const message = code === 'ELOOP' ? 'symlink loop' : `broken symlink (${code ?? firstLine(err)})`;
      entries.push({ name: entry.name, dir: full, problem: { file: full, message } });
      continue;
    }
    const fromTarget = path.relative(target, datasetReal);
    if (fromTarget === '' || !fromTarget.startsWith('..')) {
      const message = `symlink loop: links to ${target}, which holds the dataset itself`;
      entries.push({ name: entry.name, dir: full, problem: { file: full, message } });
    } else if (await isDirectory(target)) {
      entries.push({ name: entry.name, dir: full });
    }
  }
  return entries.sort((a, b) => (a.dir < b.dir ? -1 : a.dir > b.dir ? 1 : 0));
}

/**
 * A regular file's text. Anything else (a FIFO or device would block the read for ever) and bytes that are not
 * UTF-8 are refused: task files are text, and the instruction reaches agents as text, so a silent replacement of
 * bytes would hand them something the task author did not write.
 */
async function readText(file: string, problems: Problem[]): Promise<string | undefined> {
  let bytes: Buffer;
  try {
    if (!(await stat(file)).isFile()) {
      problems.push({ file, message: 'not a regular file' });
      return undefined;
    }
    bytes = await readFile(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    problems.push({ file, message: code === 'ENOENT' ? 'missing' : `unreadable (${code ?? firstLine(err)})` });
    return undefined;
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    problems.push({ file, message: `not valid UTF-8 (first bad byte at offset ${firstInvalidUtf8(bytes)})` });
    return undefined;
  }
}

/** Offset of the first byte that is not UTF-8: where the lenient decoding first put U+FFFD for bytes that are not it. */
function firstInvalidUtf8(bytes: Buffer): number {
  const text = new TextDecoder('utf-8').decode(bytes);
  let offset = 0;
  let from = 0;
  for (let at = text.indexOf('\uFFFD'); at >= 0; at = text.indexOf('\uFFFD', at + 1)) {
    offset += Buffer.byteLength(text.slice(from, at));
    from = at;
    if (!bytes.subarray(offset, offset + 3).equals(REPLACEMENT_CHARACTER)) return offset;
  }
  return offset;
}

const REPLACEMENT_CHARACTER = Buffer.from('\uFFFD');

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
