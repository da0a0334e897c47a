/** `rollout view`: the web app over job folders, or over jobs in an object store (served from a local copy). */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';

import { InputError } from '../contracts/errors';
import { log } from '../log';
import { isStoreUrl } from '../storage/location';
import { writeBundle } from '../viewer/bundle';
import { startViewServer } from '../viewer/server';
import { localCopy } from './stored-jobs';

/** How often the copy of an s3:// root is brought up to date while it is served (live, as a folder is). */
const REFRESH_MS = 5_000;

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive whole number');
  return n;
}

export function addViewCommand(program: Command): void {
  program
    .command('view [folder]')
    .description(
      'a web app over job folders (a jobs_dir or one job, a folder or s3:// URL), live while jobs run; ' +
        '--bundle writes a static site'
    )
    .option('--port <n>', 'port to listen on (default: a free one)', port)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--bundle <dir>', 'write the pages as a static site into this folder instead of serving them')
    .action(async (folder: string | undefined, opts: { port?: number; host: string; bundle?: string }) => {
      const given = folder ?? 'jobs';
      const inStore = isStoreUrl(given);
      if (!inStore && !existsSync(given)) throw new InputError([{ file: given, message: 'no such folder' }]);
      // A store's complete trials, copied here (and kept up to date below): the pages read them as a folder's.
      const root = inStore ? await localCopy(given, 'all') : given;
      if (opts.bundle) {
        const { pages } = await writeBundle(root, opts.bundle);
        console.log(`bundle: ${pages} pages in ${opts.bundle} (open ${path.join(opts.bundle, 'index.html')})`);
        return;
      }
      const server = await startViewServer(root, { port: opts.port, host: opts.host });
      console.log(`rollout view: ${server.url} (${inStore ? given : path.resolve(root)}; Ctrl-C stops)`);
      const stopped = new AbortController();
      const refresh = inStore ? refreshCopy(given, stopped.signal) : Promise.resolve();
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      stopped.abort();
      await refresh;
      await server.close();
    });
}

async function refreshCopy(url: string, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    await sleep(REFRESH_MS, undefined, { signal }).catch(() => undefined);
    if (signal.aborted) return;
    // Best effort: a store that does not answer for a while leaves the pages as they were.
    await localCopy(url, 'all').catch((err: unknown) => log.warn(`${url}: not refreshed: ${String(err)}`));
  }
}
