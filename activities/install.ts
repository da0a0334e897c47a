import { agentInfo } from '../src/agents/config';
import { installGate } from '../src/agents/install-gate';
import type { AgentInfo } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating, taskFailure } from './context';
import { log } from './secrets';
import type { AgentStepInput } from './agent-run';
import { installSnapshotKey, prepareAgentRun } from './agent-run';

/**
 * Step 3: the agent's install (none for the oracle and terminus). A failing or overlong install is a task outcome.
 * A catalogue agent's fresh install is then snapshotted, so later trials of this image and agent on this host skip it.
 */
export function installAgent(deps: ActivityDeps) {
  return async function installAgent(input: AgentStepInput): Promise<AgentInfo> {
    const { spec } = input;
    try {
      const { agent, run, config, task } = await prepareAgentRun(deps, input, spec.timeouts.install);
      // A catalogue agent that installs nothing (terminus) is the version this Rollout ships.
      const info = agentInfo(config);
      const result = await heartbeating(() => agent.install(run));
      if (!result) return info;
      const version = result.version
        ? ` (${config.agent ?? config.name} ${result.version}${result.fresh ? '' : ', already installed'})`
        : '';
      await log(spec, 'install', `exit ${result.exitCode}${result.timedOut ? ' (timed out)' : ''}${version}`);
      if (result.timedOut) {
        throw taskFailure('AgentInstallTimeoutError', `agent install exceeded ${spec.timeouts.install} s`);
      }
      if (result.exitCode !== 0) {
        throw taskFailure('AgentInstallError', `agent install exited ${result.exitCode} (see agent/install.txt)`);
      }
      const snapshots = run.environment.snapshots;
      const key = installSnapshotKey(deps, task, config, spec);
      if (result.fresh && snapshots && key) {
        const image = await heartbeating(() => snapshots.take(input.handle, key, `${info.name}@${result.version}`));
        await log(spec, 'install', `install snapshot ${image}`);
      }
      return { ...info, version: result.version ?? null };
    } finally {
      installGate.release(spec.trialId);
    }
  };
}
