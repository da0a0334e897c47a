/** What an agent configuration (job.yaml `agents`) means: which catalogue agent, gateway or not, what it installs. */
import { readFile, stat } from 'node:fs/promises';

import type { AgentConfig } from '../contracts/job-config';
import { ORACLE_AGENT } from '../contracts/job-config';
import { localJobFile, verifySignedJobFile } from '../storage/job-folder';
import type { AgentInfo } from '../contracts/trial';
import type { BuiltinAgentDefinition } from './builtin';
import { builtinAgent } from './registry';

/** The catalogue agent a configuration runs (`agent`, or its `name` when it gives no scripts); undefined if custom. */
export function catalogueAgent(config: AgentConfig): BuiltinAgentDefinition | undefined {
  const scripted = config.install !== undefined || config.execute !== undefined;
  return builtinAgent(config.agent ?? (scripted ? '' : config.name));
}

export function isOracle(config: AgentConfig): boolean {
  return (config.agent ?? config.name) === ORACLE_AGENT && config.execute === undefined;
}

/**
 * Whether the agent's model calls go through the worker's model gateway: `gateway` in job.yaml; by default on for
 * the catalogue's agents (they read the base URL and key variables the gateway rewrites) and off for custom agents
 * and the oracle (which may call anything, or nothing).
 */
export function usesGateway(config: AgentConfig): boolean {
  return config.gateway ?? (!isOracle(config) && catalogueAgent(config) !== undefined);
}

/** The agent a trial's result names: catalogue name (or its own), the version Rollout ships or installed, model. */
export function agentInfo(config: AgentConfig, installedVersion: string | null = null): AgentInfo {
  const builtin = catalogueAgent(config);
  return {
    name: builtin?.name ?? config.name,
    version: installedVersion ?? (builtin?.kind === 'worker' ? builtin.version : null),
    model: config.model ?? null,
  };
}

/** Whether the agent's install step has nothing to do (the oracle, terminus, a custom agent without install). */
export function installsNothing(config: AgentConfig): boolean {
  if (isOracle(config)) return true;
  const builtin = catalogueAgent(config);
  if (builtin) return builtin.kind === 'worker';
  return config.install === undefined;
}

const jobConfigs = new Map<string, { mtimeMs: number; config: Promise<{ agents: AgentConfig[] }> }>();

/**
 * Agent definitions come from the job's config.json (never from workflow inputs: it may hold literal env values),
 * verified against its signature and cached per job folder until the file changes: a long-lived worker may see a job
 * folder removed and made anew under the same name.
 */
export async function loadAgentConfig(jobDir: string, agentName: string): Promise<AgentConfig> {
  // A job in an object store: its config.json copied to this host once.
  const file = await localJobFile(jobDir, 'config.json');
  const { mtimeMs } = await stat(file);
  let cached = jobConfigs.get(jobDir);
  if (!cached || cached.mtimeMs !== mtimeMs) {
    // Signed by whoever started the job: a config.json changed in its folder or bucket is refused, not run.
    const config = readFile(file).then(async (body) => {
      await verifySignedJobFile(jobDir, 'config.json', body);
      return JSON.parse(body.toString('utf8')) as { agents: AgentConfig[] };
    });
    cached = { mtimeMs, config };
    jobConfigs.set(jobDir, cached);
    config.catch(() => jobConfigs.delete(jobDir));
  }
  const config = cached.config;
  const agent = (await config).agents.find((a) => a.name === agentName);
  if (!agent) throw new Error(`${file}: no agent named "${agentName}"`);
  return agent;
}
