/**
 * Caps on what a task may declare (job.yaml `environment.max_*`): a hostile task must not get a memory cgroup larger
 * than its host, thousands of pids, hundreds of steps or timeouts of years. A task over a cap is an input error of the
 * job (one line naming its task.toml and the field, exit 2), found before any trial starts: refused, never clamped,
 * so a trial always runs with exactly the limits its task and job declare.
 */
import { totalmem } from 'node:os';
import path from 'node:path';

import type { Problem } from '../contracts/errors';
import type { CapSettings } from '../contracts/job-config';
import { formatBytes, parseBytes, parseCpus } from '../contracts/quantity';
import type { TaskConfig } from '../contracts/task-config';
import { separateVerifierEnvironment, taskResources } from '../contracts/task-config';

export interface ResourceCaps {
  /** Absent: no cap (the provider's own sizes bound it). */
  memoryBytes?: number;
  cpus?: number;
  storageBytes?: number;
  pidsLimit: number;
  steps: number;
  timeoutSec: number;
}

export const DEFAULT_MAX_PIDS = 32_768;
export const DEFAULT_MAX_STEPS = 100;
/** One day per phase: far beyond any benchmark's agent or verifier, far below a timer's overflow. */
export const DEFAULT_MAX_TIMEOUT_SEC = 86_400;
/** Environments whose containers run on this machine: their memory is capped at the host's by default. */
const HOST_ENVIRONMENTS = new Set(['docker', 'local']);

/** What the host keeps for itself (the worker, the Docker daemon, other trials): 10 %, at least 1 GiB. */
export function hostMemoryCap(total = totalmem()): number {
  return Math.max(total - Math.max(2 ** 30, Math.round(total * 0.1)), 2 ** 30);
}

/** The job's caps, with the defaults: memory of host environments from this machine, pids, steps and timeouts always. */
export function resourceCaps(settings: CapSettings): ResourceCaps {
  const memory =
    settings.max_memory !== undefined
      ? parseBytes(settings.max_memory)
      : HOST_ENVIRONMENTS.has(settings.type)
        ? hostMemoryCap()
        : undefined;
  return {
    ...(memory !== undefined ? { memoryBytes: memory } : {}),
    ...(settings.max_cpus !== undefined ? { cpus: parseCpus(settings.max_cpus) } : {}),
    ...(settings.max_storage !== undefined ? { storageBytes: parseBytes(settings.max_storage) } : {}),
    pidsLimit: settings.max_pids ?? DEFAULT_MAX_PIDS,
    steps: settings.max_steps ?? DEFAULT_MAX_STEPS,
    timeoutSec: settings.max_timeout_sec ?? DEFAULT_MAX_TIMEOUT_SEC,
  };
}

/** The job's overrides of every task's resources (job.yaml), which replace the task's values and so are capped too. */
export interface ResourceOverrides {
  override_cpus?: string | number;
  override_memory?: string | number;
  override_storage?: string | number;
  pids_limit?: number;
}

/** job.yaml's own overrides over its caps: problems of the job file. */
export function overrideCapProblems(environment: CapSettings & ResourceOverrides, file: string): Problem[] {
  const caps = resourceCaps(environment);
  const limits = declaredLimits(caps);
  const overrides: [keyof ResourceOverrides, number | undefined][] = [
    [
      'override_memory',
      environment.override_memory !== undefined ? parseBytes(environment.override_memory) : undefined,
    ],
    ['override_cpus', environment.override_cpus !== undefined ? parseCpus(environment.override_cpus) : undefined],
    [
      'override_storage',
      environment.override_storage !== undefined ? parseBytes(environment.override_storage) : undefined,
    ],
    ['pids_limit', environment.pids_limit],
  ];
  return overrides.flatMap(([field, value], index) => {
    const limit = limits[index]!;
    return value !== undefined && limit.cap !== undefined && value > limit.cap
      ? [{ file, field: `environment.${field}`, message: overMessage(limit, value) }]
      : [];
  });
}

export interface Limit {
  what: string;
  cap: number | undefined;
  key: string;
  show: (value: number) => string;
  note?: string;
}

