import { loadAgentConfig } from '../src/agents/agent';
import { resolveEnv, secretValues } from '../src/env-vars';
import { jobFiles } from '../src/results/files';
import { scrubSecrets } from '../src/results/scrub';
import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, log } from './context';

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
    const agent = await loadAgentConfig(spec.jobDir, spec.agentName);
    let secrets: string[] = [];
    try {
      secrets = secretValues(agent.env, resolveEnv(agent.env, process.env));
    } catch {
      // Unset variables: the agent never ran with them, so there is nothing to scrub.
    }
    const scrubbed = await scrubSecrets(trialDir, secrets);
    await log(spec, 'collect', `logs collected${scrubbed ? `; secrets redacted in ${scrubbed} file(s)` : ''}`);
  };
}
