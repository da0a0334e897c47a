import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { InputError } from '../contracts/errors';
import { ifPresent, isDirectory } from '../files/absent';
import type { PinnedTask, RegistryTask } from '../contracts/registry';

const run = promisify(execFile);

/** Says which dataset and task a git failure belongs to, in one line. */
export class TaskDownloadError extends Error {
  constructor(
    readonly dataset: string,
    readonly task: string,
    readonly url: string,
    detail: string
  ) {
    super(`dataset ${dataset}: task ${task}: ${url}: ${detail}`);
    this.name = 'TaskDownloadError';
  }
}

const FULL_SHA = /^[0-9a-f]{40}$/i;
const SHORT_SHA = /^[0-9a-f]{4,39}$/i;
const LS_REMOTE_TIMEOUT_MS = 120_000;
const FETCH_TIMEOUT_MS = 30 * 60_000;
const PARTIAL_PREFIX = '.partial-';

/** `$XDG_CACHE_HOME/rollout/tasks` (`~/.cache/rollout/tasks` when unset). */
export function tasksCacheRoot(): string {
  const base = process.env.XDG_CACHE_HOME || path.join(homedir(), '.cache');
  return path.join(base, 'rollout', 'tasks');
}

/** One folder per repository: readable, and unique through a hash of the URL without its `.git` or trailing `/`. */
function repoDir(root: string, url: string): string {
  const normalized = url.replace(/\/+$/, '').replace(/\.git$/, '');
  const readable = normalized
    .replace(/^[a-z][a-z0-9+.-]*:\/\//i, '')
    .replace(/[^A-Za-z0-9._-]+/g, '_')
    .slice(-60);
  const digest = createHash('sha256').update(normalized).digest('hex').slice(0, 10);
  return path.join(root, `${readable}-${digest}`);
}

/** The cache folder of one task: keyed by repository, full commit and path. */
export function cachedTaskDir(task: PinnedTask, root = tasksCacheRoot()): string {
  const encodedPath = task.path.replace(/^\/+|\/+$/g, '').replace(/\//g, '__') || '_root';
  return path.join(repoDir(root, task.git_url), task.git_commit_id, encodedPath);
}

async function git(args: string[], options: { cwd?: string; timeout: number }): Promise<string> {
  try {
    const { stdout } = await run('git', args, {
      cwd: options.cwd,
      timeout: options.timeout,
      maxBuffer: 64 * 1024 * 1024,
      // Never wait for a password prompt: an unreachable or private repository is an error, not a hang.
      env: {
        ...process.env,
        GIT_TERMINAL_PROMPT: '0',
        GIT_SSH_COMMAND: process.env.GIT_SSH_COMMAND ?? 'ssh -o BatchMode=yes',
      },
    });
    return stdout;
  } catch (err) {
    const failure = err as { stderr?: string; killed?: boolean; message: string };
    if (failure.killed) throw new Error(`git ${args[0]} timed out`, { cause: err });
    const lines = (failure.stderr ?? failure.message).split('\n').map((l) => l.trim());
    throw new Error(lines.filter((l) => l && !l.startsWith('hint:')).pop() ?? failure.message, { cause: err });
  }
}

/**
 * Full commits for every task: a full SHA is kept; "HEAD" or no commit is the remote's HEAD now; a short SHA is
 * looked up in the cache, then in the repository's history. Each repository and ref is resolved once.
 */
export async function pinTasks(
  dataset: string,
  tasks: RegistryTask[],
  log: (line: string) => void,
  root = tasksCacheRoot()
): Promise<PinnedTask[]> {
  const resolved = new Map<string, Promise<string>>();
  const resolve = (task: RegistryTask): Promise<string> => {
    const ref = task.git_commit_id ?? 'HEAD';
    if (FULL_SHA.test(ref)) return Promise.resolve(ref.toLowerCase());
    const key = `${task.git_url}\n${ref}`;
    let pending = resolved.get(key);
    if (!pending) {
      pending = resolveRef(task.git_url, ref, root).then((sha) => {
        log(`${dataset}: ${task.git_url} ${ref} is ${sha}`);
        return sha;
      });
      resolved.set(key, pending);
    }
    return pending.catch((err: Error) => {
      throw new TaskDownloadError(dataset, task.name, task.git_url, `cannot resolve ${ref}: ${err.message}`);
    });
  };
  return Promise.all(
    tasks.map(async (task) => ({
      name: task.name,
      git_url: task.git_url,
      git_commit_id: await resolve(task),
      path: task.path,
    }))
  );
}

async function resolveRef(url: string, ref: string, root: string): Promise<string> {
  if (SHORT_SHA.test(ref) && ref !== 'HEAD') {
    const cached = (await ifPresent(readdir(repoDir(root, url)))) ?? [];
    const matches = cached.filter((name) => FULL_SHA.test(name) && name.startsWith(ref.toLowerCase()));
    if (matches.length === 1 && matches[0]) return matches[0];
    return resolveShortSha(url, ref, root);
  }
  const output = await git(['ls-remote', url, ref], { timeout: LS_REMOTE_TIMEOUT_MS });
  const sha = output.split('\n')[0]?.split('\t')[0] ?? '';
  if (!FULL_SHA.test(sha)) throw new Error(`no ref ${ref}`);
  return sha;
}

/** A short SHA cannot be fetched directly: fetch the commit graph (no trees, no blobs) and look it up. */
async function resolveShortSha(url: string, short: string, root: string): Promise<string> {
  await mkdir(root, { recursive: true });
  const scratch = await mkdtemp(path.join(root, `${PARTIAL_PREFIX}resolve-`));
  try {
    await git(['init', '-q', scratch], { timeout: LS_REMOTE_TIMEOUT_MS });
    await git(['fetch', '-q', '--filter=tree:0', url, '+refs/heads/*:refs/remotes/origin/*'], {
      cwd: scratch,
      timeout: FETCH_TIMEOUT_MS,
    });
    const sha = (
      await git(['rev-parse', '--verify', '--quiet', `${short}^{commit}`], {
        cwd: scratch,
        timeout: LS_REMOTE_TIMEOUT_MS,
      }).catch(() => '')
    ).trim();
    if (!FULL_SHA.test(sha)) throw new Error(`no commit ${short} on any branch`);
    return sha;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/**
 * Makes every task present in the cache and returns its folder. Tasks are grouped by repository and commit; each
 * group is one shallow, blob-less fetch of that commit with a sparse checkout of just the task paths, into a
 * `.partial-*` folder whose task folders are then renamed into place. A task folder therefore either is complete or
 * does not exist, and a download cut short leaves only a `.partial-*` folder that is never read.
 */
export async function fetchTasks(
  dataset: string,
  tasks: PinnedTask[],
  log: (line: string) => void,
  root = tasksCacheRoot()
): Promise<Map<PinnedTask, string>> {
  const dirs = new Map<PinnedTask, string>();
  const missing = new Map<string, PinnedTask[]>();
  for (const task of tasks) {
    const dir = cachedTaskDir(task, root);
    dirs.set(task, dir);
    if (await isDirectory(dir)) continue;
    const key = `${task.git_url}\n${task.git_commit_id}`;
    missing.set(key, [...(missing.get(key) ?? []), task]);
  }
  const cachedCount = tasks.length - [...missing.values()].reduce((n, group) => n + group.length, 0);
  if (missing.size === 0) {
    if (tasks.length > 0) log(`${dataset}: ${tasks.length} tasks from the cache (${root})`);
    return dirs;
  }
  if (cachedCount > 0) log(`${dataset}: ${cachedCount} of ${tasks.length} tasks from the cache`);
  for (const group of missing.values()) {
    const first = group[0] as PinnedTask;
    const started = Date.now();
    log(`${dataset}: downloading ${group.length} tasks from ${first.git_url} @ ${first.git_commit_id.slice(0, 12)} …`);
    await fetchGroup(dataset, group, root);
    log(`${dataset}: downloaded ${group.length} tasks in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  return dirs;
}

async function fetchGroup(dataset: string, group: PinnedTask[], root: string): Promise<void> {
  const first = group[0] as PinnedTask;
  const fail = (task: PinnedTask, detail: string) => new TaskDownloadError(dataset, task.name, task.git_url, detail);
  const parent = repoDir(root, first.git_url);
  await mkdir(parent, { recursive: true });
  await removeStalePartials(parent);
  const scratch = await mkdtemp(path.join(parent, `${PARTIAL_PREFIX}${first.git_commit_id.slice(0, 12)}-`));
  try {
    const paths = group.map((task) => task.path.replace(/^\/+|\/+$/g, ''));
    const whole = paths.some((p) => p === '');
    const at = { cwd: scratch, timeout: FETCH_TIMEOUT_MS };
    await git(['init', '-q'], at);
    await git(['remote', 'add', 'origin', first.git_url], at);
    if (!whole) {
      await git(['config', 'core.sparseCheckout', 'true'], at);
      await git(['sparse-checkout', 'set', '--no-cone', ...paths.map((p) => `/${p}/`)], at);
    }
    await git(['fetch', '-q', '--depth', '1', '--filter=blob:none', 'origin', first.git_commit_id], at).catch(
      (err: Error) => {
        throw fail(first, `cannot fetch commit ${first.git_commit_id}: ${err.message}`);
      }
    );
    await git(['checkout', '-q', '--detach', first.git_commit_id], at).catch((err: Error) => {
      throw fail(first, `cannot check out ${first.git_commit_id}: ${err.message}`);
    });
    const absent: PinnedTask[] = [];
    for (const task of group) {
      if (!(await isDirectory(path.join(scratch, task.path.replace(/^\/+|\/+$/g, ''))))) absent.push(task);
    }
    // The registry names what is not there: bad input (exit 2), every such task at once, not a failure of ours.
    if (absent.length > 0) {
      throw new InputError(
        absent.map((task) => ({
          file: `dataset ${dataset}`,
          message: `task ${task.name}: ${task.git_url}: no folder "${task.path}" at commit ${task.git_commit_id}`,
        }))
      );
    }
    await fetchLfsFiles(scratch, group, at, fail);
    // Whole-repository tasks last: their rename moves the scratch folder itself.
    for (const task of [...group].sort((a, b) => Number(a.path === '') - Number(b.path === ''))) {
      const target = cachedTaskDir(task, root);
      if (await isDirectory(target)) continue;
      await mkdir(path.dirname(target), { recursive: true });
      const relative = task.path.replace(/^\/+|\/+$/g, '');
      if (relative === '') await rm(path.join(scratch, '.git'), { recursive: true, force: true });
      await rename(path.join(scratch, relative), target).catch(async (err: NodeJS.ErrnoException) => {
        // Another process finished the same task first: its copy is as good as ours.
        if (!(await isDirectory(target))) throw err;
      });
    }
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** The first line of a Git LFS pointer file (what the repository holds in place of a large file). */
const LFS_POINTER = 'version https://git-lfs.github.com/spec/';
/** Pointer files are small text files; anything larger is real content. */
const LFS_POINTER_MAX_BYTES = 1024;

/**
 * Task files kept in Git LFS come out of the checkout as pointers: with `git lfs` installed they are fetched (from
 * the same remote); without it a task holding one is an error naming the task and file, never a task run on pointers.
 */
async function fetchLfsFiles(
  scratch: string,
  group: PinnedTask[],
  at: { cwd: string; timeout: number },
  fail: (task: PinnedTask, detail: string) => TaskDownloadError
): Promise<void> {
  const pointers = new Map<PinnedTask, string[]>();
  for (const task of group) {
    const found = await lfsPointers(scratch, task.path.replace(/^\/+|\/+$/g, ''));
    if (found.length) pointers.set(task, found);
  }
  const [first] = pointers;
  if (!first) return;
  const hasLfs = await git(['lfs', 'version'], at).then(
    () => true,
    () => false
  );
  if (!hasLfs) {
    const [task, files] = first;
    throw fail(task, `${files[0]} is a Git LFS pointer, and git-lfs is not installed on this host (install git-lfs)`);
  }
  const include = [...pointers.values()].flat().join(',');
  await git(['lfs', 'pull', `--include=${include}`], at).catch((err: Error) => {
    throw fail(first[0], `cannot fetch its Git LFS files: ${err.message}`);
  });
}

/** Files under `relative` (in the checkout at root) that are Git LFS pointers, relative to root. */
async function lfsPointers(root: string, relative: string): Promise<string[]> {
  const found: string[] = [];
  const entries = await readdir(path.join(root, relative), { withFileTypes: true, recursive: true });
  for (const entry of entries) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    if (file.includes(`${path.sep}.git${path.sep}`)) continue;
    const { size } = await stat(file);
    if (size > LFS_POINTER_MAX_BYTES) continue;
    const head = await readFile(file, 'utf8');
    if (head.startsWith(LFS_POINTER)) found.push(path.relative(root, file));
  }
  return found.sort();
}

/** Downloads cut short by a killed process: older than the longest a fetch may take, so nobody is writing them. */
async function removeStalePartials(parent: string): Promise<void> {
  for (const name of await readdir(parent)) {
    if (!name.startsWith(PARTIAL_PREFIX)) continue;
    const folder = path.join(parent, name);
    const { mtimeMs } = await stat(folder);
    if (Date.now() - mtimeMs > FETCH_TIMEOUT_MS) await rm(folder, { recursive: true, force: true });
  }
}
