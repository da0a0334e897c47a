/**
 * Every provider built into Rollout, listed once. Adding one is a folder of its own (its record in provider.ts) and a
 * line here; job.yaml's `environment.type`, the validation of its settings and the workers' defaults follow from it.
 * Records are light: each loads its environment (and SDK) only when a worker first creates one.
 */
import { daytonaProvider } from './daytona/provider';
import { dockerProvider } from './docker/provider';
import { e2bProvider } from './e2b/provider';
import { flyProvider } from './fly/provider';
import { kubernetesProvider } from './kubernetes/provider';
import { localProvider } from './local/provider';
import { modalProvider } from './modal/provider';
import type { EnvironmentProvider } from '../contracts/provider';

export const PROVIDERS: readonly EnvironmentProvider[] = [
  dockerProvider,
  localProvider,
  kubernetesProvider,
  daytonaProvider,
  e2bProvider,
  flyProvider,
  modalProvider,
];

export const ENVIRONMENT_TYPES: readonly string[] = PROVIDERS.map((provider) => provider.type);

export function builtinProvider(type: string): EnvironmentProvider | undefined {
  return PROVIDERS.find((provider) => provider.type === type);
}
