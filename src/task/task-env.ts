/**
 * Task-side `${VAR}`s ([environment.env], [verifier.env], a separate verifier's and the steps' env, [solution.env],
 * and the compose file's interpolation): a task may come from a public dataset, so it reads the worker's environment
 * only through names the operator lists in job.yaml `environment.task_env_allow` (empty by default). Vendor keys,
 * cloud credentials and Rollout's and Temporal's own variables are never readable by a task, listed or not.
 */

import type { Problem } from '../contracts/errors';
import { envReferences } from '../env-vars';
import { VENDOR_ENV } from '../gateway/upstreams';
import type { TaskConfig } from '../contracts/task-config';

const NEVER_PREFIXES = ['ROLLOUT_', 'TEMPORAL_'];
const NEVER_NAMES = new Set([
  ...Object.values(VENDOR_ENV).flatMap((vendor) => vendor.keys),
  'AWS_ACCESS_KEY_ID',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
  'E2B_API_KEY',
  'DAYTONA_API_KEY',
  'MODAL_TOKEN_ID',
  'MODAL_TOKEN_SECRET',
  'FLY_API_TOKEN',
]);

/** Why a task may never read this worker variable, or null when the operator may allow it. */
export function neverTaskEnv(name: string): string | null {
  if (NEVER_NAMES.has(name)) return `${name} is a vendor or cloud key: a task can never read it`;
  const prefix = NEVER_PREFIXES.find((start) => name.startsWith(start));
  return prefix ? `${name} is one of Rollout's own ${prefix}* variables: a task can never read it` : null;
}

/** The names a task may read from the worker: the job's allowlist without anything never readable. */
export function taskEnvAllowed(allow: readonly string[] | undefined): ReadonlySet<string> {
  return new Set((allow ?? []).filter((name) => neverTaskEnv(name) === null));
}

/** Every env table of a task.toml, with its field path. */
export function taskEnvTables(config: TaskConfig): { field: string; env: Record<string, string> }[] {
  const tables = [
    { field: 'environment.env', env: config.environment.env },
    { field: 'verifier.env', env: config.verifier.env },
    { field: 'verifier.environment.env', env: config.verifier.environment?.env ?? {} },
    { field: 'solution.env', env: config.solution.env },
  ];
  for (const [index, step] of (config.steps ?? []).entries()) {
    tables.push({ field: `steps.${index}.verifier.env`, env: step.verifier.env });
    tables.push({ field: `steps.${index}.verifier.environment.env`, env: step.verifier.environment?.env ?? {} });
  }
  return tables;
}

/**
 * References to worker variables the job does not allow a task to read, found from task.toml alone (before any trial
 * runs). A reference with a default (`${NAME:-value}`) of a name not allowed takes its default and is fine.
 */
export function taskEnvProblems(config: TaskConfig, file: string, allow: readonly string[] | undefined): Problem[] {
  const allowed = taskEnvAllowed(allow);
  return taskEnvTables(config).flatMap(({ field, env }) =>
    Object.entries(env).flatMap(([key, value]) =>
      envReferences({ [key]: value })
        .filter((ref) => !ref.hasDefault && !allowed.has(ref.name))
        .map((ref) => ({ file, field: `${field}.${key}`, message: notAllowedMessage(ref.name) }))
    )
  );
}

export function notAllowedMessage(name: string): string {
  return `\${${name}}: ${neverTaskEnv(name) ?? `${name} is not in job.yaml environment.task_env_allow`}`;
}
