import { unsafeKeyReason } from '../files/inside';
import { log } from '../log';
import type { StoredFile } from '../contracts/store';

/**
 * The files whose keys can name a local file: anyone who can write to a bucket can give an object any key, and a key
 * with `..` segments would be written outside the copy. The others are left out, each named in a warning.
 */
export function safeKeys(root: string, files: StoredFile[]): StoredFile[] {
  return files.filter(({ key }) => {
    const reason = unsafeKeyReason(key);
    if (reason !== undefined) log.warn(`${root}: key ${JSON.stringify(key)} not copied (${reason})`);
    return reason === undefined;
  });
}
