import { readFile } from 'node:fs/promises';
import path from 'node:path';

import { writeFileAtomic } from '../files/atomic';
import { workingJobDir } from '../storage/working-dir';
import { JOB_FILES, trialLayout } from '../contracts/paths';

export async function writeJsonAtomic(
  file: string,
  value: unknown,
  stillWanted?: () => Promise<boolean>
): Promise<void> {
  await writeFileAtomic(file, `${JSON.stringify(value, null, 2)}\n`, stillWanted);
}

/**
 * Reads a JSON file; undefined only when it is missing. Any other failure (a transient NFS error, a file that is not
 * JSON, which an atomic write never leaves) throws, naming the file: taking such a file for missing would make a
 * finished trial look unrun, and its folder be replaced.
 */
export async function readJson<T>(file: string): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`${file}: cannot be read: ${(err as Error).message}`, { cause: err });
  }
  try {
    return JSON.parse(text) as T;
  } catch (err) {
    throw new Error(`${file}: not valid JSON: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Where things live in a job folder on this host. For a job in an object store (`s3://…`), the paths are in this
 * host's working folder of the job (src/storage/working-dir.ts), where trials write before their upload.
 */
export const jobFiles = {
  config: (jobDir: string) => path.join(workingJobDir(jobDir), JOB_FILES.config),
  result: (jobDir: string) => path.join(workingJobDir(jobDir), JOB_FILES.result),
  plan: (jobDir: string) => path.join(workingJobDir(jobDir), JOB_FILES.plan),
  trialDir: (jobDir: string, trialName: string) => path.join(workingJobDir(jobDir), trialName),
  trialResult: (jobDir: string, trialName: string) => trialLayout(path.join(workingJobDir(jobDir), trialName)).result,
  trialLog: (jobDir: string, trialName: string) => trialLayout(path.join(workingJobDir(jobDir), trialName)).log,
};
