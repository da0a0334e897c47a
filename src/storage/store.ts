/** Stores opened by where they are (./contract.ts), and JSON through them. */
import type { Store } from '../contracts/store';
import { isStoreUrl, parseS3Url } from './location';

export type { Store, StoredFile } from '../contracts/store';

/** The store holding `root` (a local folder or an s3:// URL); the S3 client is loaded only when one is used. */
export async function openStore(root: string): Promise<Store> {
  if (!isStoreUrl(root)) {
    const { LocalStore } = await import('./local');
    return new LocalStore(root);
  }
  const location = parseS3Url(root);
  if (!location) throw new Error(`${root}: not an s3://bucket/prefix URL`);
  const { S3Store } = await import('./s3');
  return new S3Store(root, location);
}

export async function readStoredJson<T>(store: Store, key: string): Promise<T | undefined> {
  // Any failure but absence names the file: taking it for missing would make a finished trial look unrun.
  const body = await store.read(key).catch((err: unknown) => {
    throw new Error(`${describeKey(store, key)}: cannot be read: ${(err as Error).message}`, { cause: err });
  });
  if (body === undefined) return undefined;
  try {
    return JSON.parse(body.toString('utf8')) as T;
  } catch (err) {
    throw new Error(`${describeKey(store, key)}: not valid JSON: ${(err as Error).message}`, { cause: err });
  }
}

export function writeStoredJson(store: Store, key: string, value: unknown): Promise<void> {
  return store.write(key, `${JSON.stringify(value, null, 2)}\n`);
}

/** A key as users would name it in a message. */
export function describeKey(store: Store, key: string): string {
  return `${store.root.replace(/\/+$/, '')}/${key}`;
}
