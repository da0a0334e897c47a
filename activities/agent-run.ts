import { createHash } from 'node:crypto';

import { Context } from '@temporalio/activity';

import type { AgentRun } from '../src/contracts/agent';
import { instructionVariable } from '../src/contracts/agent';
import { catalogueAgent, loadAgentConfig } from '../src/agents/config';
import { createAgent } from '../src/agents/create';
import { installPlan } from '../src/agents/installed';
import { providerOf } from '../src/environments';
import { CA_TRUST_ENV } from '../src/environments/ca-trust';
import { INSTRUCTION_FILE } from '../src/contracts/environment';
import type { AgentConfig, EnvironmentType } from '../src/contracts/job-config';
import { jobFiles } from '../src/results/files';
import type { Task } from '../src/task/load';
import { taskAtStep } from '../src/task/steps';
import type { EnvironmentHandle, TrialSpec } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { loadTrialTask, resolveTaskEnv, resolveWorkerEnv, trialSecretEnv } from './context';
import { trialLayout } from '../src/contracts/paths';

export interface AgentStepInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
  /** A multi-step task's step (task.toml `[[steps]]` name): the agent gets that step's instruction and solution. */
  taskStep?: string;
}

/**
 * The agent and its run context for the install and execute steps. `${VAR}`s in the agent's env are resolved here,
 * on the worker, from its own environment: the values never leave this process except into the container.
 */
export async function prepareAgentRun(
  deps: ActivityDeps,
  { spec, handle, taskStep }: AgentStepInput,
  timeoutSec: number
) {
  const [loaded, config] = await Promise.all([loadTrialTask(spec), loadAgentConfig(spec.jobDir, spec.agentName)]);
  const task = taskAtStep(loaded, taskStep);
  const env = { ...resolveWorkerEnv(config.env), ...spec.agentEnv, ...trialSecretEnv(spec) };
  const run: AgentRun = {
    environment: deps.environment(spec.environmentType),
    handle,
    task,
    env: { ...env, ...instructionVariable(task.instruction) },
    timeoutMs: timeoutSec * 1000,
    signal: Context.current().cancellationSignal,
    agentLogsDir: trialLayout(jobFiles.trialDir(spec.jobDir, spec.trialName)).agent,
    gateway: null,
    user: task.config.agent.user,
    solutionEnv: resolveTaskEnv(task.config.solution.env, spec),
  };
  return { agent: createAgent(config), run, config, task };
}

/** The host CA bundle for environments that take it; one that is the host itself (local) needs none. */
export function containerCaBundle(deps: ActivityDeps, type: EnvironmentType): string | null {
  return providerOf(type).capabilities.caTrust ? deps.caBundle : null;
}

/** The environment's own variables: the task's [environment.env], the CA trust variables and the instruction. */
export function containerEnv(deps: ActivityDeps, task: Task, spec: TrialSpec): Record<string, string> {
  return {
    ...resolveTaskEnv(task.config.environment.env, spec),
    ...(containerCaBundle(deps, spec.environmentType) ? CA_TRUST_ENV : {}),
    ...instructionVariable(task.instruction),
    ROLLOUT_TASK_INSTRUCTION_FILE: INSTRUCTION_FILE,
  };
}

/**
 * What an install snapshot of this trial's agent is keyed by (the base image is added by the environment): the
 * install recipe and the container's env, which the snapshot keeps (so trials with other env never share it; the
 * instruction is set anew by every trial). Null when the agent installs nothing.
 */
export function installSnapshotKey(
  deps: ActivityDeps,
  task: Task,
  config: AgentConfig,
  spec: TrialSpec
): string | null {
  const builtin = catalogueAgent(config);
  if (builtin?.kind !== 'installed') return null;
  const { ROLLOUT_TASK_INSTRUCTION: _instruction, ...env } = containerEnv(deps, task, spec);
  const entries = Object.entries(env).sort(([a], [b]) => a.localeCompare(b));
  return createHash('sha256').update(installPlan(builtin, config).key).update(JSON.stringify(entries)).digest('hex');
}
