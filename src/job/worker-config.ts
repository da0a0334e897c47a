/**
 * A worker's config file (`rollout worker --config worker.yaml`, or ROLLOUT_WORKER_CONFIG for every command that
 * runs a worker): settings of the worker rather than of a job: its rate limits and its caps on trials. Give every worker of a deployment the same file for
 * deployment-wide limits. Documented in docs/rate-limits.md.
 */
import path from 'node:path';

import { z } from 'zod';

import { InputError, zodProblems } from '../contracts/errors';
import type { RateLimitRule } from '../contracts/job-config';
import { readConfigMapping } from './load';
import { CAP_KEYS, RateLimitSchema } from '../contracts/job-config';
import type { WorkerCaps } from '../task/worker-caps';
import { DEFAULT_WORKER_CAPS } from '../task/worker-caps';

export const WORKER_CONFIG_ENV = 'ROLLOUT_WORKER_CONFIG';

const WorkerConfigSchema = z.strictObject({
  /** Applied to every call through this worker's gateway, with the job's own `rate_limits` (both hold). */
  rate_limits: z.array(RateLimitSchema).default([]),
  /** Caps on the trials this worker runs (src/task/worker-caps.ts): job.yaml's caps can lower them, never raise them. */
  ...CAP_KEYS,
});

export type WorkerConfig = z.infer<typeof WorkerConfigSchema> & {
  rate_limits: RateLimitRule[];
  /** Where the settings came from, as refusals name it. */
  source: string;
};

/** The config in `file`, else in ROLLOUT_WORKER_CONFIG's file, else none (no rules). Bad input: one line per problem. */
export async function loadWorkerConfig(file = process.env[WORKER_CONFIG_ENV] || undefined): Promise<WorkerConfig> {
  if (!file) return { rate_limits: [], source: DEFAULT_WORKER_CAPS.source };
  const absolute = path.resolve(file);
  const raw = await readConfigMapping(absolute, 'worker settings (rate_limits, max_*)');
  const parsed = WorkerConfigSchema.safeParse(raw);
  if (!parsed.success) throw new InputError(zodProblems(absolute, parsed.error.issues));
  return { ...parsed.data, source: absolute };
}

/** The caps of a worker config, and the file they came from (refusals name it). */
export function workerCaps(config: WorkerConfig): WorkerCaps {
  const { rate_limits: _rules, source, ...settings } = config;
  return { settings, source };
}
