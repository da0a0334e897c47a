/**
 * The checks of job.yaml that need the registries: agent names and options (src/agents/registry.ts), provider
 * settings (src/environments/registry.ts), model prices, variables a task may never read. The schema in
 * src/contracts/job-config.ts runs them in its refinements, so a job is checked in one pass with one line per problem.
 */
import type { z } from 'zod';

import { BUILTIN_AGENTS } from '../agents/registry';
import type { AgentConfig, JobConfigChecks } from '../contracts/job-config';
import { ORACLE_AGENT, jobConfigSchema, providerKeys } from '../contracts/job-config';
import { ENVIRONMENT_TYPES, builtinProvider } from '../environments/registry';
import { neverTaskEnv } from '../task/task-env';
import { agentKind, onGatewayOf, unpricedModel } from './agent-routing';

function checkAgent(agent: AgentConfig, ctx: z.RefinementCtx): void {
  const builtinNames = [ORACLE_AGENT, ...BUILTIN_AGENTS.map((a) => a.name)];
  const kind = agentKind(agent);
  if (agent.agent !== undefined && !builtinNames.includes(agent.agent)) {
    ctx.addIssue({
      code: 'custom',
      path: ['agent'],
      message: `unknown agent "${agent.agent}": built-in agents are [${builtinNames.join(', ')}]`,
    });
    return;
  }
  // Limits are counted by the model gateway: an agent off it makes calls nobody counts.
  const onGateway = onGatewayOf(agent);
  for (const key of ['limits', 'sampling', 'replicas'] as const) {
    if (agent[key] !== undefined && !onGateway)
      ctx.addIssue({
        code: 'custom',
        path: [key],
        message:
          kind === ORACLE_AGENT ? 'the oracle makes no model calls' : `${key} need the model gateway (gateway: true)`,
      });
  }
  if (agent.limits?.cost_usd !== undefined && onGateway && agent.model) {
    const unpriced = unpricedModel(agent.model, 'limits.cost_usd');
    if (unpriced) ctx.addIssue({ code: 'custom', path: ['model'], message: unpriced });
  }
  if (agent.tokens && !onGateway)
    ctx.addIssue({
      code: 'custom',
      path: ['tokens'],
      message:
        kind === ORACLE_AGENT ? 'the oracle makes no model calls' : 'tokens need the model gateway (gateway: true)',
    });
  if (kind === ORACLE_AGENT) {
    for (const key of ['install', 'execute', 'version', 'kwargs'] as const) {
      if (agent[key] !== undefined)
        ctx.addIssue({ code: 'custom', path: [key], message: 'the built-in oracle agent takes none' });
    }
    return;
  }
  const builtin = kind === undefined ? undefined : BUILTIN_AGENTS.find((a) => a.name === kind);
  if (!builtin) {
    if (agent.execute === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['execute'],
        message: `unknown agent "${agent.name}": built-in agents are [${builtinNames.join(', ')}]; a custom agent needs an execute script`,
      });
    }
    for (const key of ['version', 'kwargs'] as const) {
      if (agent[key] !== undefined)
        ctx.addIssue({ code: 'custom', path: [key], message: 'only built-in agents take it (set `agent`)' });
    }
    return;
  }
  for (const key of ['install', 'execute'] as const) {
    if (agent[key] !== undefined)
      ctx.addIssue({ code: 'custom', path: [key], message: `the built-in agent ${builtin.name} takes no script` });
  }
  const options = Object.keys(builtin.kwargs.shape);
  for (const key of Object.keys(agent.kwargs ?? {})) {
    if (!options.includes(key)) {
      ctx.addIssue({
        code: 'custom',
        path: ['kwargs', key],
        message: `unknown option of ${builtin.name}: valid options are [${options.join(', ')}]`,
      });
    }
  }
  const parsed = builtin.kwargs.safeParse(agent.kwargs ?? {});
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      if (issue.code === 'unrecognized_keys') continue; // reported above, with the valid options
      ctx.addIssue({ code: 'custom', path: ['kwargs', ...issue.path.map(String)], message: issue.message });
    }
  }
}

function checkEnvironment(
  environment: { type: string; import?: string | undefined } & Record<string, unknown>,
  ctx: z.RefinementCtx
): void {
  // A provider loaded with `import` validates its settings once loaded (src/environments/external.ts).
  if (environment.import !== undefined) return;
  const provider = builtinProvider(environment.type);
  if (!provider) {
    ctx.addIssue({
      code: 'custom',
      path: ['type'],
      message: `unknown environment type: expected one of ${ENVIRONMENT_TYPES.join(', ')}`,
    });
    return;
  }
  const settings = providerKeys(environment);
  const parsed = provider.settings.safeParse(settings);
  if (parsed.success) return;
  for (const issue of parsed.error.issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) ctx.addIssue({ code: 'custom', path: [key], message: 'unknown key' });
    } else if (issue.path.length && settings[String(issue.path[0])] === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: issue.path,
        message: `required for environment type ${provider.type}`,
      });
    } else {
      ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
    }
  }
}

function checkAgentInJob(
  budget: { cost_usd?: number | undefined } | undefined,
  agent: AgentConfig,
  index: number,
  ctx: z.RefinementCtx
): void {
  // The gateway refuses every call to it (docs/budgets.md): a job whose trials could only fail, refused now.
  const capped = budget?.cost_usd !== undefined && agent.model && onGatewayOf(agent);
  const unpriced = capped && unpricedModel(agent.model!, 'budget.cost_usd');
  if (unpriced && agent.limits?.cost_usd === undefined)
    ctx.addIssue({ code: 'custom', path: ['agents', index, 'model'], message: unpriced });
}

function checkTaskEnvName(name: string, ctx: z.RefinementCtx): void {
  const never = neverTaskEnv(name);
  if (never) ctx.addIssue({ code: 'custom', message: never });
}

export const REGISTRY_CHECKS: JobConfigChecks = {
  agent: checkAgent,
  environment: checkEnvironment,
  agentInJob: checkAgentInJob,
  taskEnvName: checkTaskEnvName,
};

/** job.yaml's schema as the loader checks it: the contract's shape with the registries' checks. */
export const JobConfigSchema = jobConfigSchema(REGISTRY_CHECKS);
