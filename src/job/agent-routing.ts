/**
 * What job.yaml's agent entries mean for the model gateway: which built-in agent an entry runs, whether its calls go
 * through the gateway, and whether a cost cap can bound its model's calls.
 */
import { BUILTIN_AGENTS } from '../agents/registry';
import { ORACLE_AGENT } from '../contracts/job-config';
import { priceOf } from '../budget/workflow/prices';

export interface AgentRouting {
  name: string;
  agent?: string | undefined;
  install?: string | undefined;
  execute?: string | undefined;
  gateway?: boolean | undefined;
}

/** The built-in agent an entry runs (the oracle is always the built-in one; a built-in name with scripts is custom). */
export function agentKind(agent: AgentRouting): string | undefined {
  const scripted = agent.install !== undefined || agent.execute !== undefined;
  return agent.agent ?? (scripted && agent.name !== ORACLE_AGENT ? undefined : agent.name);
}

/** Whether an agent's calls go through the model gateway (default: built-in agents but the oracle). */
export function onGatewayOf(agent: AgentRouting): boolean {
  const kind = agentKind(agent);
  return agent.gateway ?? (kind !== ORACLE_AGENT && BUILTIN_AGENTS.some((a) => a.name === kind));
}

/** Why a cost cap cannot bound a model's calls (it has no price), or null when it has one. */
export function unpricedModel(model: string, cap: string): string | null {
  if (priceOf(model)) return null;
  return `no price for model "${model}" (src/budget/workflow/prices.ts), so ${cap} cannot bound its calls: cap tokens instead`;
}
