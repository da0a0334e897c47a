/**
 * A job's config.json (agent commands and env) and plan.jsonl (trial specs) decide what workers run, and they live
 * where the job does: a folder or a bucket that others may write to. Whoever writes them (the CLI, `rollout serve`,
 * the library) signs them with an HMAC keyed from ROLLOUT_SECRET_KEY (the key that seals secrets, src/secrets/
 * sealed-env.ts); workers and `rollout resume` verify before they use either. A file without its signature, changed
 * since, or signed for another job's folder (copied from one job, or bucket prefix, into another) is refused.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

import { keyId, secretKey } from './sealed-env';

/** v2 binds the job's folder; v1 (content and file name only) is refused: it could be replayed into any job. */
const VERSION = 'v2';
export const SIGNATURE_SUFFIX = '.sig';

/** A job file that is not as its writer signed it: what workers run is not taken from it. */
export class UnsignedJobFileError extends Error {
  override name = 'UnsignedJobFileError';
  constructor(
    /** The file refused, as users know it (a path, or a URL in an object store). */
    readonly file: string,
    /** Why, without the file. */
    readonly reason: string
  ) {
    super(`${file}: ${reason}`);
  }
}

/** Where a job lives, as signed: the folder's absolute path, or its URL in an object store. */
export type JobLocation = string;

function mac(location: JobLocation, name: string, content: Buffer): Buffer {
  // Its own key, derived from the sealing key: a signature is never a valid seal or the other way round.
  const key = createHmac('sha256', secretKey()).update('rollout job-file signing').digest();
  return createHmac('sha256', key).update(`${location}\0${name}\0`).update(content).digest();
}

/** The signature of job file `name` (its base name, e.g. config.json) with this content, in the job at `location`. */
export function signJobFile(location: JobLocation, name: string, content: Buffer): string {
  // The folder is named in the clear too, so a refusal can say which job the file came from.
  const named = Buffer.from(location, 'utf8').toString('base64url');
  return `${VERSION}:${keyId()}:${mac(location, name, content).toString('base64url')}:${named}\n`;
}

/**
 * Throws UnsignedJobFileError, one line naming the file (`where`), unless `signature` is this content's, in the job at
 * `location`, with this machine's key.
 */
export function verifyJobFile(
  where: string,
  location: JobLocation,
  name: string,
  content: Buffer,
  signature: Buffer | undefined
): void {
  const refuse = (reason: string) => new UnsignedJobFileError(where, reason);
  if (signature === undefined)
    throw refuse(`not signed (${name}${SIGNATURE_SUFFIX} is missing): refused; a job folder written by Rollout has it`);
  const [version, key, digest, named] = signature.toString('utf8').trim().split(':');
  if (version === 'v1')
    throw refuse(
      `signed by an older Rollout, without its job folder: refused (remove it and its .sig, then run the job file again: finished trials are kept)`
    );
  if (version !== VERSION || !key || !digest || named === undefined)
    throw refuse(`${name}${SIGNATURE_SUFFIX} is not a signature: refused`);
  if (key !== keyId())
    throw refuse(
      `signed with another key: refused (set the same ROLLOUT_SECRET_KEY where jobs are started and on every worker)`
    );
  const signedFor = Buffer.from(named, 'base64url').toString('utf8');
  if (signedFor !== location)
    throw refuse(
      `signed for another job's folder (${JSON.stringify(signedFor.slice(0, 300))}), copied or moved here: refused; a job's files are valid only where they were written`
    );
  const given = Buffer.from(digest, 'base64url');
  const expected = mac(location, name, content);
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    throw refuse('changed since it was signed: refused');
}
