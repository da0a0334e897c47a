import { stat } from 'node:fs/promises';

/**
 * The one idiom for "absent": only ENOENT (no such file) and ENOTDIR (a path through a file) mean a thing is not
 * there. Every other failure (EACCES, EIO, a stale NFS handle) is an error the caller must see, never a missing file.
 */
export function isAbsent(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** The probe's value, or undefined when what it looks at is absent; any other failure is rethrown. */
export async function ifPresent<T>(probe: Promise<T>): Promise<T | undefined> {
  try {
    return await probe;
  } catch (err) {
    if (isAbsent(err)) return undefined;
    throw err;
  }
}

/** Whether `file` is a regular file (links followed); false when absent, any other failure thrown. */
export async function isFile(file: string): Promise<boolean> {
  return (await ifPresent(stat(file)))?.isFile() ?? false;
}

/** Whether `dir` is a folder (links followed); false when absent, any other failure thrown. */
export async function isDirectory(dir: string): Promise<boolean> {
  return (await ifPresent(stat(dir)))?.isDirectory() ?? false;
}
