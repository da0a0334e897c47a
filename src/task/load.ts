import { readFile, readdir, realpath, stat } from 'node:fs/promises';
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
  const listed = (await isFile(path.join(absolute, 'task.toml')))
    ? { dirs: [absolute], problems: [] }
    : await taskFolders(absolute);
  if (listed.dirs.length === 0 && listed.problems.length === 0) {
    return { tasks: [], problems: [{ file: absolute, message: 'dataset holds no task folders' }] };
  }
  const loads = await Promise.all(listed.dirs.map((taskDir) => loadTask(taskDir, requirement)));
  return {
    tasks: loads.flatMap((load) => (load.task ? [load.task] : [])),
    problems: [...listed.problems, ...loads.flatMap((load) => load.problems)],
  };
}

/**
 * The task folders of a dataset folder: its sub-folders, and links to folders (followed, so a dataset may be assembled
 * from links). A link that loops, dangles, or leads back to the dataset or a folder above it is reported.
 */
async function taskFolders(dataset: string): Promise<{ dirs: string[]; problems: Problem[] }> {
  const dirs: string[] = [];
  const problems: Problem[] = [];
  const datasetReal = await realpath(dataset);
  for (const entry of await readdir(dataset, { withFileTypes: true })) {
    if (entry.name.startsWith('.')) continue;
    const full = path.join(dataset, entry.name);
    if (entry.isDirectory()) dirs.push(full);
    if (!entry.isSymbolicLink()) continue;
    let target: string;
    try {
      target = await realpath(full);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const message = code === 'ELOOP' ? 'symlink loop' : `broken symlink (${code ?? firstLine(err)})`;
      problems.push({ file: full, message });
      continue;
    }
    const fromTarget = path.relative(target, datasetReal);
    if (fromTarget === '' || !fromTarget.startsWith('..')) {
      problems.push({ file: full, message: `symlink loop: links to ${target}, which holds the dataset itself` });
    } else if (await isDirectory(target)) {
      dirs.push(full);
    }
  }
  return { dirs: dirs.sort(), problems };
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
