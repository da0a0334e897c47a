import { SolutionNotFoundError } from '../src/agents/agent';
import { MissingEnvironmentVariableError } from '../src/env-vars';
import type { ExecuteOutcome } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, log, taskFailure } from './context';
import type { AgentStepInput } from './agent-run';
import { prepareAgentRun } from './agent-run';

/**
 * Step 4: the agent itself. Its timeout is enforced here and returned as an outcome (every process it started is
 * killed first); the activity's Temporal timeout is only a safety margin above it, so Temporal retries crashes,
 * never slow agents.
 */
export function executeAgent(deps: ActivityDeps) {
  return async function executeAgent(input: AgentStepInput): Promise<ExecuteOutcome> {
    const { spec } = input;
    const { agent, run } = await prepareAgentRun(deps, input, spec.timeouts.execute);
    await log(spec, 'execute', `running agent ${spec.agentName} (timeout ${spec.timeouts.execute} s)`);
    try {
      const result = await heartbeating(async () => {
        const executed = await agent.execute(run);
        // Whatever the agent left running (a daemon rewriting what the verifier checks) must not outlive its step.
        await run.environment.killAll(run.handle);
        return executed;
      });
      await log(
        spec,
        'execute',
        `${result.timedOut ? 'timed out' : `exit ${result.exitCode}`}: every process the agent started killed`
      );
      return { exitCode: result.exitCode, timedOut: result.timedOut };
    } catch (err) {
      if (err instanceof SolutionNotFoundError) throw taskFailure('SolutionNotFoundError', err.message);
      // The oracle resolves the task's [solution.env] itself.
      if (err instanceof MissingEnvironmentVariableError)
        throw taskFailure('MissingEnvironmentVariableError', err.message);
      throw err;
    }
  };
}
