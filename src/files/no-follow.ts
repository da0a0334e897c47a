/**
 * Reading files of folders that may come from anyone (a job folder from a shared bucket or a CI artifact, a task):
 * never through a link, never blocking on a FIFO or a device.
 */
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { lstat, open } from 'node:fs/promises';
import path from 'node:path';

import { isAbsent } from './absent';

/**
 * A regular file opened for reading without following a link in its last part (O_NOFOLLOW) or waiting on a FIFO
 * (O_NONBLOCK); undefined when it is absent, a link or not a regular file. The caller closes the handle.
 */
export async function openRegularFile(file: string): Promise<{ handle: FileHandle; size: number } | undefined> {
  let handle: FileHandle;
  try {
    handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    if (isAbsent(err) || (err as NodeJS.ErrnoException).code === 'ELOOP') return undefined;
    throw err;
  }
  const info = await handle.stat();
  if (info.isFile()) return { handle, size: info.size };
  await handle.close();
  return undefined;
}

/** The first `limit` bytes of a regular file (openRegularFile), as text, and its size. */
export async function readRegularHead(
  file: string,
  limit: number
): Promise<{ text: string; size: number } | undefined> {
  const opened = await openRegularFile(file);
  if (!opened) return undefined;
  try {
    const buffer = Buffer.alloc(Math.min(limit, opened.size));
    const { bytesRead } = await opened.handle.read(buffer, 0, buffer.length, 0);
    return { text: buffer.subarray(0, bytesRead).toString('utf8'), size: opened.size };
  } finally {
    await opened.handle.close();
  }
}

/**
 * `root/...relative` when every folder on the way below `root` is a real folder (no link, which could lead out of
 * root) and the path stays inside root; undefined otherwise. The last part is for openRegularFile to open.
 */
export async function pathThroughFolders(root: string, relative: readonly string[]): Promise<string | undefined> {
  if (
    relative.length === 0 ||
    relative.some((part) => part === '' || part === '.' || part === '..' || /[/\\\0]/.test(part))
  )
    return undefined;
  let current = root;
  for (const part of relative.slice(0, -1)) {
    current = path.join(current, part);
    const info = await lstat(current).catch((err: unknown) => {
      if (isAbsent(err)) return undefined;
      throw err;
    });
    if (!info?.isDirectory()) return undefined;
  }
  return path.join(current, relative[relative.length - 1]!);
}
