import type { AgentRun } from '../src/contracts/agent';
import { SolutionNotFoundError } from '../src/contracts/agent';
import { usesGateway } from '../src/agents/config';
import { MissingEnvironmentVariableError } from '../src/env-vars';
import { refusalMessage } from '../src/budget/job-budget';
import type { TrialSession, TrialSessionOptions } from '../src/gateway/gateway';
import type { AgentConfig } from '../src/contracts/job-config';
import { JOB_BUDGET_ERROR } from '../src/contracts/trial-errors';
import type { GatewayChannel } from '../src/gateway/relay/channel';
import { openGatewayChannel } from '../src/gateway/relay/channel';
import { gatewayEnv, upstreamsFromEnv } from '../src/gateway/upstreams';
import { log as logLine } from '../src/log';
import { jobFiles } from '../src/results/files';
import type { ExecuteOutcome } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating, inPhaseNetwork, taskFailure } from './context';
import { log } from './secrets';
import type { AgentStepInput } from './agent-run';
import { prepareAgentRun } from './agent-run';
import { startTaskStep, taskStepSpec } from './task-step';
import { leftoversKilledByVerifier } from './verify';
import { trialLayout } from '../src/contracts/paths';

/** The agent's `tokens`, `sampling` and `replicas`, and the job's policy version, as the gateway takes them. */
function rlOptions(
  deps: ActivityDeps,
  spec: AgentStepInput['spec'],
  config: AgentConfig,
  note: (line: string) => void
): Partial<TrialSessionOptions> {
  const { policyVersions } = deps;
  const initial = spec.policyVersion;
  return {
    ...(config.tokens || config.sampling
      ? { shaping: { tokens: config.tokens ?? false, ...(config.sampling ? { sampling: config.sampling } : {}) } }
      : {}),
    ...(config.replicas ? { replicas: config.replicas, note } : {}),
    ...(initial !== undefined
      ? {
          policyVersion: () =>
            policyVersions && !spec.policyVersionFixed
              ? policyVersions.current(spec.jobWorkflowId, initial)
              : Promise.resolve(initial),
        }
      : {}),
  };
}

function noteLine(spec: AgentStepInput['spec'], line: string): Promise<void> {
  return log(spec, 'execute', `gateway: ${line}`).catch((err: unknown) => {
    logLine.warn(`trial log of ${spec.trialName}: ${(err as Error).message}`);
  });
}

/** The trial's gateway session: its token, upstreams, limits, budget and RL options. */
function openTrialSession(
  deps: ActivityDeps,
  spec: AgentStepInput['spec'],
  config: AgentConfig,
  run: AgentRun
): Promise<TrialSession> {
  return deps.gateway.openTrial({
    trialId: spec.trialId,
    jobName: spec.jobName,
    agentDir: trialLayout(jobFiles.trialDir(spec.jobDir, spec.trialName)).agent,
    upstreams: upstreamsFromEnv(run.env),
    rateLimits: spec.rateLimits ?? [],
    ...(config.limits ? { limits: config.limits } : {}),
    ...(spec.budgeted ? { budget: { jobName: spec.jobName, agentName: spec.agentName } } : {}),
    ...rlOptions(deps, spec, config, (line) => void noteLine(spec, line)),
  });
}

/**
 * The way from the container to the session, and the agent's env pointing at it. A cloud sandbox reaches it through
 * a relay running for this step only (src/gateway/relay/channel.ts).
 */
async function openChannel(
  deps: ActivityDeps,
  spec: AgentStepInput['spec'],
  session: TrialSession,
  run: AgentRun
): Promise<GatewayChannel> {
  const logged = (line: string) =>
    log(spec, 'execute', line).catch((err: unknown) => {
      logLine.warn(`trial log of ${spec.trialName}: ${(err as Error).message}`);
    });
  const channel = await openGatewayChannel(deps.gateway, session, run.environment, run.handle, process.env, {
    onLog: (line) => void logged(`gateway relay: ${line}`),
    // A relay that broke the protocol is stopped; so is the agent, and the step fails in executeAgent.
    onFailure: (message) => {
      void logged(message);
      run.environment.killAll(run.handle).catch((err: unknown) => void logged(`ending the agent: ${String(err)}`));
    },
  });
  await log(spec, 'execute', `the agent reaches the model through ${channel.description}`);
  run.gateway = channel.access;
  run.env = gatewayEnv(run.env, run.gateway);
  return channel;
}

