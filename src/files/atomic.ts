import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Writes a file so readers see the old or the new content, never a torn one (write to a sibling, then rename).
 * `stillWanted`, checked just before the rename, can call the write off (the file moved on meanwhile).
 */
export async function writeFileAtomic(
  file: string,
  content: string | Buffer,
  stillWanted: () => Promise<boolean> = () => Promise.resolve(true)
): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temporary, content);
  if (await stillWanted()) await rename(temporary, file);
  else await rm(temporary);
}
