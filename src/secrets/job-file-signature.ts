/**
 * A job's config.json (agent commands and env) and plan.jsonl (trial specs) decide what workers run, and they live
 * where the job does: a folder or a bucket that others may write to. Whoever writes them (the CLI, `rollout serve`,
 * the library) signs them with an HMAC keyed from ROLLOUT_SECRET_KEY (the key that seals secrets, src/secrets/
 * sealed-env.ts); workers verify before they use either. A file without its signature, or changed since, is refused.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

import { keyId, secretKey } from './sealed-env';

const VERSION = 'v1';
export const SIGNATURE_SUFFIX = '.sig';

/** A job file that is not as its writer signed it: what workers run is not taken from it. */
export class UnsignedJobFileError extends Error {
  override name = 'UnsignedJobFileError';
}

function mac(name: string, content: Buffer): Buffer {
  // Its own key, derived from the sealing key: a signature is never a valid seal or the other way round.
  const key = createHmac('sha256', secretKey()).update('rollout job-file signing').digest();
  return createHmac('sha256', key).update(`${name}\0`).update(content).digest();
}

/** The signature of job file `name` (its base name, e.g. config.json) with this content. */
export function signJobFile(name: string, content: Buffer): string {
  return `${VERSION}:${keyId()}:${mac(name, content).toString('base64url')}\n`;
}

/**
 * Throws UnsignedJobFileError, one line naming the file (`where`), unless `signature` is this content's with this
 * machine's key.
 */
export function verifyJobFile(where: string, name: string, content: Buffer, signature: Buffer | undefined): void {
  if (signature === undefined)
    throw new UnsignedJobFileError(
      `${where}: not signed (${name}${SIGNATURE_SUFFIX} is missing): refused; a job folder written by Rollout has it`
    );
  const [version, key, digest] = signature.toString('utf8').trim().split(':');
  if (version !== VERSION || !key || !digest)
    throw new UnsignedJobFileError(`${where}: ${name}${SIGNATURE_SUFFIX} is not a signature: refused`);
  if (key !== keyId())
    throw new UnsignedJobFileError(
      `${where}: signed with another key: refused (set the same ROLLOUT_SECRET_KEY where jobs are started and on every worker)`
    );
  const expected = mac(name, content);
  const given = Buffer.from(digest, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    throw new UnsignedJobFileError(`${where}: changed since it was signed: refused`);
}
