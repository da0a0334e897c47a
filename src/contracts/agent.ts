/**
 * The agent contract: what an agent is (install, execute) and what a run of one is given. A leaf: agents implement
 * it, the activities call it; `createAgent` (./create.ts) picks the implementation for a configuration.
 */
import type { ExecResult, Environment } from './environment';
import type { Task } from './task-config';
import type { EnvironmentHandle } from './trial';

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
  /** The task's [solution.env], resolved as the job allows (src/task/task-env.ts): what the oracle runs solve.sh with. */
  solutionEnv: Record<string, string>;
}

/** An install's exit, and for catalogue agents the version it left in place and whether it installed anything. */
export type InstallOutcome = ExecResult & { version?: string | null; fresh?: boolean };

export interface Agent {
  readonly name: string;
  /** Installs the agent; null when there is nothing to install. */
  install(run: AgentRun): Promise<InstallOutcome | null>;
  execute(run: AgentRun): Promise<ExecResult>;
}

/**
 * $ROLLOUT_TASK_INSTRUCTION is set only up to this size: Linux refuses a larger variable to any program (128 KiB
 * per variable), and Docker's API refuses large container configurations. Larger instructions are only in the file.
 */
export const INSTRUCTION_ENV_MAX_BYTES = 64 * 1024;

/** $ROLLOUT_TASK_INSTRUCTION when the instruction is small enough to be a variable (see INSTRUCTION_ENV_MAX_BYTES). */
export function instructionVariable(instruction: string): Record<string, string> {
  return Buffer.byteLength(instruction) <= INSTRUCTION_ENV_MAX_BYTES ? { ROLLOUT_TASK_INSTRUCTION: instruction } : {};
}

export class SolutionNotFoundError extends Error {
  constructor(solutionDir: string) {
    super(`${solutionDir}/solve.sh: missing, so the oracle agent cannot run this task`);
    this.name = 'SolutionNotFoundError';
  }
}

/** What a trial's processes get to reach the model through the gateway. */
export interface GatewayAccess {
  /** Accepted by the gateway for this trial only, and only while its execute step runs. */
  token: string;
  /** Per vendor, in the vendor SDK's convention (OpenAI's ends in `/v1`), as seen from the trial's environment. */
  baseUrls: Record<'openai' | 'anthropic' | 'gemini', string>;
}
