/** The agent a configuration runs: the oracle, a catalogue agent (installed, or its loop in the worker), or custom. */
import type { AgentConfig } from '../contracts/job-config';
import type { Agent } from '../contracts/agent';
import { catalogueAgent, isOracle } from './config';
import { customAgent } from './custom';
import { installedAgent } from './installed';
import { oracleAgent } from './oracle';
import { terminusAgent } from './terminus-loop';

export function createAgent(config: AgentConfig): Agent {
  if (isOracle(config)) return oracleAgent;
  const builtin = catalogueAgent(config);
  if (builtin?.kind === 'installed') return installedAgent(builtin, config);
  if (builtin?.kind === 'worker') return terminusAgent(config);
  return customAgent(config);
}
