/**
 * A worker's config file (`rollout worker --config worker.yaml`, or ROLLOUT_WORKER_CONFIG for every command that
 * runs a worker): settings of the worker rather than of a job. Give every worker of a deployment the same file for
 * deployment-wide limits. Documented in docs/rate-limits.md.
 */
import path from 'node:path';

import { z } from 'zod';

import { InputError, zodProblems } from '../contracts/errors';
import type { RateLimitRule } from '../contracts/job-config';
import { readConfigMapping } from './load';
import { RateLimitSchema } from '../contracts/job-config';

export const WORKER_CONFIG_ENV = 'ROLLOUT_WORKER_CONFIG';

const WorkerConfigSchema = z.strictObject({
  /** Applied to every call through this worker's gateway, with the job's own `rate_limits` (both hold). */
  rate_limits: z.array(RateLimitSchema).default([]),
});

export interface WorkerConfig {
  rate_limits: RateLimitRule[];
}

/** The config in `file`, else in ROLLOUT_WORKER_CONFIG's file, else none (no rules). Bad input: one line per problem. */
export async function loadWorkerConfig(file = process.env[WORKER_CONFIG_ENV] || undefined): Promise<WorkerConfig> {
  if (!file) return { rate_limits: [] };
  const absolute = path.resolve(file);
  const raw = await readConfigMapping(absolute, 'worker settings (rate_limits)');
  const parsed = WorkerConfigSchema.safeParse(raw);
  if (!parsed.success) throw new InputError(zodProblems(absolute, parsed.error.issues));
  return parsed.data;
}
