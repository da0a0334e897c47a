import { createHash } from 'node:crypto';
import { readFile, readdir, lstat, readlink } from 'node:fs/promises';
import path from 'node:path';

/**
 * Content hash of a task's environment/ folder (paths, modes, bytes, link targets) plus its docker_image: identical
 * environments get the same key, so they build once and share one image; any change gives a new key.
 */
export async function environmentKey(environmentDir: string, dockerImage: string | null): Promise<string> {
  const hash = createHash('sha256');
  hash.update(`image:${dockerImage ?? ''}\0`);
  await hashTree(hash, environmentDir, '');
  return hash.digest('hex').slice(0, 16);
}

async function hashTree(hash: ReturnType<typeof createHash>, root: string, relative: string): Promise<void> {
  let entries;
  try {
    entries = await readdir(path.join(root, relative), { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of entries) {
    const rel = path.posix.join(relative, entry.name);
    const full = path.join(root, rel);
    const info = await lstat(full);
    if (info.isDirectory()) {
      hash.update(`dir:${rel}\0`);
      await hashTree(hash, root, rel);
    } else if (info.isSymbolicLink()) {
      hash.update(`link:${rel}\0${await readlink(full)}\0`);
    } else if (info.isFile()) {
      hash.update(`file:${rel}\0${info.mode & 0o111 ? 'x' : '-'}\0`);
      hash.update(await readFile(full));
      hash.update('\0');
    }
  }
}
