/**
 * A worker's own caps (worker.yaml `max_*`, src/job/worker-config.ts) on the trials it runs. job.yaml's caps are the
 * job author's and checked where the job is planned, against that machine; a worker re-checks each trial against its
 * own caps and its own memory before it starts an environment, so neither a job that raised its caps nor a workflow
 * input written by someone else reaches past what this host allows. A job's caps can lower the worker's, never raise
 * them. Pure: no I/O beyond the host's memory size.
 */
import path from 'node:path';

import type { Problem } from '../contracts/errors';
import type { CapSettings } from '../contracts/job-config';
import type { TrialSpec } from '../contracts/trial';
import type { Limit } from './caps';
import { declaredLimits, overMessage, resourceCaps } from './caps';

/** worker.yaml's caps: job.yaml's `environment.max_*` keys, without the type. */
export type WorkerCapSettings = Omit<CapSettings, 'type'>;

/** The failure type of a trial a worker refused over its caps (an infrastructure error: never scored). */
export const WORKER_CAPS_ERROR = 'WorkerCapsError';

/** A worker's caps and where they were set. */
export interface WorkerCaps {
  settings: WorkerCapSettings;
  source: string;
}

/** A worker given no worker.yaml: the defaults alone (this host's memory for docker and local, pids, steps). */
export const DEFAULT_WORKER_CAPS: WorkerCaps = { settings: {}, source: 'worker.yaml (none given)' };

export type CappedTrial = Pick<TrialSpec, 'environmentType' | 'resources' | 'timeouts' | 'multiStep'>;

/** One over-cap value of a trial: the task.toml field it comes from, and why it is refused. */
export interface CapExcess {
  field: string;
  message: string;
}

/**
 * What of `trial` is over this worker's caps (none: it may run here). Memory of docker and local trials is capped at
 * this host's memory less 10 % unless worker.yaml says otherwise; pids and steps at the job defaults; timeouts only
 * when worker.yaml sets `max_timeout_sec` (compared with the scaled timeouts the trial really runs with).
 */
export function workerCapExcess(trial: CappedTrial, { settings, source }: WorkerCaps): CapExcess[] {
  const caps = resourceCaps({ type: trial.environmentType, ...settings });
  const owner = { whose: "this worker's cap", setting: `${source} ` };
  const { resources } = trial;
  const [memory, cpus, storage, pids] = declaredLimits(caps) as [Limit, Limit, Limit, Limit];
  const checks: [string, Limit, number][] = [
    [
      'environment.memory',
      settings.max_memory === undefined ? memory : { ...memory, note: undefined },
      resources.memoryBytes,
    ],
    ['environment.cpus', cpus, resources.cpus],
    ['environment.storage', storage, resources.storageBytes],
    ['environment.pids_limit', pids, resources.pidsLimit],
  ];
  const excess = checks.flatMap(([field, limit, value]) =>
    limit.cap !== undefined && value > limit.cap ? [{ field, message: overMessage(limit, value, owner) }] : []
  );
  const steps = trial.multiStep?.steps.length ?? 0;
  if (steps > caps.steps)
    excess.push({
      field: 'steps',
      message: `${steps} steps are over this worker's cap (${source} max_steps = ${caps.steps})`,
    });
  const maxTimeout = settings.max_timeout_sec;
  if (maxTimeout === undefined) return excess;
  const timeouts: [string, number][] = [
    ...Object.entries(trial.timeouts),
    ...(trial.multiStep?.steps ?? []).flatMap((step) =>
      Object.entries(step.timeouts).map(([phase, seconds]): [string, number] => [`${step.name}.${phase}`, seconds])
    ),
  ];
  for (const [step, seconds] of timeouts)
    if (seconds > maxTimeout)
      excess.push({
        field: `timeouts.${step}`,
        message: `the ${step} step's ${seconds} s is over this worker's cap (${source} max_timeout_sec = ${maxTimeout})`,
      });
  return excess;
}

/** job.yaml's overrides, which replace a task's resources: an excess of one is the job file's. */
const OVERRIDES: Record<string, string> = {
  'environment.memory': 'override_memory',
  'environment.cpus': 'override_cpus',
  'environment.storage': 'override_storage',
  'environment.pids_limit': 'pids_limit',
};

/**
 * A planned job's trials over the caps of the worker this process runs (its embedded worker): problems of the input,
 * found before the first trial starts, one per task and field, at the task.toml field or job.yaml's override.
 */
export function plannedCapProblems(
  trials: (CappedTrial & { taskDir: string })[],
  caps: WorkerCaps,
  job: { file: string; environment: Record<string, unknown> }
): Problem[] {
  const seen = new Set<string>();
  return trials.flatMap((trial) =>
    workerCapExcess(trial, caps).flatMap((over): Problem[] => {
      const override = OVERRIDES[over.field];
      const problem =
        override && job.environment[override] !== undefined
          ? { file: job.file, field: `environment.${override}`, message: over.message }
          : { file: path.join(trial.taskDir, 'task.toml'), field: over.field, message: over.message };
      const key = `${problem.file}\0${problem.field}`;
      if (seen.has(key)) return [];
      seen.add(key);
      return [problem];
    })
  );
}
