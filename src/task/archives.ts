/**
 * Local datasets of a job in an object store: the CLI packs each task folder once, as a tar named by the digest of
 * its content, into `<jobs_dir>/.rollout/tasks/`; a worker fetches a task by that digest into its own cache the first
 * time it runs it, so no trial depends on a path that exists only on the submitting machine.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, mkdtemp, readdir, readlink, rename, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';

import tarFs from 'tar-fs';
import tarStream from 'tar-stream';

import { isDirectory } from '../files/absent';
import type { PlannedTrial } from '../contracts/trial';
import { tasksCacheRoot } from '../registry/git-cache';
import { joinStoreUrl } from '../storage/location';
import { openStore } from '../storage/store';
import { eachLimited } from '../storage/trial-folder';

/** Where a trial's task was packed: the store folder of task archives, and the archive's digest (sha256 of the tar). */
export interface TaskArchive {
  store: string;
  digest: string;
}

const TASKS_FOLDER = '.rollout/tasks';
const PACKS_IN_FLIGHT = 4;

/** A tar of the folder, the same bytes for the same content anywhere: sorted, times and owners zeroed. */
async function packFolder(dir: string, pack: tarStream.Pack, prefix = ''): Promise<void> {
  const entries = (await readdir(path.join(dir, prefix))).sort();
  for (const name of entries) {
    const relative = path.posix.join(prefix, name);
    const full = path.join(dir, relative);
    const info = await lstat(full);
    const header = { name: relative, mtime: new Date(0), uid: 0, gid: 0, mode: info.mode & 0o111 ? 0o755 : 0o644 };
    if (info.isDirectory()) {
      pack.entry({ ...header, type: 'directory', mode: 0o755 });
      await packFolder(dir, pack, relative);
    } else if (info.isSymbolicLink()) {
      pack.entry({ ...header, type: 'symlink', linkname: await readlink(full) });
    } else if (info.isFile()) {
      await new Promise<void>((resolve, reject) => {
        const entry = pack.entry({ ...header, size: info.size }, (err) => (err ? reject(err) : resolve()));
        createReadStream(full).on('error', reject).pipe(entry);
      });
    }
  }
}

/** The folder packed into a temporary file, with the digest of the tar's bytes. */
async function packTask(taskDir: string, scratch: string): Promise<{ file: string; digest: string }> {
  const file = path.join(scratch, `${createHash('sha256').update(taskDir).digest('hex').slice(0, 16)}.tar`);
  const hash = createHash('sha256');
  const pack = tarStream.pack();
  const hashing = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  const packing = packFolder(taskDir, pack).then(
    () => pack.finalize(),
    (err: Error) => pack.destroy(err)
  );
  await Promise.all([pipeline(pack as unknown as NodeJS.ReadableStream, hashing, createWriteStream(file)), packing]);
  return { file, digest: hash.digest('hex') };
}

/**
 * Packs every local task of the planned trials (tasks without registry coordinates) into the store under `jobsDir`, once per
 * content (an archive already there is not sent again), and points their trials at it.
 */
export async function packLocalTasks(
  trials: PlannedTrial[],
  jobsDir: string
): Promise<{ packed: number; sent: number }> {
  const store = await openStore(joinStoreUrl(jobsDir, TASKS_FOLDER));
  const dirs = [...new Set(trials.filter((t) => !t.spec.taskSource).map((t) => t.spec.taskDir))];
  const present = new Set((await store.list('')).map((entry) => entry.key));
  const archives = new Map<string, TaskArchive>();
  const scratch = await mkdtemp(path.join(os.tmpdir(), 'rollout-pack-'));
  let sent = 0;
  try {
    await eachLimited(dirs, PACKS_IN_FLIGHT, async (dir) => {
      const { file, digest } = await packTask(dir, scratch);
      if (!present.has(`${digest}.tar`)) {
        await store.upload(`${digest}.tar`, file);
        sent += 1;
      }
      archives.set(dir, { store: store.root, digest });
    });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
  for (const { spec } of trials) {
    const archive = spec.taskSource ? undefined : archives.get(spec.taskDir);
    if (archive) spec.taskArchive = archive;
  }
  return { packed: dirs.length, sent };
}

/** Fetches under way in this process, by digest: trials of one task on this host fetch it once. */
const fetching = new Map<string, Promise<string>>();

/** The task's folder in this host's cache, fetched and checked against its digest the first time. */
export function fetchTaskArchive(archive: TaskArchive): Promise<string> {
  const dir = path.join(tasksCacheRoot(), 'packed', archive.digest);
  let pending = fetching.get(archive.digest);
  if (!pending) {
    pending = (async () => {
      if (await isDirectory(dir)) return dir;
      await mkdir(path.dirname(dir), { recursive: true });
      const partial = await mkdtemp(`${dir}.partial-`);
      try {
        const tar = path.join(partial, 'task.tar');
        const store = await openStore(archive.store);
        if (!(await store.download(`${archive.digest}.tar`, tar))) {
          throw new Error(`${archive.store}/${archive.digest}.tar: not in the store`);
        }
        const digest = createHash('sha256');
        await pipeline(createReadStream(tar), digest);
        if (digest.digest('hex') !== archive.digest) throw new Error(`${archive.store}/${archive.digest}.tar: corrupt`);
        const extracted = path.join(partial, 'task');
        await pipeline(createReadStream(tar), tarFs.extract(extracted) as unknown as NodeJS.WritableStream);
        // Another process may have put it in place meanwhile: theirs is the same content.
        await rename(extracted, dir).catch(async (err: NodeJS.ErrnoException) => {
          if (!(await isDirectory(dir))) throw err;
        });
        return dir;
      } finally {
        await rm(partial, { recursive: true, force: true });
      }
    })().finally(() => fetching.delete(archive.digest));
    fetching.set(archive.digest, pending);
  }
  return pending;
}
