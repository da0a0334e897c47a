import { constants } from 'node:fs';
import { lstat, open, readdir, realpath } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseToml } from 'smol-toml';

import type { Problem } from '../contracts/errors';
import { zodProblems } from '../contracts/errors';
import { ifPresent, isDirectory, isFile } from '../files/absent';
import type { EnvironmentRequirement } from '../contracts/provider';
import type { Task, TaskConfig, TaskStep } from '../contracts/task-config';
import { TaskConfigSchema, taskResources } from '../contracts/task-config';

// The task's shape lives with its schema (a leaf the agent contract reads); re-exported for the loader's callers.
export type { Task, TaskStep } from '../contracts/task-config';

export type TaskLoad = { task: Task; problems: [] } | { task?: undefined; problems: Problem[] };

/** Which files an environment type needs in environment/ (the spec leaves this to each type). */
export async function loadTask(dir: string, requirement?: EnvironmentRequirement): Promise<TaskLoad> {
  const absolute = path.resolve(dir);
  const tomlPath = path.join(absolute, 'task.toml');
  const problems: Problem[] = [];
  // A task folder may be reached through a link (a dataset assembled from links); what it holds must stay inside it.
  const root = (await ifPresent(realpath(absolute))) ?? absolute;
  const readText = (file: string, into: Problem[]) => readTaskText(root, file, into);

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
  problems.push(...(await foldersOutside(root, absolute, config?.steps ?? [])));
  const steps = config?.steps ? await loadSteps(root, absolute, config.steps, problems) : [];
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
async function loadSteps(
  root: string,
  taskDir: string,
  configs: { name: string }[],
  problems: Problem[]
): Promise<TaskStep[]> {
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
    const instruction = await readTaskText(root, path.join(dir, 'instruction.md'), problems);
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
  let folder: boolean;
  try {
    folder = await isDirectory(absolute);
  } catch (err) {
    // A link that loops (ELOOP) or a folder this user cannot read: the job's input, not Rollout's failure.
    const code = (err as NodeJS.ErrnoException).code;
    const message =
      code === 'ELOOP' ? 'dataset path is a symlink loop' : `dataset path unreadable (${code ?? firstLine(err)})`;
    return { entries: [], problems: [{ file: absolute, message }] };
  }
  if (!folder) {
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
 * The task's folders that are copied into environments or built from (environment/, tests/, solution/, steps/<name>
 * and theirs): each must resolve inside the task folder, so a link in a public dataset cannot hand the host's files
 * to a build, the agent or the verifier.
 */
async function foldersOutside(root: string, taskDir: string, steps: { name: string }[]): Promise<Problem[]> {
  const folders = ['environment', 'tests', 'solution', 'steps'];
  for (const { name } of steps) {
    for (const inner of ['', 'tests', 'solution', 'workdir']) folders.push(path.join('steps', name, inner));
  }
  const problems: Problem[] = [];
  for (const folder of folders) {
    const full = path.join(taskDir, folder);
    if (!(await ifPresent(lstat(full)))) continue;
    const real = await realpath(full).catch(() => null);
    if (real === null || !isInside(root, real)) {
      problems.push({ file: full, message: `resolves outside the task folder${real ? ` (to ${real})` : ''}: refused` });
    }
  }
  return problems;
}

/** Whether `real` (a resolved path) is `root` or inside it. */
function isInside(root: string, real: string): boolean {
  const relative = path.relative(root, real);
  return relative === '' || (!relative.startsWith('..') && !path.isAbsolute(relative));
}

/**
 * A task file's text: a regular file whose real path stays inside the task folder (a link to /proc/self/environ or
 * ~/.aws/credentials would hand the worker's secrets to the agent as its instruction), opened without following a
 * link swapped in after the check. Anything else (a FIFO or device would block the read for ever) and bytes that are
 * not UTF-8 are refused: task files are text, and the instruction reaches agents as text, so a silent replacement of
 * bytes would hand them something the task author did not write.
 */
export async function readTaskText(root: string, file: string, problems: Problem[]): Promise<string | undefined> {
  let bytes: Buffer;
  try {
    const real = await realpath(file);
    if (!isInside(root, real)) {
      problems.push({ file, message: `resolves outside the task folder (to ${real}): refused` });
      return undefined;
    }
    const handle = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      if (!(await handle.stat()).isFile()) {
        problems.push({ file, message: 'not a regular file' });
        return undefined;
      }
      bytes = await handle.readFile();
    } finally {
      await handle.close();
    }
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

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}
