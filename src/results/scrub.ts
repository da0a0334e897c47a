import { lstat, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

const MAX_SCRUB_BYTES = 16 * 1024 * 1024;
export const REDACTED = '[REDACTED]';

/**
 * Replaces secret values in every regular file under `dir` (an agent may print its API key to its own logs), so
 * collected trial folders never hold them. Links are not followed.
 */
export async function scrubSecrets(dir: string, secrets: string[]): Promise<number> {
  if (secrets.length === 0) return 0;
  let changed = 0;
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) changed += await scrubSecrets(full, secrets);
    else if (entry.isFile() && (await lstat(full)).size <= MAX_SCRUB_BYTES) {
      const content = await readFile(full, 'latin1');
      let scrubbed = content;
      for (const secret of secrets) scrubbed = scrubbed.split(Buffer.from(secret).toString('latin1')).join(REDACTED);
      if (scrubbed !== content) {
        await writeFile(full, scrubbed, 'latin1');
        changed += 1;
      }
    }
  }
  return changed;
}
