/**
 * `rollout build <job.yaml | dataset>`: every environment a job needs, built ahead of it where its provider builds
 * (the Docker engine; a cloud's builder, e.g. Modal's), a bounded number at once, with progress. Images are keyed by
 * the content of environment/ (the same key jobs use), so a job finds them and starts without build time. They belong
 * to no job: `delete: true` releases only a job's own reference to them.
 */
import { existsSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import path from 'node:path';

import { environmentKey } from '../environments/env-key';
import { checkProvider, createEnvironment, environmentRequirement, providerSettings } from '../environments';
import type { BuildRequest, ProviderSettings } from '../contracts/environment';
import { TaskEnvironmentError } from '../contracts/environment';
import { InputError } from '../contracts/errors';
import { loadJobDatasets } from '../job/datasets';
import { loadJobFile } from '../job/load';
import { jobDirOf, trialResources } from '../job/plan';
import { providerKeys } from '../contracts/job-config';
import { jobFiles, readJson } from '../results/files';
import type { ResolvedJob } from '../job/load';
import type { Task } from '../task/load';
import { loadDataset } from '../task/load';
import { verifierBuilds } from '../trial/verifier-build';
import { formatDuration } from './progress';

export interface BuildOptions {
  parallel?: number;
  force: boolean;
  hostId: string;
}

/** One image to build: the first task that needs it names it. */
interface EnvironmentBuild {
  task: Task;
  tasks: number;
  request: BuildRequest;
}

/** `rollout build`: 0 when every environment is there, 1 when any failed to build (each named with its reason). */
export async function buildEnvironments(target: string, options: BuildOptions): Promise<number> {
  if (!existsSync(target)) throw new InputError([{ file: target, message: 'no such job file or dataset folder' }]);
  const { tasks, timeoutMultiplier, type, settings, environment: jobEnvironment } = await tasksOf(target);
  const builder = `rollout-build/${new Date().toISOString()}`;
  const environment = createEnvironment(type, { hostId: options.hostId, deployment: 'rollout-build' });
  if (!environment.prebuild) {
    throw new InputError([
      { file: target, field: 'environment.type', message: `the ${type} environment builds no images ahead of a job` },
    ]);
  }
  const prebuild = environment.prebuild.bind(environment);
  const builds = new Map<string, EnvironmentBuild>();
  const add = (task: Task, request: BuildRequest) => {
    const key = JSON.stringify(
      environment.imagesBySize ? [request.envKey, request.resources, request.gpus] : [request.envKey]
    );
    const known = builds.get(key);
    if (known) known.tasks += 1;
    else builds.set(key, { task, tasks: 1, request });
  };
  for (const task of tasks) {
    const contextDir = path.join(task.dir, 'environment');
    const envKey = await environmentKey(contextDir, task.config.environment.docker_image);
    const common = { force: options.force, jobName: builder, settings };
    add(task, {
      ...common,
      contextDir,
      envKey,
      dockerImage: task.config.environment.docker_image,
      timeoutMs: task.config.environment.build_timeout_sec * timeoutMultiplier * 1000,
      resources: trialResources(jobEnvironment, task.resources),
      gpus: task.resources.gpus,
    });
    // A separate verifier's image too (Harbor builds it from tests/): a part of the main one, as a job builds it.
    for (const verifier of await verifierBuilds(task, { ...common, mainEnvKey: envKey, timeoutMultiplier })) {
      add(task, verifier);
    }
  }

  await environment.ping();
  const parallel = options.parallel ?? Math.max(1, Math.min(4, availableParallelism()));
  const progress = new BuildProgress(builds.size, tasks.length, parallel);
  const failures: string[] = [];
  const queue = [...builds.values()];
  const worker = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const build = next;
      const startedAt = Date.now();
      progress.started();
      try {
        const { image, fresh } = await prebuild(build.request);
        const how = fresh ? `built in ${formatDuration(Date.now() - startedAt)}` : 'already built';
        progress.finished(`${image} (${build.task.name}${build.tasks > 1 ? ` +${build.tasks - 1}` : ''}): ${how}`);
      } catch (err) {
        if (!(err instanceof TaskEnvironmentError)) throw err;
        const reason = err.message.trim().split('\n').slice(-3).join(' / ');
        failures.push(`${build.task.dir}: ${err.type}: ${reason}`);
        progress.finished(`${build.task.name}: FAILED`, true);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, builds.size) }, worker));
  progress.done();
  for (const failure of failures) console.error(`error: ${failure}`);
  return failures.length ? 1 : 0;
}

/** The tasks of a job file (its datasets, registry ones downloaded and pinned as the job pins them) or a dataset. */
async function tasksOf(target: string): Promise<{
  tasks: Task[];
  timeoutMultiplier: number;
  type: string;
  settings: ProviderSettings;
  /** The job's resource overrides (none for a dataset). */
  environment: Parameters<typeof trialResources>[0];
}> {
  if (statSync(target).isDirectory()) {
    const loaded = await loadDataset(target, environmentRequirement({ type: 'docker' }));
    if (loaded.problems.length) throw new InputError(loaded.problems);
    return { tasks: loaded.tasks, timeoutMultiplier: 1, type: 'docker', settings: {}, environment: {} };
  }
  const job = await loadJobFile(target);
  // Credentials and the like first: one line and exit 2 before anything is downloaded or built.
  await checkProvider(job.environment);
  const { datasets } = await loadJobDatasets(job, {
    requirement: environmentRequirement(job.environment),
    previous: await readJson<ResolvedJob>(jobFiles.config(jobDirOf(job))),
  });
  return {
    tasks: datasets.flatMap((d) => d.tasks),
    timeoutMultiplier: job.timeout_multiplier,
    type: job.environment.type,
    settings: providerSettings(job.environment.type, providerKeys(job.environment)),
    environment: job.environment,
  };
}

/** Progress on stderr: a redrawn bar on a terminal, else a line per finished environment. */
class BuildProgress {
  private count = 0;
  private failed = 0;
  private running = 0;
  private readonly startedAt = Date.now();
  private readonly stream = process.stderr;

  constructor(
    private readonly total: number,
    tasks: number,
    parallel: number
  ) {
    this.stream.write(`${total} environments for ${tasks} tasks, ${parallel} at once\n`);
  }

  started(): void {
    this.running += 1;
    this.draw();
  }

  finished(line: string, failed = false): void {
    this.running -= 1;
    this.count += 1;
    if (failed) this.failed += 1;
    if (this.stream.isTTY) this.stream.write('\r\x1b[2K');
    this.stream.write(`[${this.count}/${this.total}] ${line}\n`);
    this.draw();
  }

  done(): void {
    if (this.stream.isTTY) this.stream.write('\r\x1b[2K');
    const failed = this.failed ? `, ${this.failed} failed` : '';
    this.stream.write(
      `${this.count - this.failed} of ${this.total} environments ready${failed} (${formatDuration(Date.now() - this.startedAt)})\n`
    );
  }

  private draw(): void {
    if (!this.stream.isTTY) return;
    const width = 30;
    const filled = Math.round((this.count / Math.max(1, this.total)) * width);
    const bar = `${'█'.repeat(filled)}${'░'.repeat(width - filled)}`;
    this.stream.write(
      `\r\x1b[2K${bar} ${this.count}/${this.total} · ${this.running} building · ${this.failed} failed · ${formatDuration(Date.now() - this.startedAt)}`
    );
  }
}
