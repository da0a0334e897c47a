/** The Store of a local folder (a jobs_dir on this machine or a shared mount): files written atomically by rename. */
import { createReadStream } from 'node:fs';
import { copyFile, mkdir, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createWriteStream } from 'node:fs';

import { ifPresent } from '../files/absent';
import { keyPath } from '../files/inside';
import { writeFileAtomic } from '../files/atomic';
import type { Store, StoredFile } from '../contracts/store';
import { temporarySibling } from './temporary';

export class LocalStore implements Store {
  constructor(readonly root: string) {}

  /** A key's file: never outside the root (keyPath refuses `..`, empty segments, backslashes). */
  private file(key: string): string {
    return keyPath(this.root, key);
  }

  async read(key: string): Promise<Buffer | undefined> {
    return ifPresent(readFile(this.file(key)));
  }

  async write(key: string, body: string | Buffer): Promise<void> {
    return writeFileAtomic(this.file(key), body);
  }

  async upload(key: string, localFile: string): Promise<void> {
    const target = this.file(key);
    await mkdir(path.dirname(target), { recursive: true });
    const temporary = temporarySibling(target);
    await pipeline(createReadStream(localFile), createWriteStream(temporary));
    await rename(temporary, target);
  }

  async download(key: string, localFile: string): Promise<boolean> {
    await mkdir(path.dirname(localFile), { recursive: true });
    const temporary = temporarySibling(localFile);
    if ((await ifPresent(copyFile(this.file(key), temporary).then(() => true))) === undefined) return false;
    await rename(temporary, localFile);
    return true;
  }

  async list(prefix: string): Promise<StoredFile[]> {
    const files: StoredFile[] = [];
    const walk = async (dir: string, keyPrefix: string): Promise<void> => {
      const entries = (await ifPresent(readdir(dir, { withFileTypes: true }))) ?? [];
      for (const entry of entries) {
        const key = `${keyPrefix}${entry.name}`;
        // Only into folders that can hold a match (a job folder's thousands of trial folders are not walked for
        // plan.jsonl).
        if (entry.isDirectory()) {
          if (prefix.startsWith(`${key}/`) || `${key}/`.startsWith(prefix))
            await walk(path.join(dir, entry.name), `${key}/`);
        } else if (entry.isFile() && key.startsWith(prefix)) {
          const info = await ifPresent(stat(path.join(dir, entry.name)));
          if (info) files.push({ key, size: info.size, version: `${info.size}:${info.mtimeMs}` });
        }
      }
    };
    await walk(this.root, '');
    return files.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async remove(keys: string[]): Promise<void> {
    await Promise.all(keys.map((key) => rm(this.file(key), { force: true })));
  }
}
