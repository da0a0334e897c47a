/**
 * Providers from outside the repository: `environment: { type: my-sandbox, import: <npm package or path> }` loads a
 * CommonJS module whose default export (or `provider` export) is a provider record (provider.ts,
 * docs/providers.md), checks its shape and the job's settings against it, and registers it in this process, for the
 * CLI's validation and for the workers this process runs.
 */
import path from 'node:path';

import type { Problem } from '../contracts/errors';
import { InputError } from '../contracts/errors';
import { providerKeys } from '../contracts/job-config';
import { addImportedProvider } from './';
import type { EnvironmentProvider } from '../contracts/provider';
import { builtinProvider } from './registry';

/** A path (relative to the job file, or absolute) rather than an npm package name. */
export function isImportPath(specifier: string): boolean {
  return specifier.startsWith('.') || path.isAbsolute(specifier);
}

/** Loads and registers the provider a job's `environment.import` names; nothing when it names none. */
export function importProvider(
  environment: { type: string; import?: string } & Record<string, unknown>,
  file: string
): void {
  const specifier = environment.import;
  if (specifier === undefined) return;
  const problem = (field: string, message: string): InputError =>
    new InputError([{ file, field: `environment.${field}`, message }]);
  let loaded: unknown;
  try {
    const base = path.dirname(file);
    const resolved = isImportPath(specifier)
      ? path.resolve(base, specifier)
      : require.resolve(specifier, { paths: [base, process.cwd()] });
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a module named by the job, loaded at run time
    loaded = require(resolved) as unknown;
  } catch (err) {
    throw problem('import', `cannot load the provider module ${specifier}: ${(err as Error).message.split('\n')[0]}`);
  }
  const exported = loaded as { default?: unknown; provider?: unknown };
  const provider = (exported.default ?? exported.provider ?? loaded) as Partial<EnvironmentProvider>;
  const shape = shapeProblem(provider);
  if (shape) throw problem('import', `${specifier} exports no provider record: ${shape} (see docs/providers.md)`);
  const record = provider as EnvironmentProvider;
  if (record.type !== environment.type) {
    throw problem('type', `the provider module ${specifier} is of type "${record.type}", not "${environment.type}"`);
  }
  if (builtinProvider(record.type)) throw problem('type', `"${record.type}" is a built-in provider: drop import`);
  const parsed = record.settings.safeParse(providerKeys(environment));
  if (!parsed.success) {
    throw new InputError(
      parsed.error.issues.flatMap((issue): Problem[] =>
        issue.code === 'unrecognized_keys'
          ? issue.keys.map((key) => ({ file, field: `environment.${key}`, message: 'unknown key' }))
          : [{ file, field: ['environment', ...issue.path.map(String)].join('.'), message: issue.message }]
      )
    );
  }
  addImportedProvider(record);
}

/** What is missing from a would-be provider record, or null. */
function shapeProblem(provider: Partial<EnvironmentProvider> | null | undefined): string | null {
  if (!provider || typeof provider !== 'object') return 'not an object';
  if (typeof provider.type !== 'string' || !provider.type) return 'no `type`';
  if (typeof provider.settings?.safeParse !== 'function') return 'no `settings` zod schema';
  if (!provider.capabilities || typeof provider.capabilities !== 'object') return 'no `capabilities`';
  if (typeof provider.requirement !== 'function') return 'no `requirement(task, settings)`';
  if (typeof provider.create !== 'function') return 'no `create(owner)`';
  return null;
}
