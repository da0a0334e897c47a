/**
 * One interface over where job folders live: a local folder (./local.ts) or an S3-compatible object store (./s3.ts).
 * Keys are '/'-separated and relative to the store's root (a jobs_dir, a job, …); a key names a file, and "folders"
 * are key prefixes, as in S3. Absent files read as undefined (ENOENT locally, 404 in a store), everything else throws.
 * A contract: it imports no implementation.
 */
export interface StoredFile {
  /** Relative to the store's root. */
  key: string;
  size: number;
  /** Changes when the content does (an ETag; locally size and mtime). */
  version: string;
}

export interface Store {
  /** The root as users name it: a folder or an s3:// URL. */
  readonly root: string;
  read(key: string): Promise<Buffer | undefined>;
  /** Readers see the old content or the new, never a torn write. */
  write(key: string, body: string | Buffer): Promise<void>;
  /** A local file's content, streamed (multipart in a store: any size, bounded memory). */
  upload(key: string, localFile: string): Promise<void>;
  /** Into `localFile` (its folder made), through a temporary file renamed into place; false when absent. */
  download(key: string, localFile: string): Promise<boolean>;
  /** Every file whose key starts with `prefix` (all when ''), in key order. */
  list(prefix: string): Promise<StoredFile[]>;
  remove(keys: string[]): Promise<void>;
}
