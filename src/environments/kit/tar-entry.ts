/**
 * Whether an entry of an archive that came out of a sandbox may be written to the host, and where. The archive is the
 * agent's to shape: only regular files and folders are written, never links, devices or fifos, and no name reaches
 * outside the target folder (`..`, absolute paths). Every provider's download goes through this one check.
 */
import { resolveInside } from '../../files/inside';

/** The fields of a tar header the check reads (tar-stream's Header has them). */
export interface TarEntryHeader {
  name: string;
  type?: string | null;
}

/** A `docker cp`-style entry kept: its path below the target folder (containerPath's own name dropped), and where. */
export interface TarEntryTarget {
  relative: string;
  target: string;
}

/**
 * Where an entry of a `docker cp`-style archive of one container path lands below `root`, or undefined when it is
 * not written: not a regular file or folder, the archived path's own folder (root itself), or outside root. Entries
 * start with the archived path's name, which is dropped: a folder's contents land in root, a lone file as root/<name>.
 */
export function tarEntryTarget(root: string, header: TarEntryHeader): TarEntryTarget | undefined {
  if (header.type !== 'file' && header.type !== 'directory') return undefined;
  const parts = header.name.split('/').filter((part) => part !== '' && part !== '.');
  // No archive of real files names `..`: such an entry (a hostile sandbox's tar) could leave its chosen folder for
  // the trial folder's own files (sandboxes.jsonl, trial.log) while staying inside root.
  if (parts.includes('..')) return undefined;
  const relative = parts.length > 1 ? parts.slice(1).join('/') : header.type === 'file' ? parts[0] : undefined;
  if (relative === undefined) return undefined;
  const target = resolveInside(root, relative);
  return target === undefined || target === root ? undefined : { relative, target };
}
