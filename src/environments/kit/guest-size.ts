/**
 * Guest sizes for every cloud provider whose vendor accepts only some CPU and memory shapes (Fly's presets, E2B's
 * even CPU counts): the task's request is rounded up to the vendor's nearest valid size, with a warning in the trial
 * log, or refused before the job starts (environmentRequirement, one line naming task.toml's field). A vendor 4xx
 * after the job started is what this avoids.
 */
import type { GuestSize, GuestSizeRefusal } from '../../contracts/provider';
import { TaskEnvironmentError } from '../../contracts/environment';

const MIB = 2 ** 20;

/** A trial's resources as a guest size request (memory in whole MiB). */
export function wantedGuest(resources: { cpus: number; memoryBytes: number }): GuestSize {
  return { cpus: resources.cpus, memoryMb: Math.ceil(resources.memoryBytes / MIB) };
}

export function isRefusal(fit: GuestSize | GuestSizeRefusal): fit is GuestSizeRefusal {
  return 'field' in fit;
}

/**
 * The size a trial starts with, and the trial log's warning when it is not what the task asked for. A size no guest
 * fits was refused before the job started; a job override that changed since is an EnvironmentStartError, before
 * anything is created at the vendor.
 */
export function fittedGuest(
  provider: string,
  fit: GuestSize | GuestSizeRefusal,
  wanted: GuestSize
): { size: GuestSize; warning: string | null } {
  if (isRefusal(fit)) throw new TaskEnvironmentError('EnvironmentStartError', `${provider}: ${fit.message}`);
  const same = fit.cpus === wanted.cpus && fit.memoryMb === wanted.memoryMb;
  return {
    size: fit,
    warning: same
      ? null
      : `${provider}: the task's size (${wanted.cpus} CPU, ${wanted.memoryMb} MiB) is not one ${provider} offers: ` +
        `rounded up to ${fit.cpus} CPU, ${fit.memoryMb} MiB`,
  };
}

/**
 * The smallest size at least `wanted` among `cpuSteps` (ascending), with memory raised to the CPU count's minimum and
 * rounded up to `memoryStepMb`, within the CPU count's maximum; else why not. The shape of Fly's and E2B's rules.
 */
export function smallestGuest(
  wanted: GuestSize,
  rule: {
    cpuSteps: readonly number[];
    memoryStepMb: number;
    minMemoryMb: (cpus: number) => number;
    maxMemoryMb: (cpus: number) => number;
    /** Named in a refusal, e.g. "Fly's shared guests". */
    what: string;
  }
): GuestSize | GuestSizeRefusal {
  const largest = rule.cpuSteps.at(-1)!;
  if (wanted.cpus > largest) {
    return { field: 'cpus', message: `${wanted.cpus} CPUs: ${rule.what} have at most ${largest}` };
  }
  for (const cpus of rule.cpuSteps) {
    if (cpus < wanted.cpus) continue;
    const memoryMb =
      Math.ceil(Math.max(wanted.memoryMb, rule.minMemoryMb(cpus)) / rule.memoryStepMb) * rule.memoryStepMb;
    if (memoryMb <= rule.maxMemoryMb(cpus)) return { cpus, memoryMb };
  }
  return {
    field: 'memory',
    message: `${wanted.memoryMb} MiB: ${rule.what} have at most ${rule.maxMemoryMb(largest)} MiB (with ${largest} CPUs)`,
  };
}
