import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { isScalar, LineCounter, parseDocument, visit } from 'yaml';

import type { Problem } from '../contracts/errors';
import { InputError, zodProblems } from '../contracts/errors';
import { isImportPath } from '../environments/external';
import { loadDataset } from '../task/load';
import { isStoreUrl, parseS3Url } from '../storage/location';
import { loadLocalDataset } from './local-dataset';
import type { JobConfig } from '../contracts/job-config';
import { PathDatasetSchema } from '../contracts/job-config';
import { JobConfigSchema } from './checks';

/**
 * A job as resolved from its file: defaults applied, name set, paths absolute, and the file itself (so later problems
 * can name it). Secrets stay `${VAR}`.
 */
export type ResolvedJob = JobConfig & { name: string; jobs_dir: string; file: string };

/**
 * Reads job.yaml / job.yml / job.json; every problem is reported at once, one line each. `override` changes the
 * file's mapping before it is validated (`rollout run`'s flags).
 */
export async function loadJobFile(
  file: string,
  override: (raw: Record<string, unknown>) => Record<string, unknown> = (raw) => raw
): Promise<ResolvedJob> {
  const absolute = path.resolve(file);
  const raw = await readConfigMapping(absolute, 'job keys (name, agents, datasets, …)');
  const defaultName = path.basename(absolute).replace(/\.(ya?ml|json)$/, '');
  return loadJobConfig(override(raw), absolute, path.dirname(absolute), defaultName);
}

/**
 * A YAML or JSON file (by its extension) holding one mapping; `what` says what its keys are, in the problem when it
 * holds something else. Unreadable, invalid or not a mapping: one line naming the file.
 */
export async function readConfigMapping(absolute: string, what: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    // A FIFO or device would block the read for ever.
    if (!(await stat(absolute)).isFile()) throw new InputError([{ file: absolute, message: 'not a regular file' }]);
    text = await readFile(absolute, 'utf8');
  } catch (err) {
    if (err instanceof InputError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new InputError([{ file: absolute, message: code === 'ENOENT' ? 'no such file' : `unreadable (${code})` }]);
  }
  let raw: unknown;
  try {
    raw = absolute.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    const message = (err as Error).message.split('\n')[0];
    throw new InputError([
      { file: absolute, message: `invalid ${absolute.endsWith('.json') ? 'JSON' : 'YAML'}: ${message}` },
    ]);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new InputError([{ file: absolute, message: `expected a mapping of ${what}` }]);
  }
  return raw as Record<string, unknown>;
}

/**
 * A job file's mapping (or one made from `rollout run`'s flags, named `source`), validated with its local tasks'
 * problems and its jobs_dir's, all at once. Relative paths resolve against `base`; `defaultName` names a job whose
 * mapping has no `name`.
 */
export async function loadJobConfig(
  raw: Record<string, unknown>,
  source: string,
  base: string,
  defaultName?: string
): Promise<ResolvedJob> {
  let job: ResolvedJob | undefined;
  const problems: Problem[] = [];
  try {
    job = parseJobConfig(raw, source, base, { defaultName });
  } catch (err) {
    if (!(err instanceof InputError)) throw err;
    // Report the tasks' problems too, so one run lists everything to fix.
    problems.push(...err.problems, ...(await localTaskProblems(raw, source, base)));
  }
  const jobsDir = job?.jobs_dir ?? (typeof raw.jobs_dir === 'string' ? raw.jobs_dir : 'jobs');
  problems.push(...(await jobsDirProblems(source, jobsDir)));
  if (!job || problems.length > 0) throw new InputError(problems);
  return job;
}

/**
 * The problems of the tasks in a job file's local datasets (read from the file as it is, valid or not): of the tasks
 * it selects, or of every task when its entry is itself invalid.
 */
async function localTaskProblems(raw: object, file: string, base: string): Promise<Problem[]> {
  const datasets = 'datasets' in raw && Array.isArray(raw.datasets) ? (raw.datasets as unknown[]) : [];
  const problems: Problem[] = [];
  for (const [index, dataset] of datasets.entries()) {
    const dir = (dataset as { path?: unknown } | null)?.path;
    if (typeof dir !== 'string') continue;
    const entry = PathDatasetSchema.safeParse(dataset);
    const loaded = entry.success
      ? await loadLocalDataset(
          { ...entry.data, path: resolveExisting(base, dir) },
          { file, field: `datasets.${index}` }
        )
      : await loadDataset(resolveExisting(base, dir));
    problems.push(...loaded.problems);
  }
  return problems;
}

