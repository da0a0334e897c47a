/**
 * Secret values out of collected trial folders, at any size. The rule (docs/results.md):
 * - every non-empty value is redacted as its exact bytes, in file contents and in file and folder names;
 * - a value of SHORT_SECRET_BYTES or more is redacted wherever it occurs;
 * - a shorter one only where it stands alone, not next to a letter, digit or `_` (a key `abc` is redacted in
 *   `KEY=abc` but `abcdef` is left alone): short values occur by chance inside ordinary words and numbers.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent } from '../files/absent';
import { openFreshFile } from '../environments/host-files';

export const REDACTED = '[REDACTED]';
export const SHORT_SECRET_BYTES = 8;
const WORD_BYTE = 'A-Za-z0-9_';

/**
 * Finds secrets in text of any length, fed in chunks. Bytes are handled as latin1 strings (one character per byte),
 * so a match never depends on how the text was cut or on its encoding.
 */
export class SecretScrubber {
  private readonly pattern: RegExp;
  /** The longest secret in bytes: how much text is held back in case a secret straddles two chunks. */
  private readonly holdBack: number;
  /** Text not yet passed on, and the one character before it (context for the stand-alone rule). */
  private pending = '';
  private before = '';
  /** How many matches were redacted so far. */
  redactions = 0;

  constructor(private readonly secrets: string[]) {
    const values = [...new Set(secrets.filter((secret) => secret !== ''))]
      .map((secret) => Buffer.from(secret, 'utf8').toString('latin1'))
      .sort((a, b) => b.length - a.length); // longest first: a secret inside another is not matched alone
    const alternatives = values.map((value) =>
      value.length >= SHORT_SECRET_BYTES
        ? escapeRegExp(value)
        : `(?<![${WORD_BYTE}])${escapeRegExp(value)}(?![${WORD_BYTE}])`
    );
    this.pattern = new RegExp(alternatives.join('|') || '(?!)', 'g');
    this.holdBack = values[0]?.length ?? 0;
  }

  /** Scrubbed text that is final; the last few bytes wait for the next chunk. */
  push(chunk: Buffer): Buffer {
    this.pending += chunk.toString('latin1');
    return this.drain(this.pending.length - this.holdBack - 1);
  }

  end(): Buffer {
    return this.drain(this.pending.length);
  }

  /** The same secrets redacted in a whole text at once (a file name), by a fresh scrubber. */
  scrub(text: string): string {
    const scrubber = new SecretScrubber(this.secrets);
    return Buffer.concat([scrubber.push(Buffer.from(text, 'utf8')), scrubber.end()]).toString('utf8');
  }

  /** Passes on pending text up to `limit` (further if a match runs past it), with every match redacted. */
  private drain(limit: number): Buffer {
    if (limit <= 0) return Buffer.alloc(0);
    // One character of context before the pending text, so the stand-alone rule sees what came before.
    const text = this.before + this.pending;
    const offset = this.before.length;
    let out = '';
    let from = offset;
    this.pattern.lastIndex = offset;
    for (let match = this.pattern.exec(text); match; match = this.pattern.exec(text)) {
      if (match.index >= offset + limit) break;
      out += text.slice(from, match.index) + REDACTED;
      from = match.index + match[0].length;
      this.redactions += 1;
    }
    const end = Math.max(from, offset + limit);
    out += text.slice(from, end);
    this.before = text.slice(end - 1, end);
    this.pending = text.slice(end);
    return Buffer.from(out, 'latin1');
  }
}

/**
 * Redacts secrets in every regular file under `dir` (contents streamed, so files of any size) and in the names of
 * its files and folders. Links are not followed. Returns how many files or names changed.
 */
export async function scrubSecrets(dir: string, secrets: string[]): Promise<number> {
  if (secrets.every((secret) => secret === '')) return 0;
  const names = new SecretScrubber(secrets);
  let changed = 0;
  // A folder that cannot be read (EACCES, EIO, EMFILE) is an error, never a folder left unscrubbed; only one that is
  // not there (nothing was collected) is skipped.
  for (const entry of (await ifPresent(readdir(dir, { withFileTypes: true }))) ?? []) {
    let full = path.join(dir, entry.name);
    const name = names.scrub(entry.name);
    if (name !== entry.name) {
      const renamed = path.join(dir, await freeName(dir, name));
      await rename(full, renamed);
      full = renamed;
      changed += 1;
    }
    if (entry.isDirectory()) changed += await scrubSecrets(full, secrets);
    else if (entry.isFile() && (await scrubFile(full, new SecretScrubber(secrets)))) changed += 1;
  }
  return changed;
}

/** `value` with the secrets redacted in every string it holds (a result about to be written). */
export function scrubbedValue<T>(value: T, secrets: string[]): T {
  const scrubber = new SecretScrubber(secrets);
  return JSON.parse(JSON.stringify(value), (_key, item: unknown) =>
    typeof item === 'string' ? scrubber.scrub(item) : item
  ) as T;
}

/** Rewrites `file` through the scrubber into a sibling, replacing it only when something was redacted. */
async function scrubFile(file: string, scrubber: SecretScrubber): Promise<boolean> {
  const temporary = path.join(path.dirname(file), `.rollout-scrub-${randomBytes(6).toString('hex')}`);
  const output = await openFreshFile(temporary, (await lstat(file)).mode & 0o777);
  try {
    for await (const chunk of createReadStream(file)) await output.write(scrubber.push(chunk as Buffer));
    await output.write(scrubber.end());
  } finally {
    await output.close();
  }
  if (scrubber.redactions > 0) await rename(temporary, file);
  else await rm(temporary, { force: true });
  return scrubber.redactions > 0;
}

/** `name`, or `name-2`, `name-3`… when another entry of `dir` already has it. */
async function freeName(dir: string, name: string): Promise<string> {
  for (let n = 1; ; n++) {
    const candidate = n === 1 ? name : `${name}-${n}`;
    if (!(await ifPresent(lstat(path.join(dir, candidate))))) return candidate;
  }
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
