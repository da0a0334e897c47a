/**
 * The provider contract: everything Rollout's core knows of a place trials run (Docker, Kubernetes, local processes,
 * a cloud sandbox). A provider is one record, listed once in registry.ts (or loaded from outside the repository with
 * `environment: { type, import }`): its job.yaml settings, what it can do, what it needs of a task, a check of its own
 * configuration, and a factory of its Environment. Its settings travel through the core as one opaque object that
 * only the provider reads. A contract: it imports no implementation (see docs/providers.md).
 */
import type { z } from 'zod';

import type { Problem } from './errors';
import type { TaskConfig } from './task-config';
import type { Environment, EnvironmentOwner, ProviderSettings } from './environment';

/** What a provider can do. A task that needs what its provider lacks is refused before the job starts. */
export interface ProviderCapabilities {
  /**
   * Handles usable only on the host that started them (a local Docker container): a trial's steps take that host's
   * own queue. False: any worker serving the provider reaches them, and trials take the provider's shared queue.
   */
  hostBound: boolean;
  /** A task's environment/docker-compose.yaml: services (sidecars) around the trial's `main`. */
  compose: boolean;
  /** Install snapshots: an agent installed once per image, later trials start from the snapshot. */
  installSnapshots: boolean;
  /** Phases cut off from the network (task.toml network_mode `no-network`). */
  networkPolicy: boolean;
  /** GPUs for a task's [environment] gpus. */
  gpus: boolean;
  /** Commands as another user (task.toml [agent] / [verifier] user). */
  users: boolean;
  /** A storage limit per trial ([environment] storage). */
  storageLimits: boolean;
  /** The worker's CA trust installed in the environment (false where the environment is the host itself). */
  caTrust: boolean;
  /** A separate verifier environment beside the trial's own (task.toml [verifier.environment]). */
  separateVerifier: boolean;
}

export type Capability = keyof ProviderCapabilities;

/** A task as a provider's requirement sees it: its folder and its task.toml. */
export interface RequirementTask {
  dir: string;
  config: TaskConfig;
}

/** What the job's providers say of a task while it is loaded: a problem per thing they cannot run. */
export type EnvironmentRequirement = (task: RequirementTask) => Promise<Problem[]>;

/** A guest's CPUs and memory (MiB) as a cloud vendor sizes it. */
export interface GuestSize {
  cpus: number;
  memoryMb: number;
}

/** No valid guest is as large as asked: the field that is too large, and the vendor's limit. */
export interface GuestSizeRefusal {
  field: 'cpus' | 'memory';
  message: string;
}

export interface EnvironmentProvider {
  /** job.yaml's `environment.type`. */
  readonly type: string;
  /**
   * Its own job.yaml `environment:` keys (flat, beside the common ones such as force_build), as a zod object schema:
   * unknown keys are refused, and the parsed object travels to its environments as `settings`.
   */
  readonly settings: z.ZodType<ProviderSettings>;
  readonly capabilities: ProviderCapabilities;
  /** What a task needs in its environment/ folder here, each problem naming the file (the spec leaves it to type). */
  requirement(task: RequirementTask, settings: ProviderSettings): Promise<Problem[]>;
  /**
   * The vendor's guest size for a trial that asks for `wanted`: the smallest valid size at least as large (the trial
   * log warns when it differs from `wanted`), or why none fits, naming the field (the task is refused before the job
   * starts). Absent: the provider takes any size.
   */
  guestSize?(wanted: GuestSize, settings: ProviderSettings): GuestSize | GuestSizeRefusal;
  /**
   * Checks the provider's own configuration (a kubeconfig, credentials) before a job starts. Throws a
   * ProviderConfigError naming the provider and the setting; resolves when a job could start.
   */
  check?(settings: ProviderSettings): Promise<void>;
  /** An environment of this provider for a worker; its SDK is loaded here, on first use, not when the record is. */
  create(owner: EnvironmentOwner): Environment;
}

/**
 * A provider's configuration is wrong (bad input, exit 2) or its infrastructure cannot be reached (exit 3): one line
 * naming the provider and the setting, e.g. `kubernetes: cannot read the kubeconfig /p (KUBECONFIG): no such file`.
 */
export class ProviderConfigError extends Error {
  constructor(
    readonly provider: string,
    readonly kind: 'input' | 'unreachable',
    message: string
  ) {
    super(`${provider}: ${message}`);
    this.name = 'ProviderConfigError';
  }
}
