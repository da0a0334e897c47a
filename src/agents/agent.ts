import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import type { ExecResult, Environment } from '../environments/environment';
import type { GatewayAccess } from '../gateway/upstreams';
import type { AgentConfig } from '../job/schema';
import { ORACLE_AGENT } from '../job/schema';
import { jobFiles } from '../results/files';
import type { Task } from '../task/load';
import type { AgentInfo, EnvironmentHandle } from '../trial/types';
import type { BuiltinAgentDefinition } from './builtin';
import { customAgent } from './custom';
import { installedAgent } from './installed';
import { builtinAgent } from './registry';
import { terminusAgent } from './terminus';
import { oracleAgent } from './oracle';

/** Everything an agent step needs: where to run, what task, how long, and the resolved (secret) environment. */
export interface AgentRun {
  environment: Environment;
  handle: EnvironmentHandle;
  task: Task;
  /** Agent env with `${VAR}`s resolved on this worker; never logged or returned. */
  env: Record<string, string>;
  timeoutMs: number;
  signal: AbortSignal;
  /** The trial's agent/ folder on the worker's host, for agents whose loop runs in the worker. */
  agentLogsDir: string;
  /**
   * In the execute step of an agent that uses the model gateway: the per-trial token and base URLs (as seen from
   * the environment). `env` then already holds them in place of the real keys and base URLs.
   */
  gateway: GatewayAccess | null;
  /** task.toml [agent] user: the agent's run executes as it (installs stay root); undefined is the image's USER. */
  user?: string;
}

/** An install's exit, and for catalogue agents the version it left in place and whether it installed anything. */
export type InstallOutcome = ExecResult & { version?: string | null; fresh?: boolean };

export interface Agent {
  readonly name: string;
  /** Installs the agent; null when there is nothing to install. */
  install(run: AgentRun): Promise<InstallOutcome | null>;
  execute(run: AgentRun): Promise<ExecResult>;
}

/** In-container paths. Commands fall back to them unless an environment maps them elsewhere (local). */
export const CONTAINER_PATHS = {
  logs: '${ROLLOUT_LOGS_DIR:-/logs}',
  tests: '${ROLLOUT_TESTS_DIR:-/tests}',
  oracle: '${ROLLOUT_ORACLE_DIR:-/oracle}',
  agentScripts: '${ROLLOUT_AGENT_DIR:-/installed-agent}',
} as const;

/**
 * $ROLLOUT_TASK_INSTRUCTION is set only up to this size: Linux refuses a larger variable to any program (128 KiB
 * per variable), and Docker's API refuses large container configurations. Larger instructions are only in the file.
 */
export const INSTRUCTION_ENV_MAX_BYTES = 64 * 1024;

/** $ROLLOUT_TASK_INSTRUCTION when the instruction is small enough to be a variable (see INSTRUCTION_ENV_MAX_BYTES). */
export function instructionVariable(instruction: string): Record<string, string> {
  return Buffer.byteLength(instruction) <= INSTRUCTION_ENV_MAX_BYTES ? { ROLLOUT_TASK_INSTRUCTION: instruction } : {};
}

/** Copies a script into the container's agent-scripts folder, where `${CONTAINER_PATHS.agentScripts}/<name>` finds it. */
export async function uploadAgentScript(run: AgentRun, name: string, script: string): Promise<void> {
  const folder = await mkdtemp(path.join(tmpdir(), 'rollout-agent-'));
  try {
    await writeFile(path.join(folder, name), script, { mode: 0o755 });
    await run.environment.upload(run.handle, path.join(folder, name), '/installed-agent');
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}

export class SolutionNotFoundError extends Error {
  constructor(solutionDir: string) {
    super(`${solutionDir}/solve.sh: missing, so the oracle agent cannot run this task`);
    this.name = 'SolutionNotFoundError';
  }
}

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

export function createAgent(config: AgentConfig): Agent {
  if (isOracle(config)) return oracleAgent;
  const builtin = catalogueAgent(config);
  if (builtin?.kind === 'installed') return installedAgent(builtin, config);
  if (builtin?.kind === 'worker') return terminusAgent(config);
  return customAgent(config);
}

const jobConfigs = new Map<string, { mtimeMs: number; config: Promise<{ agents: AgentConfig[] }> }>();

/**
 * Agent definitions come from the job's config.json (never from workflow inputs), cached per job folder until the
 * file changes: a long-lived worker may see a job folder removed and made anew under the same name.
 */
export async function loadAgentConfig(jobDir: string, agentName: string): Promise<AgentConfig> {
  const file = jobFiles.config(jobDir);
  const { mtimeMs } = await stat(file);
  let cached = jobConfigs.get(jobDir);
  if (!cached || cached.mtimeMs !== mtimeMs) {
    const config = readFile(file, 'utf8').then((text) => JSON.parse(text) as { agents: AgentConfig[] });
    cached = { mtimeMs, config };
    jobConfigs.set(jobDir, cached);
    config.catch(() => jobConfigs.delete(jobDir));
  }
  const config = cached.config;
  const agent = (await config).agents.find((a) => a.name === agentName);
  if (!agent) throw new Error(`${jobFiles.config(jobDir)}: no agent named "${agentName}"`);
  return agent;
}
