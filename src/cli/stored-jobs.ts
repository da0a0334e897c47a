/**
 * Jobs in an object store from the command line: `rollout pull` and `rollout push`, and the local copies the readers
 * (status, view, export, the gate) work on, fetched incrementally with only what they show.
 */
import path from 'node:path';

import type { Command } from 'commander';

import { InputError } from '../contracts/errors';
import { hostCacheDir } from '../host-cache';
import type { ResolvedJob } from '../job/load';
import { loadJobFile } from '../job/load';
import { jobDirOf } from '../job/plan';
import { checkStore } from '../storage/check';
import { jobStore, localJobFile, readVerifiedJobConfig } from '../storage/job-folder';
import { isStoreUrl, joinStoreUrl, parseS3Url } from '../storage/location';
import type { CopySelection } from '../storage/sync';
import { pullFromStore, pushToStore } from '../storage/sync';

/** A job given by URL, or by name under an s3:// --jobs-dir. */
function storedJobUrl(nameOrUrl: string, jobsDir: string): string {
  return isStoreUrl(nameOrUrl) ? nameOrUrl.replace(/\/+$/, '') : jobDirOf({ jobs_dir: jobsDir, name: nameOrUrl });
}

function parsedUrl(url: string) {
  const location = parseS3Url(url);
  if (!location) throw new InputError([{ file: url, message: 'not an s3://bucket/prefix URL' }]);
  return location;
}

/** `rollout resume` of a job in a store: its config.json, as saved there, run again. */
export async function loadStoredJob(nameOrUrl: string, jobsDir: string): Promise<ResolvedJob> {
  const url = storedJobUrl(nameOrUrl, jobsDir);
  parsedUrl(url);
  await checkStore(await jobStore(url), 'read');
  // Verified before it is run and signed again (as a local job's, src/cli/run.ts).
  const verified = await readVerifiedJobConfig<Record<string, unknown>>(url);
  if (verified === undefined) {
    throw new InputError([{ file: joinStoreUrl(url, 'config.json'), message: `no job "${nameOrUrl}" there` }]);
  }
  return loadJobFile(await localJobFile(url, 'config.json'), () => verified);
}

/**
 * This host's copy of what a reader of an s3:// job (or jobs_dir) shows, brought up to date: the files of complete
 * trials only, each fetched once per version.
 */
export async function localCopy(url: string, selection: CopySelection): Promise<string> {
  const { bucket, prefix } = parsedUrl(url);
  await checkStore(await jobStore(url), 'read');
  const dir = path.join(hostCacheDir(), 'copies', selection, bucket, ...prefix.split('/').filter(Boolean));
  await pullFromStore(url, dir, selection);
  return dir;
}

/** A folder or URL given to a reader, as a local folder it can read. */
export function readableFolder(folderOrUrl: string, selection: CopySelection): Promise<string> {
  return isStoreUrl(folderOrUrl) ? localCopy(folderOrUrl, selection) : Promise.resolve(folderOrUrl);
}

function sizeOf(bytes: number): string {
  return bytes < 2 ** 20 ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

export function addStoreCommands(program: Command): void {
  program
    .command('pull <job> [dir]')
    .description('copy a job from an object store into a local folder (complete trials only; again: only what changed)')
    .option('--jobs-dir <url>', 'the s3:// jobs_dir a job name is under')
    .action(async (job: string, dir: string | undefined, opts: { jobsDir?: string }) => {
      if (!isStoreUrl(job) && !opts.jobsDir) {
        throw new InputError([
          { file: job, message: 'give the job as s3://bucket/prefix/job, or its name with --jobs-dir' },
        ]);
      }
      const url = storedJobUrl(job, opts.jobsDir ?? '');
      parsedUrl(url);
      await checkStore(await jobStore(url), 'read');
      const target = dir ?? path.join('jobs', path.posix.basename(url));
      const report = await pullFromStore(url, target);
      console.log(
        `pulled ${url} → ${target}: ${report.files} files (${sizeOf(report.bytes)}), ${report.unchanged} already there`
      );
    });

  program
    .command('push <dir> <url>')
    .description('copy a local job folder (or a jobs_dir) into an object store, for sharing (result.json files last)')
    .action(async (dir: string, url: string) => {
      parsedUrl(url);
      const store = await jobStore(url);
      await checkStore(store);
      const report = await pushToStore(dir, url);
      console.log(`pushed ${dir} → ${url}: ${report.files} files (${sizeOf(report.bytes)})`);
    });
}
