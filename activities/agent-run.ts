import { Context } from '@temporalio/activity';

import type { AgentRun } from '../src/agents/agent';
import { createAgent, instructionVariable, loadAgentConfig } from '../src/agents/agent';
import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { loadTrialTask, resolveWorkerEnv, trialSecretEnv } from './context';

export interface AgentStepInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
}

/**
 * The agent and its run context for the install and execute steps. `${VAR}`s in the agent's env are resolved here,
 * on the worker, from its own environment: the values never leave this process except into the container.
 */
export async function prepareAgentRun(deps: ActivityDeps, { spec, handle }: AgentStepInput, timeoutSec: number) {
  const [task, config] = await Promise.all([loadTrialTask(spec), loadAgentConfig(spec.jobDir, spec.agentName)]);
  const env = { ...resolveWorkerEnv(config.env), ...spec.agentEnv, ...trialSecretEnv(spec) };
  const run: AgentRun = {
    environment: deps.environment(spec.environmentType),
    handle,
    task,
    env: { ...env, ...instructionVariable(task.instruction) },
    timeoutMs: timeoutSec * 1000,
    signal: Context.current().cancellationSignal,
  };
  return { agent: createAgent(config), run };
}
