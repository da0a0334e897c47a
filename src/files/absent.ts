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
