import type { ActivityDeps } from './context';
import { heartbeating, log, taskFailure } from './context';
import type { AgentStepInput } from './agent-run';
import { prepareAgentRun } from './agent-run';

/** Step 3: the agent's install script (none for the oracle). A failing or overlong install is a task outcome. */
export function installAgent(deps: ActivityDeps) {
  return async function installAgent(input: AgentStepInput): Promise<void> {
    const { spec } = input;
    const { agent, run } = await prepareAgentRun(deps, input, spec.timeouts.install);
    const result = await heartbeating(() => agent.install(run));
    if (!result) return;
    await log(spec, 'install', `exit ${result.exitCode}${result.timedOut ? ' (timed out)' : ''}`);
    if (result.timedOut) {
      throw taskFailure('AgentInstallTimeoutError', `agent install exceeded ${spec.timeouts.install} s`);
    }
    if (result.exitCode !== 0) {
      throw taskFailure('AgentInstallError', `agent install exited ${result.exitCode} (see agent/install.txt)`);
    }
  };
}
