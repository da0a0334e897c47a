import type { ExecResult } from '../contracts/environment';
import type { AgentConfig } from '../contracts/job-config';
import type { Agent, AgentRun } from '../contracts/agent';
import { CONTAINER_SHELL_PATHS } from '../contracts/paths';
import { uploadAgentScript } from './upload';

/**
 * An agent defined in job.yaml by its install and execute bash scripts. Output goes to /logs/agent/<step>.txt. The
 * install runs as root (it sets up the system, as Harbor's installs do), execute as task.toml's [agent] user.
 */
export function customAgent(config: AgentConfig): Agent {
  return {
    name: config.name,
    install: (run) => (config.install ? runScript(run, 'install', config.install) : Promise.resolve(null)),
    execute: (run) => runScript(run, 'execute', config.execute ?? ''),
  };
}

async function runScript(run: AgentRun, step: 'install' | 'execute', script: string): Promise<ExecResult> {
  await uploadAgentScript(run, `${step}.sh`, script);
  return run.environment.exec(run.handle, {
    command: `bash "${CONTAINER_SHELL_PATHS.agentScripts}/${step}.sh" > "${CONTAINER_SHELL_PATHS.logs}/agent/${step}.txt" 2>&1`,
    env: run.env,
    user: step === 'install' ? '0' : run.user,
    timeoutMs: run.timeoutMs,
    signal: run.signal,
  });
}
