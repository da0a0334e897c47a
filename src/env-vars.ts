/**
 * `${VAR}` and `${VAR:-default}` references in agent env. They are resolved only on the worker, inside an activity,
 * so resolved values never reach Temporal history, logs or result files.
 */
const REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

export interface EnvReference {
  name: string;
  hasDefault: boolean;
}

export function envReferences(env: Record<string, string>): EnvReference[] {
  return Object.values(env).flatMap((value) =>
    [...value.matchAll(REFERENCE)].map((match) => ({ name: match[1]!, hasDefault: match[2] !== undefined }))
  );
}

export class MissingEnvironmentVariableError extends Error {
  constructor(
    readonly names: string[],
    message = `environment variable${names.length > 1 ? 's' : ''} ${names.join(', ')} not set on this worker`
  ) {
    super(message);
    this.name = 'MissingEnvironmentVariableError';
  }
}

/**
 * Resolves every reference from `source`; throws naming all unset variables that have no default. With `allowed`,
 * only those names are read from `source` (a task's env: see src/task/task-env.ts); any other takes its default, and
 * without one is an error naming it.
 */
export function resolveEnv(
  env: Record<string, string>,
  source: NodeJS.ProcessEnv,
  allowed?: ReadonlySet<string>
): Record<string, string> {
  return resolveEnvWithSecrets(env, source, allowed).resolved;
}

/**
 * Like resolveEnv, and also returns the values taken from `source` (defaults are not secrets): what must be scrubbed
 * from anything written to disk.
 */
export function resolveEnvWithSecrets(
  env: Record<string, string>,
  source: NodeJS.ProcessEnv,
  allowed?: ReadonlySet<string>
): { resolved: Record<string, string>; secrets: string[] } {
  const missing = new Set<string>();
  const refused = new Set<string>();
  const secrets = new Set<string>();
  const resolved: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) {
    resolved[key] = value.replace(REFERENCE, (_whole, name: string, fallback: string | undefined) => {
      const found = !allowed || allowed.has(name) ? source[name] : undefined;
      if (found !== undefined && found !== '') {
        secrets.add(found); // any length: see src/results/scrub.ts for how short values are matched
        return found;
      }
      if (fallback !== undefined) return fallback;
      (allowed && !allowed.has(name) ? refused : missing).add(name);
      return '';
    });
  }
  if (refused.size > 0) {
    const names = [...refused].sort();
    throw new MissingEnvironmentVariableError(
      names,
      `task env references ${names.map((name) => `\${${name}}`).join(', ')}: not in job.yaml environment.task_env_allow (a task reads only the worker variables the job allows)`
    );
  }
  if (missing.size > 0) throw new MissingEnvironmentVariableError([...missing].sort());
  return { resolved, secrets: [...secrets] };
}
