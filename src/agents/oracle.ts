import type { Agent } from '../contracts/agent';
import { SolutionNotFoundError } from '../contracts/agent';
import { CONTAINER_SHELL_PATHS } from '../contracts/paths';

/**
 * The built-in oracle: copies solution/ to /oracle and runs solve.sh from the working directory. The copy also lands
 * in /solution, where Harbor's oracle puts it, so solutions written for Harbor that refer to it run unchanged.
 */
export const oracleAgent: Agent = {
  name: 'oracle',
  install() {
    return Promise.resolve(null);
  },
  async execute({ environment, handle, task, env, solutionEnv, timeoutMs, signal, user }) {
    if (!task.hasSolution) throw new SolutionNotFoundError(task.solutionDir);
    await environment.upload(handle, task.solutionDir, ['/oracle', '/solution']);
    return environment.exec(handle, {
      command: `bash "${CONTAINER_SHELL_PATHS.oracle}/solve.sh" > "${CONTAINER_SHELL_PATHS.logs}/agent/oracle.txt" 2>&1`,
      env: { ...solutionEnv, ...env },
      user,
      timeoutMs,
      signal,
    });
  },
};
