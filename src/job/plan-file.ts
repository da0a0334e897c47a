import { isFolderName } from '../files/inside';
import { jobStore, verifySignedJobFile, writeSignedJobFile } from '../storage/job-folder';
import type { PlannedTrial } from '../contracts/trial';

const PLAN_FILE = 'plan.jsonl';

/**
 * `<job>/plan.jsonl`: one planned trial per line. The Job workflow reads it in pages through an activity, so trial
 * specs never travel as one huge workflow input. It lives where the job does (a folder or an object store), signed:
 * workers refuse a plan that is not as its writer signed it (src/secrets/job-file-signature.ts).
 */
export async function writePlanFile(jobDir: string, trials: PlannedTrial[]): Promise<void> {
  await writeSignedJobFile(jobDir, PLAN_FILE, trials.map((trial) => JSON.stringify(trial)).join('\n') + '\n');
}

let cached: { jobDir: string; version: string; trials: PlannedTrial[] } | undefined;

export async function readPlanPage(jobDir: string, offset: number, limit: number): Promise<PlannedTrial[]> {
  const store = await jobStore(jobDir);
  // Its version (mtime, or ETag) is asked for each page; the file is read again only when it changed.
  const [file] = (await store.list(PLAN_FILE)).filter((entry) => entry.key === PLAN_FILE);
  if (!file) throw new Error(`${jobDir}/${PLAN_FILE}: missing`);
  if (!cached || cached.jobDir !== jobDir || cached.version !== file.version) {
    const body = (await store.read(PLAN_FILE)) ?? Buffer.alloc(0);
    await verifySignedJobFile(jobDir, PLAN_FILE, body);
    const text = body.toString('utf8');
    const lines = text.split('\n').filter((line) => line.length > 0);
    const trials = lines.map((line) => JSON.parse(line) as PlannedTrial);
    // Trial names become folders on every worker: a plan whose names are not folder names was not written by Rollout.
    const bad = trials.findIndex((trial) => !isFolderName(trial?.spec?.trialName));
    if (bad !== -1) throw new Error(`${jobDir}/${PLAN_FILE}: line ${bad + 1}: spec.trialName is not a folder name`);
    cached = { jobDir, version: file.version, trials };
  }
  return cached.trials.slice(offset, offset + limit);
}
