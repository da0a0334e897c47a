/**
 * What the core asks of providers: an environment of a type, what a task needs under it, its settings and its
 * configuration check. Providers come from the registry, or from outside the repository (`environment.import`,
 * loaded by external.ts into this process before any of these is asked).
 */
import path from 'node:path';

import type { Problem } from '../contracts/errors';
import { InputError } from '../contracts/errors';
import { providerKeys } from '../contracts/job-config';
import { parseBytes, parseCpus } from '../contracts/quantity';
import { taskCapProblems } from '../task/caps';
import { separateVerifierEnvironment, taskResources } from '../contracts/task-config';
import { isRefusal, wantedGuest } from './kit/guest-size';
import { taskComposeFile } from './docker/compose';
import type { Environment, EnvironmentOwner, ProviderSettings } from '../contracts/environment';
import type { Capability, EnvironmentProvider, EnvironmentRequirement, RequirementTask } from '../contracts/provider';
import { ProviderConfigError } from '../contracts/provider';
import { ENVIRONMENT_TYPES, builtinProvider } from './registry';

/** Providers loaded from outside the repository (`environment.import`) by this process, by type. */
const imported = new Map<string, EnvironmentProvider>();

export function addImportedProvider(provider: EnvironmentProvider): void {
  imported.set(provider.type, provider);
}

/** The provider of a type: built in, or imported by this process. */
export function providerOf(type: string): EnvironmentProvider {
  const provider = builtinProvider(type) ?? imported.get(type);
  if (!provider) {
    const known = [...ENVIRONMENT_TYPES, ...imported.keys()].join(', ');
    throw new Error(`unknown environment type "${type}": expected one of ${known} (or set environment.import)`);
  }
  return provider;
}

export function createEnvironment(type: string, owner: EnvironmentOwner): Environment {
  return providerOf(type).create(owner);
}

/** The provider's own settings of a job.yaml `environment:` (its keys beside the common ones), as it parses them. */
export function providerSettings(type: string, keys: Record<string, unknown>): ProviderSettings {
  return providerOf(type).settings.parse(keys);
}

/**
 * What a task needs to run under an environment: the files its provider asks for, and no capability the provider
 * lacks (each an input error naming the task's file and the capability).
 */
export function environmentRequirement(
  environment: { type: string } & Record<string, unknown>
): EnvironmentRequirement {
  const provider = providerOf(environment.type);
  const settings = provider.settings.parse(providerKeys(environment));
  return async (task) => [
    ...(await provider.requirement(task, settings)),
    ...(await missingCapabilities(provider, task)),
    ...sizeProblems(provider, settings, environment, task),
    ...taskCapProblems(task, environment),
  ];
}

/**
 * A task's size that no guest of the vendor fits (see EnvironmentProvider.guestSize), named at its field: task.toml's,
 * or job.yaml's override.
 */
function sizeProblems(
  provider: EnvironmentProvider,
  settings: ProviderSettings,
  environment: Record<string, unknown>,
  task: RequirementTask
): Problem[] {
  if (!provider.guestSize) return [];
  const own = taskResources(task.config.environment);
  const overrideCpus = environment.override_cpus as string | number | undefined;
  const overrideMemory = environment.override_memory as string | number | undefined;
  const wanted = wantedGuest({
    cpus: overrideCpus !== undefined ? parseCpus(overrideCpus) : own.cpus,
    memoryBytes: overrideMemory !== undefined ? parseBytes(overrideMemory) : own.memoryBytes,
  });
  const fit = provider.guestSize(wanted, settings);
  if (!isRefusal(fit)) return [];
  const overridden = fit.field === 'cpus' ? overrideCpus !== undefined : overrideMemory !== undefined;
  const memoryKey = task.config.environment.memory_mb !== undefined ? 'memory_mb' : 'memory';
  return [
    {
      file: overridden ? 'job.yaml' : path.join(task.dir, 'task.toml'),
      field: `environment.${overridden ? `override_${fit.field}` : fit.field === 'cpus' ? 'cpus' : memoryKey}`,
      message: `${fit.message} (the ${provider.type} environment offers no larger size)`,
    },
  ];
}

/** The capabilities a task needs, found from its files, that the provider lacks. */
async function missingCapabilities(provider: EnvironmentProvider, task: RequirementTask): Promise<Problem[]> {
  const environmentDir = path.join(task.dir, 'environment');
  const lacking = (capability: Capability, file: string, what: string): Problem[] =>
    provider.capabilities[capability]
      ? []
      : [{ file, message: `needs ${what} (capability ${capability}), which the ${provider.type} environment lacks` }];
  const compose = await taskComposeFile(environmentDir);
  const taskToml = path.join(task.dir, 'task.toml');
  return [
    ...(compose ? lacking('compose', compose, 'docker-compose services around main') : []),
    ...(task.config.environment.gpus
      ? lacking('gpus', taskToml, `environment.gpus = ${task.config.environment.gpus}`)
      : []),
    ...(separateVerifierEnvironment(task.config)
      ? lacking('separateVerifier', taskToml, 'a separate verifier environment ([verifier.environment])')
      : []),
  ];
}

/**
 * The provider's check of its own configuration before a job starts (see EnvironmentProvider.check): bad input is
 * an InputError (exit 2) naming the provider and the setting; unreachable infrastructure stays an Error (exit 3).
 */
export async function checkProvider(environment: { type: string } & Record<string, unknown>): Promise<void> {
  const provider = providerOf(environment.type);
  try {
    await provider.check?.(provider.settings.parse(providerKeys(environment)));
  } catch (err) {
    if (err instanceof ProviderConfigError && err.kind === 'input') {
      throw new InputError([{ file: err.provider, message: err.message.slice(err.provider.length + 2) }]);
    }
    throw err;
  }
}
