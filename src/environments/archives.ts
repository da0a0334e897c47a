/** Tar archives of host files to extract at a container's root: one transfer however many files or targets. */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';

import tarFs from 'tar-fs';
import tarStream from 'tar-stream';

import type { StartFile } from '../contracts/environment';

type TarPack = ReturnType<typeof tarFs.pack>;

/**
 * A tar, to extract at the container's root, of a host folder's contents (or a lone file) under each of `targets`:
 * tar-fs packs each target's copy into the same archive (finalized after the last).
 */
export function packedAt(hostPath: string, isFolder: boolean, targets: readonly string[]): Readable {
  const [dir, entries] = isFolder ? [hostPath, undefined] : [path.dirname(hostPath), [path.basename(hostPath)]];
  const packTarget = (index: number, pack?: TarPack): TarPack =>
    tarFs.pack(dir, {
      entries,
      pack,
      map: (header) => ({ ...header, name: path.posix.join(rootRelative(targets[index]!), header.name) }),
      finalize: index === targets.length - 1,
      finish: (done: TarPack) => {
        if (index < targets.length - 1) packTarget(index + 1, done);
      },
    });
  // tar-fs streams are streamx streams: pipe-compatible with Node's, which is all their readers do with them.
  return packTarget(0) as unknown as Readable;
}

/**
 * An upload's archive: a folder's contents land inside each target; a lone file as <target>/<its name>. `targets` are
 * where they land, as absolute paths (to make first: an empty folder's archive makes none).
 */
export async function packedUpload(
  hostPath: string,
  containerPath: string | readonly string[]
): Promise<{ archive: Readable; targets: readonly string[] }> {
  const targets = typeof containerPath === 'string' ? [containerPath] : containerPath;
  return {
    archive: packedAt(hostPath, (await stat(hostPath)).isDirectory(), targets),
    targets: targets.map((target) => `/${rootRelative(target)}`),
  };
}

/** The files of a start request as a tar to extract at the container's root (root-owned, mode 0644). */
export function packedFiles(files: StartFile[]): Readable {
  const pack = tarStream.pack();
  void (async () => {
    for (const file of files) {
      const content = 'text' in file ? Buffer.from(file.text) : await readFile(file.hostPath);
      pack.entry({ name: rootRelative(file.containerPath), mode: 0o644, size: content.length }, content);
    }
    pack.finalize();
  })().catch((err: Error) => pack.destroy(err));
  return pack as unknown as Readable;
}

/** A container path as a name in an archive extracted at `/`. */
export function rootRelative(containerPath: string): string {
  return path.posix.normalize(containerPath).replace(/^\/+/, '') || '.';
}