/**
 * jobs_dir must be a folder, or not exist yet (it is made); a file there (or above it) is a mistake to report. An
 * object store URL must name a bucket (whether it can be reached is asked before the job starts, exit 3).
 */
async function jobsDirProblems(file: string, jobsDirGiven: string): Promise<Problem[]> {
  if (isStoreUrl(jobsDirGiven)) {
    if (parseS3Url(jobsDirGiven)) return [];
    return [{ file, field: 'jobs_dir', message: `${jobsDirGiven}: not an s3://bucket/prefix URL` }];
  }
  const jobsDir = path.resolve(jobsDirGiven);
  try {
    if ((await stat(jobsDir)).isDirectory()) return [];
    return [{ file, field: 'jobs_dir', message: `${jobsDir} is a file, not a folder` }];
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return [];
    if (code === 'ENOTDIR') return [{ file, field: 'jobs_dir', message: `${jobsDir}: part of the path is a file` }];
    return [{ file, field: 'jobs_dir', message: `${jobsDir}: unusable (${code})` }];
  }
}

/**
 * A job config given as an object (the library API, `rollout serve`), validated by the same schema as job.yaml.
 * `source` names it in errors; relative dataset paths resolve against `baseDir`. Without `defaultName` (a job file's
 * name) the config must name the job.
 */
export function parseJobConfig(
  raw: unknown,
  source: string,
  baseDir: string,
  options: { defaultName?: string } = {}
): ResolvedJob {
  const parsed = JobConfigSchema.safeParse(raw);
  const problems = parsed.success ? [] : zodProblems(source, parsed.error.issues);
  const named = (raw as { name?: unknown } | null)?.name !== undefined;
  if (!named && options.defaultName === undefined)
    problems.unshift({ file: source, field: 'name', message: 'required (it names the job and its folder)' });
  const name = parsed.success ? (parsed.data.name ?? options.defaultName) : undefined;
  if (!parsed.success || name === undefined) throw new InputError(problems);
  return resolveJob(parsed.data, source, baseDir, name);
}

/**
 * YAML with keys checked for uniqueness in one pass: the library's own check compares every key with every other
 * key of its mapping, which takes minutes on a job file with 200,000 keys.
 */
function parseYaml(text: string): unknown {
  const lines = new LineCounter();
  const document = parseDocument(text, { uniqueKeys: false, lineCounter: lines });
  if (document.errors[0]) throw document.errors[0];
  let duplicate: string | undefined;
  visit(document, {
    Map(_, map) {
      const seen = new Set<unknown>();
      for (const { key } of map.items) {
        const name = isScalar(key) ? key.value : key;
        if (seen.has(name)) {
          const line = isScalar(key) && key.range ? ` at line ${lines.linePos(key.range[0]).line}` : '';
          duplicate = `duplicate key ${JSON.stringify(String(name))}${line}`;
          return visit.BREAK;
        }
        seen.add(name);
      }
      return undefined;
    },
  });
  if (duplicate) throw new Error(duplicate);
  return document.toJS();
}

/**
 * Dataset paths are relative to the job file (so a job runs from any folder), falling back to the working folder
 * when only that one exists; jobs_dir is relative to the working folder, like Harbor's `jobs/`.
 */
function resolveJob(job: JobConfig, file: string, base: string, name: string): ResolvedJob {
  return {
    ...job,
    name,
    file,
    jobs_dir: isStoreUrl(job.jobs_dir) ? job.jobs_dir.replace(/\/+$/, '') : path.resolve(job.jobs_dir),
    datasets: job.datasets.map((dataset) => {
      if ('path' in dataset) return { ...dataset, path: resolveExisting(base, dataset.path) };
      if (dataset.registry && 'path' in dataset.registry)
        return { ...dataset, registry: { path: resolveExisting(base, dataset.registry.path) } };
      return dataset;
    }),
    services: job.services.map((service) => ({ ...service, cwd: path.resolve(base, service.cwd ?? '.') })),
    // A provider module's path is the job file's (config.json, in the job's folder, keeps it absolute).
    environment:
      job.environment.import !== undefined && isImportPath(job.environment.import)
        ? { ...job.environment, import: path.resolve(base, job.environment.import) }
        : job.environment,
  };
}

function resolveExisting(base: string, relative: string): string {
  const fromFile = path.resolve(base, relative);
  if (existsSync(fromFile)) return fromFile;
  const fromCwd = path.resolve(relative);
  return existsSync(fromCwd) ? fromCwd : fromFile;
}
