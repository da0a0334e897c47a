/**
 * An upload that a vendor's rate limit may refuse is sent again whole: the archive is kept in a temporary host file
 * while it goes (a stream can be read once), and removed after.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

export async function withHostCopy<T>(
  archive: NodeJS.ReadableStream | Readable,
  use: (file: string) => Promise<T>
): Promise<T> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-upload-'));
  try {
    const file = path.join(dir, 'archive.tar');
    // Readable.from: tar-fs and tar-stream make streamx streams.
    await pipeline(Readable.from(archive), createWriteStream(file));
    return await use(file);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
