/**
 * Writing files that come out of an environment onto the host. Their contents are the agent's to choose, so only
 * regular files and folders are written, nothing lands outside the target folder, and no link on the host is followed.
 */
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { lstat, mkdir, open, rm } from 'node:fs/promises';
import path from 'node:path';

import tarStream from 'tar-stream';

import { resolveInside } from '../files/inside';
import type { CollectLimits, CollectReport } from '../contracts/trial';
import { ifPresent } from '../files/absent';
import type { FolderSelection } from '../contracts/environment';

/** Paths of a CollectReport's `cut` beyond the first few are only counted: the report travels in a payload. */
const CUT_PATHS_KEPT = 20;

/**
 * What may still be written to the host while collecting an environment's files: an agent can write more than the
 * host's disk holds. Once a limit is reached nothing more is written, and the report says what was cut.
 */
export class CollectBudget {
  /** Files and folders: the limit bounds both (empty folders cost the host too); the report counts files only. */
  private entries = 0;
  private files = 0;
  private bytes = 0;
  private limitReached: CollectReport['limit_reached'] = null;
  private readonly cut: string[] = [];
  private cutUncounted = 0;

  /** `spent`: what earlier steps of the trial already brought to the host (the limits are the trial's). */
  constructor(
    private readonly limits: CollectLimits,
    private readonly spent: { entries: number; bytes: number } = { entries: 0, bytes: 0 }
  ) {
    this.entries = spent.entries;
    this.bytes = spent.bytes;
  }

  /** Whether an entry of `size` bytes (0 for a folder) fits; once one does not, none after it does. */
  admit(name: string, size: number, kind: 'file' | 'folder' = 'file'): boolean {
    if (!this.limitReached && this.entries + 1 > this.limits.maxFiles) this.limitReached = 'files';
    if (!this.limitReached && this.bytes + size > this.limits.maxBytes) this.limitReached = 'bytes';
    if (this.limitReached) {
      if (this.cut.length < CUT_PATHS_KEPT) this.cut.push(name.slice(0, 300));
      else this.cutUncounted += 1;
      return false;
    }
    this.entries += 1;
    if (kind === 'file') this.files += 1;
    this.bytes += size;
    return true;
  }

  get exhausted(): boolean {
    return this.limitReached !== null;
  }

  report(): CollectReport {
    const more = this.cutUncounted ? [`… and ${this.cutUncounted} more`] : [];
    const bytes = this.bytes - this.spent.bytes;
    return { files: this.files, bytes, limit_reached: this.limitReached, cut: [...this.cut, ...more] };
  }
}

/**
 * Makes every folder from root down to `dir` (inside root) a real folder: a link or file in the way is removed, not
 * followed, so a later write below it cannot be redirected elsewhere on the host.
 */
export async function makeRealDirectory(root: string, dir: string): Promise<void> {
  let current = root;
  for (const part of path.relative(root, dir).split(path.sep).filter(Boolean)) {
    current = path.join(current, part);
    const info = await ifPresent(lstat(current));
    if (info?.isDirectory()) continue;
    if (info) await rm(current, { recursive: true, force: true });
    await mkdir(current);
  }
}

/**
 * Opens `file` as a new regular file. Whatever was there is removed first and the open refuses links and existing
 * paths, so the write can reach neither a link's target nor another name of a hard-linked file.
 */
export async function openFreshFile(file: string, mode = 0o644): Promise<FileHandle> {
  await rm(file, { recursive: true, force: true });
  return open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
}

/**
 * Extracts a `docker cp`-style archive of `containerPath` into hostDir (created if missing). Entries start with
 * containerPath's own name, which is dropped: a folder's contents land in hostDir itself, a lone file as
 * hostDir/<its name>. Links, devices and entries that would land outside hostDir are skipped.
 */
export async function extractArchive(
  archive: NodeJS.ReadableStream,
  hostDir: string,
  budget?: CollectBudget,
  /** How cut entries are named in the budget's report: the folder hostDir stands for. */
  reportAs = '',
  /** Only these folders of the archive's (hostDir/<name>); false when that could not be done (see FolderSelection). */
  selection?: FolderSelection
): Promise<boolean> {
  const root = path.resolve(hostDir);
  await mkdir(root, { recursive: true });
  const extract = tarStream.extract();
  archive.once('error', (err: Error) => extract.destroy(err));
  archive.pipe(extract);
  const stop = () => {
    (archive as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
    extract.destroy();
  };
  let skippedBytes = 0;
  for await (const entry of extract) {
    const relative = entryPath(entry.header);
    const target = relative === undefined ? undefined : resolveInside(root, relative);
    const selected = selection ? selectedBy(selection, relative, entry.header.type) : 'yes';
    if (selected !== 'yes') {
      entry.resume();
      skippedBytes += entry.header.size ?? 0;
      if (selected === 'not-a-folder' || skippedBytes > selection!.maxSkippedBytes) {
        stop();
        return false;
      }
    } else if (target === undefined || target === root) {
      entry.resume();
    } else if (
      budget &&
      !budget.admit(
        path.join(reportAs, relative ?? ''),
        entry.header.size ?? 0,
        entry.header.type === 'directory' ? 'folder' : 'file'
      )
    ) {
      // Over a limit: stop reading, so an agent's endless output does not hold the step for its whole timeout.
      entry.resume();
      stop();
      break;
    } else if (entry.header.type === 'directory') {
      await makeRealDirectory(root, target);
      entry.resume();
    } else {
      await makeRealDirectory(root, path.dirname(target));
      await writeEntry(entry, target);
    }
  }
  return true;
}

/**
 * Some folders of an archived folder, taken from one archive of it: what else is in it is read past, but only up to
 * `maxSkippedBytes`, and one of the names that is not a folder there would land elsewhere than that folder's own
 * download puts it. Either way the extraction stops and reports it, for the caller to download each folder instead.
 */

function selectedBy(
  { folders }: FolderSelection,
  relative: string | undefined,
  type: tarStream.Header['type']
): 'yes' | 'no' | 'not-a-folder' {
  if (relative === undefined) return 'no';
  const [top, ...below] = relative.split('/');
  if (!folders.includes(top!)) return 'no';
  return below.length > 0 || type === 'directory' ? 'yes' : 'not-a-folder';
}

/** Where an archive entry goes below hostDir, or undefined when it is not written at all. */
function entryPath(header: tarStream.Header): string | undefined {
  if (header.type !== 'file' && header.type !== 'directory') return undefined;
  const parts = header.name.split('/').filter((part) => part !== '' && part !== '.');
  // No archive of real files names `..`: such an entry (a hostile sandbox's tar) could leave its chosen folder for
  // the trial folder's own files (sandboxes.jsonl, trial.log) while staying inside hostDir.
  if (parts.includes('..')) return undefined;
  if (parts.length > 1) return parts.slice(1).join('/');
  return header.type === 'file' ? parts[0] : undefined;
}

async function writeEntry(entry: AsyncIterable<unknown>, target: string): Promise<void> {
  const file = await openFreshFile(target);
  try {
    for await (const chunk of entry) await file.write(chunk as Buffer);
  } finally {
    await file.close();
  }
}
