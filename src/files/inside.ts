/**
 * Paths built from names that came from outside (an object store's keys, a job folder's plan.jsonl and result.json,
 * a task): checked before any path is built from them, so no name reaches a file outside the folder it belongs to.
 */
import path from 'node:path';

/** `root/relative` when it stays inside root (root itself included); undefined for `../` escapes. */
export function resolveInside(root: string, relative: string): string | undefined {
  const target = path.resolve(root, relative);
  const fromRoot = path.relative(root, target);
  const escapes = fromRoot === '..' || fromRoot.startsWith(`..${path.sep}`) || path.isAbsolute(fromRoot);
  return escapes ? undefined : target;
}

/**
 * A trial's or a job's folder name: a letter, digit or `_` first (uniqueFolderName in src/job/plan.ts replaces any
 * other), then letters, digits and `._~-`. Never `.`, `..`, a hidden name, a separator or an absolute path.
 */
const FOLDER_NAME = /^[A-Za-z0-9_][A-Za-z0-9._~-]*$/;
const MAX_NAME_LENGTH = 255;

export function isFolderName(name: unknown): name is string {
  return typeof name === 'string' && name.length <= MAX_NAME_LENGTH && FOLDER_NAME.test(name);
}

/** One path segment that stays where it is put: not empty, `.` or `..`, no separator, backslash or NUL. */
export function isPathSegment(name: unknown): name is string {
  return (
    typeof name === 'string' &&
    name.length > 0 &&
    name.length <= MAX_NAME_LENGTH &&
    name !== '.' &&
    name !== '..' &&
    !['/', '\\', '\u0000'].some((character) => name.includes(character))
  );
}

/** `parent/name` when `name` is a folder name (isFolderName) that stays inside `parent`; undefined otherwise. */
export function childFolder(parent: string, name: unknown): string | undefined {
  if (!isFolderName(name)) return undefined;
  const dir = resolveInside(parent, name);
  return dir === undefined || dir === path.resolve(parent) ? undefined : dir;
}

/** Why an object-store key cannot name a local file (empty, `.` or `..` segments, a backslash, NUL), or undefined. */
export function unsafeKeyReason(key: string): string | undefined {
  if (key.includes('\u0000')) return 'a NUL character';
  if (key.includes('\\')) return 'a backslash';
  if (key.split('/').some((segment) => segment === '')) return 'an empty segment';
  if (key.split('/').some((segment) => segment === '.' || segment === '..')) return 'a "." or ".." segment';
  return undefined;
}

export class UnsafeKeyError extends Error {}

/** The local file of `key` under `dir`; throws UnsafeKeyError when the key is unsafe or would leave `dir`. */
export function keyPath(dir: string, key: string): string {
  const reason = unsafeKeyReason(key);
  const file = reason === undefined ? resolveInside(dir, key.split('/').join(path.sep)) : undefined;
  if (file === undefined || file === path.resolve(dir))
    throw new UnsafeKeyError(`key "${JSON.stringify(key).slice(1, -1)}" refused: ${reason ?? 'outside its folder'}`);
  return file;
}