/**
 * Step 4: the agent itself. Its timeout is enforced here and returned as an outcome (every process it started is
 * killed first); the activity's Temporal timeout is only a safety margin above it, so Temporal retries crashes,
 * never slow agents. An agent on the model gateway gets a token valid only while this step runs; if its last model
 * call failed (after the gateway's own retries), the trial ends in that failure's type (ApiUnreachableError, …),
 * whether the agent exited or timed out, and job.yaml `retry` runs it again.
 */
export function executeAgent(deps: ActivityDeps) {
  return async function executeAgent(input: AgentStepInput): Promise<ExecuteOutcome> {
    const { spec, taskStep } = input;
    const timeoutSec = taskStep ? taskStepSpec(spec, taskStep).timeouts.execute : spec.timeouts.execute;
    const { agent, run, config, task } = await prepareAgentRun(deps, input, timeoutSec);
    let session: TrialSession | null = null;
    let channel: GatewayChannel | null = null;
    try {
      if (taskStep) {
        await heartbeating((signal) => startTaskStep(run.environment, run.handle, spec, task, taskStep, signal));
      }
      if (usesGateway(config)) {
        session = await openTrialSession(deps, spec, config, run);
        channel = await openChannel(deps, spec, session, run);
      }
      await log(spec, 'execute', `running agent ${spec.agentName} (timeout ${timeoutSec} s)`);
      // Whatever the agent left running (a daemon rewriting what the verifier checks) must not run during
      // verification: killed now, or by the verifier's first exec when the tests follow in this environment.
      const killedByVerifier = leftoversKilledByVerifier(spec, task, run.environment);
      const result = await heartbeating(async () => {
        const executed = await inPhaseNetwork(run.environment, run.handle, task.config, 'agent', () =>
          agent.execute(run)
        );
        if (!killedByVerifier) await run.environment.killAll(run.handle);
        return executed;
      });
      // (A timeout has killed them already.)
      const leftovers =
        killedByVerifier && !result.timedOut
          ? "the verifier's first exec kills every process the agent left"
          : 'every process the agent started killed';
      await log(spec, 'execute', `${result.timedOut ? 'timed out' : `exit ${result.exitCode}`}: ${leftovers}`);
      const ended = { exitCode: result.exitCode, timedOut: result.timedOut };
      // The agent (or its environment) broke the relay's protocol: the trial's own doing, scored as such.
      const broken = channel?.failure();
      if (broken) {
        if (killedByVerifier) await run.environment.killAll(run.handle);
        throw taskFailure('EnvironmentBrokenError', broken);
      }
      // A call refused at the trial's own limits: a task outcome, verified as usual (AgentBudgetExceededError).
      const refusal = session?.refusal();
      if (refusal?.kind === 'trial_limit') return { ...ended, limitReached: refusal.reached };
      // The job's budget, and the model API failing, are not the agent's doing: when the agent gave up or ran out of
      // time after a refusal or after its last calls failed upstream, the trial ends unscored in that error.
      const failure = session?.failure();
      if (refusal || failure) {
        // No verification follows a failed step: nothing the agent left may outlive it.
        if (killedByVerifier) await run.environment.killAll(run.handle);
        if (refusal) throw taskFailure(JOB_BUDGET_ERROR, refusalMessage(refusal));
        throw taskFailure(
          failure!.type,
          `the agent's last model call failed (HTTP ${failure!.status || 'connection'}): ${failure!.message.slice(0, 500)}`
        );
      }
      return ended;
    } catch (err) {
      if (err instanceof SolutionNotFoundError) throw taskFailure('SolutionNotFoundError', err.message);
      // The oracle resolves the task's [solution.env] itself.
      if (err instanceof MissingEnvironmentVariableError)
        throw taskFailure('MissingEnvironmentVariableError', err.message);
      throw err;
    } finally {
      await channel?.close();
      await session?.close();
    }
  };
}
