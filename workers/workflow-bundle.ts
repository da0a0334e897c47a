/**
 * The workflow code as a bundle, built once per content and kept in the host cache: a worker that bundled at start
 * (a second or two, more under load) would leave a just-submitted job waiting for its first workflow task.
 * `npm run build` builds it ahead; a worker whose compiled code changed since builds (and keeps) its own. An image
 * ships it beside the code (dist/workflow-bundles), as the cache of a read-only file system would hide it.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';

import { bundleWorkflowCode } from '@temporalio/worker';

import { hostCacheDir } from '../src/host-cache';
import { writeFileAtomic } from '../src/files/atomic';

/** Bundles shipped beside the compiled code: the rollout image builds its own at build time (read-only at run time). */
const SHIPPED_DIR = path.resolve(__dirname, '..', 'workflow-bundles');

/** Compiled folders the workflows may import from (workflows/ imports types and pure helpers of src/). */
const SOURCE_FOLDERS = ['workflows', 'src'];

let pending: Promise<{ codePath: string }> | undefined;

/** The bundle's path, found (or built) once per process: the CLI asks early, while it plans the job. */
export function workflowBundle(): Promise<{ codePath: string }> {
  pending ??= findOrBuildBundle();
  pending.catch(() => (pending = undefined)); // a failure is reported to the caller, and tried again next time
  return pending;
}

async function findOrBuildBundle(): Promise<{ codePath: string }> {
  const workflowsPath = require.resolve('../workflows');
  const name = `${await codeDigest()}.js`;
  const shipped = path.join(SHIPPED_DIR, name);
  if (existsSync(shipped)) return { codePath: shipped };
  const file = path.join(hostCacheDir(), 'workflow-bundles', name);
  if (!existsSync(file)) {
    const { code } = await bundleWorkflowCode({ workflowsPath, logger: quietLogger });
    await writeFileAtomic(file, code);
  }
  return { codePath: file };
}

/** Digest of the compiled code a bundle is made of, and of the Temporal workflow library bundled with it. */
async function codeDigest(): Promise<string> {
  const root = path.resolve(__dirname, '..');
  const hash = createHash('sha256');
  hash.update(await readFile(require.resolve('@temporalio/workflow/package.json')));
  for (const folder of SOURCE_FOLDERS) {
    const entries = await readdir(path.join(root, folder), { recursive: true, withFileTypes: true });
    const files = entries
      .filter((entry) => entry.isFile() && entry.name.endsWith('.js'))
      .map((entry) => path.join(entry.parentPath, entry.name))
      .sort();
    for (const file of files)
      hash
        .update(path.relative(root, file))
        .update('\0')
        .update(await readFile(file));
  }
  return hash.digest('hex').slice(0, 24);
}

/** Bundling logs only its errors. */
export const quietLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: (message: string) => console.error(message),
};

if (require.main === module) {
  workflowBundle().then(
    ({ codePath }) => console.error(`workflow bundle: ${codePath}`),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    }
  );
}
