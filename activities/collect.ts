import { existsSync } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import path from 'node:path';

import { loadAgentConfig } from '../src/agents/config';
import { resolveEnvWithSecrets } from '../src/env-vars';
import { LLM_CALLS_FILE } from '../src/gateway/records';
import type { CollectBudget } from '../src/environments/host-files';
import { trialCollectBudget } from '../src/results/collect-budget';
import { jobFiles, LOG_FOLDERS } from '../src/results/files';
import { scrubSecrets } from '../src/results/scrub';
import type { CollectReport, EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, log, trialSecretEnv } from './context';
import { archiveTaskStepLogs } from './task-step';

export interface CollectInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
  /** A multi-step task's last step that ran: its logs go to `<trial>/steps/<name>/`, as every earlier step's did. */
  taskStep?: string;
}

/**
 * Read past beside them (/logs/artifacts, files an agent left in /logs) when both come in one archive of /logs;
 * beyond this, each is downloaded on its own instead.
 */
const LOGS_SKIPPED_MAX_BYTES = 8 * 2 ** 20;

/**
 * Step 6: /logs/agent and /logs/verifier copied into the trial folder before the container stops, within the job's
 * collect limits, then any resolved secret value scrubbed from what was copied. Returns what was cut.
 */
export function collectLogs(deps: ActivityDeps) {
  return async function collectLogs({ spec, handle, taskStep }: CollectInput): Promise<CollectReport> {
    const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
    const trialEnvironment = deps.environment(spec.environmentType);
    // The gateway's call records are Rollout's: a file of that name from the container never replaces them, nor
    // stands in for them (usage and the trajectory are built from it).
    const calls = path.join(trialDir, 'agent', LLM_CALLS_FILE);
    const gatewayCalls = path.join(trialDir, `.gateway-${LLM_CALLS_FILE}`);
    // (A retried collect finds them already set aside.)
    if (!existsSync(gatewayCalls)) await rename(calls, gatewayCalls).catch(ignoreMissing);
    const ownFolders = LOG_FOLDERS.map((folder) => path.join(trialDir, folder));
    let budget!: CollectBudget;
    await heartbeating(async () => {
      if (taskStep) await archiveTaskStepLogs(trialEnvironment, handle, spec, taskStep);
      // Charged with every step's logs and artifacts, this one's included.
      budget = await trialCollectBudget(trialDir, spec.collectLimits, ownFolders);
      const selection = { folders: LOG_FOLDERS, maxSkippedBytes: LOGS_SKIPPED_MAX_BYTES };
      if (await trialEnvironment.downloadFolders?.(handle, '/logs', selection, trialDir, budget)) return;
      budget = await trialCollectBudget(trialDir, spec.collectLimits, ownFolders); // counted again, folder by folder
      for (const folder of LOG_FOLDERS) {
        await trialEnvironment.download(handle, `/logs/${folder}`, path.join(trialDir, folder), budget);
      }
    });
    await rm(calls, { force: true });
    await rename(gatewayCalls, calls).catch(ignoreMissing);
    const report = budget.report();
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
    const cut = report.limit_reached
      ? `; collect_max_${report.limit_reached} reached, not collected: ${report.cut.join(', ')}`
      : '';
    await log(
      spec,
      'collect',
      `logs collected (${report.files} files, ${report.bytes} bytes)${cut}${scrubbed ? `; secrets redacted in ${scrubbed} file(s)` : ''}`
    );
    return report;
  };
}

function ignoreMissing(err: NodeJS.ErrnoException): void {
  if (err.code !== 'ENOENT') throw err;
}