/** Memory, cpus, storage and pids: their caps, in the order of ResourceOverrides' checks. */
export function declaredLimits(caps: ResourceCaps): Limit[] {
  return [
    {
      what: 'memory',
      cap: caps.memoryBytes,
      key: 'max_memory',
      show: formatBytes,
      note: 'by default the host memory less 10 %',
    },
    { what: 'CPUs', cap: caps.cpus, key: 'max_cpus', show: String },
    { what: 'storage', cap: caps.storageBytes, key: 'max_storage', show: formatBytes },
    { what: 'pids', cap: caps.pidsLimit, key: 'max_pids', show: String },
  ];
}

/** Whose caps a value is over, and where they are set: job.yaml's `environment.max_*`, or a worker's worker.yaml. */
export interface CapOwner {
  whose: string;
  /** The setting's prefix before its key, e.g. `job.yaml environment.`. */
  setting: string;
}

const JOB_CAPS: CapOwner = { whose: "the job's cap", setting: 'job.yaml environment.' };

export function overMessage(limit: Limit, value: number, owner: CapOwner = JOB_CAPS): string {
  const cap = `${owner.setting}${limit.key} = ${limit.show(limit.cap ?? 0)}${limit.note ? `, ${limit.note}` : ''}`;
  return `${limit.show(value)} of ${limit.what} is over ${owner.whose} (${cap})`;
}

/**
 * A task's declared resources, step count and timeouts over the job's caps, each named at its task.toml field. A
 * resource the job overrides is not the task's to choose, so only the override is checked (overrideCapProblems).
 */
export function taskCapProblems(
  task: { dir: string; config: TaskConfig },
  environment: CapSettings & ResourceOverrides
): Problem[] {
  const caps = resourceCaps(environment);
  const file = path.join(task.dir, 'task.toml');
  const [memory, cpus, storage, pids] = declaredLimits(caps) as [Limit, Limit, Limit, Limit];
  const environments: [string, TaskConfig['environment']][] = [['environment', task.config.environment]];
  const verifierEnvironment = task.config.verifier.environment;
  if (verifierEnvironment && separateVerifierEnvironment(task.config))
    environments.push(['verifier.environment', verifierEnvironment]);

  const problems: Problem[] = [];
  const check = (field: string, limit: Limit, value: number, overridden: boolean) => {
    if (!overridden && limit.cap !== undefined && value > limit.cap)
      problems.push({ file, field, message: overMessage(limit, value) });
  };
  for (const [prefix, declared] of environments) {
    const own = taskResources(declared);
    const memoryField = declared.memory_mb !== undefined ? 'memory_mb' : 'memory';
    const storageField = declared.storage_mb !== undefined ? 'storage_mb' : 'storage';
    check(`${prefix}.${memoryField}`, memory, own.memoryBytes, environment.override_memory !== undefined);
    check(`${prefix}.cpus`, cpus, own.cpus, environment.override_cpus !== undefined);
    check(`${prefix}.${storageField}`, storage, own.storageBytes, environment.override_storage !== undefined);
    check(`${prefix}.pids_limit`, pids, own.pidsLimit, environment.pids_limit !== undefined);
  }
  const steps = task.config.steps?.length ?? 0;
  if (steps > caps.steps)
    problems.push({
      file,
      field: 'steps',
      message: `${steps} steps are over the job's cap (job.yaml environment.max_steps = ${caps.steps})`,
    });
  for (const [field, seconds] of timeoutFields(task.config)) {
    if (seconds > caps.timeoutSec)
      problems.push({
        file,
        field,
        message: `${seconds} s is over the job's cap (job.yaml environment.max_timeout_sec = ${caps.timeoutSec})`,
      });
  }
  return problems;
}

/** Every `*_sec` number of a task's config (timeouts, healthcheck intervals, collect hooks), by dotted field. */
function timeoutFields(value: unknown, prefix = ''): [string, number][] {
  if (Array.isArray(value)) return value.flatMap((item, index) => timeoutFields(item, `${prefix}${index}.`));
  if (!value || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, item]): [string, number][] =>
    key.endsWith('_sec') && typeof item === 'number'
      ? [[`${prefix}${key}`, item]]
      : key === 'metadata'
        ? []
        : timeoutFields(item, `${prefix}${key}.`)
  );
}
