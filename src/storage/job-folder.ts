/**
 * A job's own files (config.json, plan.jsonl, result.json) read and written where the job lives, a local folder or
 * an object store, through one Store per job.
 */
import { InputError } from '../contracts/errors';
import type { JobLocation } from '../secrets/job-file-signature';
import { SIGNATURE_SUFFIX, signJobFile, UnsignedJobFileError, verifyJobFile } from '../secrets/job-file-signature';
import { isStoreUrl, joinStoreUrl } from './location';
import type { Store } from './store';
import { openStore, readStoredJson, writeStoredJson } from './store';
import { workingJobDir } from './working-dir';
import path from 'node:path';

const stores = new Map<string, Promise<Store>>();

/** The store rooted at `jobDir` (or at a jobs_dir), opened once per process. */
export function jobStore(jobDir: string): Promise<Store> {
  let store = stores.get(jobDir);
  if (!store) {
    store = openStore(jobDir);
    stores.set(jobDir, store);
  }
  return store;
}

export async function readJobJson<T>(jobDir: string, name: string): Promise<T | undefined> {
  return readStoredJson<T>(await jobStore(jobDir), name);
}

export async function writeJobJson(jobDir: string, name: string, value: unknown): Promise<void> {
  await writeStoredJson(await jobStore(jobDir), name, value);
}

/**
 * The job's identity its files are signed with: where it lives (an absolute path, or its URL), so a file signed for
 * one job does not pass in another's folder or bucket prefix.
 */
function jobLocation(jobDir: string): JobLocation {
  return isStoreUrl(jobDir) ? jobDir.replace(/\/+$/, '') : path.resolve(jobDir);
}

/** A job file workers act on (config.json, plan.jsonl), written with its signature beside it (`<name>.sig`). */
export async function writeSignedJobFile(jobDir: string, name: string, content: string): Promise<void> {
  const store = await jobStore(jobDir);
  const body = Buffer.from(content, 'utf8');
  await store.write(name, body);
  await store.write(`${name}${SIGNATURE_SUFFIX}`, signJobFile(jobLocation(jobDir), name, body));
}

/** `content` of job file `name`, checked against its signature in the job's folder or store (else thrown). */
export async function verifySignedJobFile(jobDir: string, name: string, content: Buffer): Promise<void> {
  const signature = await (await jobStore(jobDir)).read(`${name}${SIGNATURE_SUFFIX}`);
  const where = isStoreUrl(jobDir) ? joinStoreUrl(jobDir, name) : path.join(jobDir, name);
  verifyJobFile(where, jobLocation(jobDir), name, content, signature);
}

/**
 * A job's config.json as its writer signed it, for the CLI to act on again (`rollout resume`, a job run again keeping
 * its pinned tasks); undefined when there is none. Not as signed: an InputError naming the file (exit 2), so it is
 * never re-signed as if it were the operator's.
 */
export async function readVerifiedJobConfig<T>(jobDir: string): Promise<T | undefined> {
  const body = await (await jobStore(jobDir)).read('config.json');
  if (body === undefined) return undefined;
  try {
    await verifySignedJobFile(jobDir, 'config.json', body);
  } catch (err) {
    if (err instanceof UnsignedJobFileError) throw new InputError([{ file: err.file, message: err.reason }]);
    throw err;
  }
  return JSON.parse(body.toString('utf8')) as T;
}

/** Copies of a store job's files on this host, by local path: downloaded once per process. */
const copies = new Map<string, Promise<string>>();

/**
 * A job file as a local path: the file itself for a local job; for a job in a store, a copy in this host's working
 * folder of the job, fetched the first time (config.json never changes while a job runs).
 */
export function localJobFile(jobDir: string, name: string): Promise<string> {
  const file = path.join(workingJobDir(jobDir), name);
  if (!isStoreUrl(jobDir)) return Promise.resolve(file);
  let copy = copies.get(file);
  if (!copy) {
    copy = jobStore(jobDir).then(async (store) => {
      if (!(await store.download(name, file))) throw new Error(`${jobDir}/${name}: not in the store`);
      return file;
    });
    copy.catch(() => copies.delete(file));
    copies.set(file, copy);
  }
  return copy;
}
