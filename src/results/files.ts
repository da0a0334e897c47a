import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Writes a file so readers see the old or the new content, never a torn one (write to a sibling, then rename). */
export async function writeFileAtomic(file: string, content: string): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temporary, content);
  await rename(temporary, file);
}

export async function writeJsonAtomic(file: string, value: unknown): Promise<void> {
  await writeFileAtomic(file, `${JSON.stringify(value, null, 2)}\n`);
}

/** Reads a JSON file; undefined when it is missing or unparsable (a crash mid-write cannot leave one, see above). */
export async function readJson<T>(file: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return undefined;
  }
}

/** Where things live in a job folder. */
export const jobFiles = {
  config: (jobDir: string) => path.join(jobDir, 'config.json'),
  result: (jobDir: string) => path.join(jobDir, 'result.json'),
  plan: (jobDir: string) => path.join(jobDir, 'plan.jsonl'),
  trialDir: (jobDir: string, trialName: string) => path.join(jobDir, trialName),
  trialResult: (jobDir: string, trialName: string) => path.join(jobDir, trialName, 'result.json'),
  trialLog: (jobDir: string, trialName: string) => path.join(jobDir, trialName, 'trial.log'),
};
