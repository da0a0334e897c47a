/**
 * What a task.toml asks of the environment beyond its resources: network per phase, the users the agent and the
 * verifier run as, and which of its keys Rollout does not act on (named in the trial's `unenforced_limits`).
 */
import type { NetworkMode, PhaseNetwork, TaskConfig } from '../contracts/task-config';

/**
 * How Rollout handles each task.toml key (dotted path; tables whose keys are free, like `metadata` or `env`, are one
 * entry). `acts`: the key changes what runs. `describes`: it only describes the task. `unenforced`: accepted as
 * Harbor defines it, not acted on; a trial whose task sets it lists it in `unenforced_limits`. A test walks the
 * schema so that no key can be added without a line here.
 */
export const TASK_KEYS = {
  version: 'acts',
  schema_version: 'acts',
  source: 'describes',
  metadata: 'describes',
  task: 'describes',
  'verifier.timeout_sec': 'acts',
  'verifier.env': 'acts',
  'verifier.user': 'acts',
  'verifier.network_mode': 'acts',
  'verifier.allowed_hosts': 'acts',
  'verifier.environment_mode': 'acts',
  'verifier.environment': 'acts',
  'verifier.collect': 'acts',
  'agent.timeout_sec': 'acts',
  'agent.user': 'acts',
  'agent.network_mode': 'acts',
  'agent.allowed_hosts': 'acts',
  'environment.build_timeout_sec': 'acts',
  'environment.docker_image': 'acts',
  'environment.cpus': 'acts',
  'environment.memory': 'acts',
  'environment.storage': 'acts',
  'environment.memory_mb': 'acts',
  'environment.storage_mb': 'acts',
  'environment.gpus': 'acts',
  'environment.pids_limit': 'acts',
  'environment.env': 'acts',
  'environment.workdir': 'acts',
  'environment.os': 'acts',
  'environment.gpu_types': 'unenforced',
  'environment.tpu': 'acts',
  'environment.mcp_servers': 'unenforced',
  'environment.skills_dir': 'unenforced',
  'environment.healthcheck.command': 'acts',
  'environment.healthcheck.interval_sec': 'acts',
  'environment.healthcheck.timeout_sec': 'acts',
  'environment.healthcheck.start_period_sec': 'acts',
  'environment.healthcheck.start_interval_sec': 'acts',
  'environment.healthcheck.retries': 'acts',
  'environment.allow_internet': 'acts',
  'environment.network_mode': 'acts',
  'environment.allowed_hosts': 'acts',
  'solution.env': 'acts',
  'steps.name': 'acts',
  'steps.agent.timeout_sec': 'acts',
  'steps.agent.user': 'acts',
  'steps.agent.network_mode': 'acts',
  'steps.agent.allowed_hosts': 'acts',
  'steps.verifier.timeout_sec': 'acts',
  'steps.verifier.env': 'acts',
  'steps.verifier.user': 'acts',
  'steps.verifier.environment_mode': 'acts',
  'steps.verifier.environment': 'acts',
  'steps.verifier.collect': 'acts',
  'steps.verifier.network_mode': 'acts',
  'steps.verifier.allowed_hosts': 'acts',
  'steps.min_reward': 'acts',
  'steps.healthcheck': 'acts',
  'steps.artifacts': 'acts',
  multi_step_reward_strategy: 'acts',
  artifacts: 'acts',
} as const satisfies Record<string, 'acts' | 'describes' | 'unenforced'>;

/** The keys of TASK_KEYS that a task sets (an empty list or table counts as unset) and Rollout does not act on. */
export function unenforcedTaskKeys(config: TaskConfig): string[] {
  return Object.entries(TASK_KEYS)
    .filter(([, handling]) => handling === 'unenforced')
    .map(([key]) => key)
    .filter((key) => isSet(valueAt(config, key)));
}

function valueAt(config: unknown, dotted: string): unknown {
  let value = config;
  for (const part of dotted.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function isSet(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object') return Object.keys(value).length > 0;
  return true;
}

/**
 * The network of each phase, as Harbor resolves it: `[environment] network_mode` (or the older `allow_internet`) is
 * the baseline, which the agent's install and the healthcheck also run under; `[agent]` and `[verifier]`
 * `network_mode` override it for their phase only.
 */
export interface NetworkPlan {
  baseline: NetworkMode;
  agent: NetworkMode;
  verifier: NetworkMode;
}

export function networkPlan(config: TaskConfig): NetworkPlan {
  const baseline = baselineOf(config.environment);
  return {
    baseline,
    agent: config.agent.network_mode ?? baseline,
    verifier: config.verifier.network_mode ?? baseline,
  };
}

/** An environment table's own network: network_mode, else the older allow_internet. */
function baselineOf(environment: TaskConfig['environment']): NetworkMode {
  return environment.network_mode ?? (environment.allow_internet === false ? 'no-network' : 'public');
}

/**
 * The network of a separate verifier's environment (it runs only the tests): `[verifier] network_mode` when set, else
 * that environment's own (`[verifier.environment]`, or the copy of `[environment]`), as Harbor resolves it.
 */
export function separateVerifierNetwork(config: TaskConfig, environment: TaskConfig['environment']): PhaseNetwork {
  return phaseNetwork(config.verifier.network_mode ?? baselineOf(environment), '[verifier]');
}

/** The phase's network, or the reason it cannot be had here (an allowlist needs an egress proxy Rollout lacks). */
export function phaseNetwork(mode: NetworkMode, where: string): PhaseNetwork {
  if (mode === 'allowlist') {
    throw new UnsupportedNetworkError(
      `task.toml ${where} network_mode = "allowlist" is not supported by Rollout (use "public" or "no-network")`
    );
  }
  return mode === 'no-network' ? 'none' : 'public';
}

/** Each phase's network as an environment applies it; an allowlist anywhere is refused (UnsupportedNetworkError). */
export function phaseNetworks(config: TaskConfig): Record<keyof NetworkPlan, PhaseNetwork> {
  const plan = networkPlan(config);
  return {
    baseline: phaseNetwork(plan.baseline, '[environment]'),
    agent: phaseNetwork(plan.agent, '[agent]'),
    verifier: phaseNetwork(plan.verifier, '[verifier]'),
  };
}

/**
 * What a task needs that no Rollout environment provides (Windows containers, TPUs): the reason, to refuse the trial
 * with, or null. GPUs are up to each environment (a Docker host with the NVIDIA runtime has them).
 */
export function unsupportedNeed(config: TaskConfig): string | null {
  if (config.environment.os === 'windows') {
    return 'task.toml environment.os = "windows": Rollout runs Linux containers only';
  }
  if (isSet(config.environment.tpu)) return 'task.toml environment.tpu: Rollout has no environment with TPUs';
  return null;
}

/** The users the task's commands run as: the environment checks each exists before anything runs. */
export function taskUsers(config: TaskConfig): string[] {
  const steps = (config.steps ?? []).flatMap((step) => [step.agent.user, step.verifier.user]);
  return [...new Set([config.agent.user, config.verifier.user, ...steps].filter((u): u is string => u !== undefined))];
}

export class UnsupportedNetworkError extends Error {
  override name = 'UnsupportedNetworkError';
}
