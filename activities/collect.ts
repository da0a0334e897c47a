import { loadAgentConfig } from '../src/agents/agent';
import { resolveEnvWithSecrets } from '../src/env-vars';
import { jobFiles } from '../src/results/files';
import { scrubSecrets } from '../src/results/scrub';
import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, log, trialSecretEnv } from './context';

export interface CollectInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
}

/**
 * Step 6: the container's /logs copied into the trial folder (/logs/agent → agent/, /logs/verifier → verifier/)
 * before the container stops, then any resolved secret value scrubbed from what was copied.
 */
export function collectLogs(deps: ActivityDeps) {
  return async function collectLogs({ spec, handle }: CollectInput): Promise<void> {
    const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
    await heartbeating(() => deps.environment(spec.environmentType).download(handle, '/logs', trialDir));
    const [agent, task] = await Promise.all([loadAgentConfig(spec.jobDir, spec.agentName), loadTrialTask(spec)]);
    const { environment, verifier, solution } = task.config;
    const secrets = [agent.env, environment.env, verifier.env, solution.env].flatMap((env) => {
      try {
        return resolveEnvWithSecrets(env, process.env).secrets;
      } catch {
        return []; // Unset variables never reached the container: nothing of them to scrub.
      }
    });
    const scrubbed = await scrubSecrets(trialDir, [...secrets, ...Object.values(trialSecretEnv(spec))]);
    await log(spec, 'collect', `logs collected${scrubbed ? `; secrets redacted in ${scrubbed} file(s)` : ''}`);
  };
}
