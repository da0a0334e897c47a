import { mkdir } from 'node:fs/promises';
import path from 'node:path';

import type { CollectBudget } from '../src/environments/host-files';
import { trialCollectBudget } from '../src/results/collect-budget';
import { jobFiles } from '../src/results/files';
import { restoreGatewayCalls, setGatewayCallsAside } from '../src/results/gateway-calls';
import type { CollectReport, EnvironmentHandle, TrialSpec } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';
import { log, markUnscrubbed, scrubTrialFolder } from './secrets';
import { archiveTaskStepLogs } from './task-step';
import { CONTAINER_PATHS, LOG_FOLDERS, trialLayout } from '../src/contracts/paths';

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
 * collect limits, then any secret value scrubbed from what was copied. Returns what was cut.
 */
export function collectLogs(deps: ActivityDeps) {
  return async function collectLogs({ spec, handle, taskStep }: CollectInput): Promise<CollectReport> {
    const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
    const trialEnvironment = deps.environment(spec.environmentType);
    await mkdir(trialLayout(trialDir).agent, { recursive: true });
    await setGatewayCallsAside(trialDir);
    // Until the scrub below is done, what is extracted may hold secrets: the mark makes the upload and the result
    // step scrub first, should this activity die half-way (activities/secrets.ts).
    await markUnscrubbed(trialDir);
    const ownFolders = LOG_FOLDERS.map((folder) => path.join(trialDir, folder));
    let budget!: CollectBudget;
    let scrubbed: number;
    try {
      await heartbeating(async () => {
        if (taskStep) await archiveTaskStepLogs(trialEnvironment, handle, spec, taskStep);
        // Charged with every step's logs and artifacts, this one's included.
        budget = await trialCollectBudget(trialDir, spec.collectLimits, ownFolders);
        const selection = { folders: LOG_FOLDERS, maxSkippedBytes: LOGS_SKIPPED_MAX_BYTES };
        if (await trialEnvironment.downloadFolders?.(handle, CONTAINER_PATHS.logs, selection, trialDir, budget)) return;
        budget = await trialCollectBudget(trialDir, spec.collectLimits, ownFolders); // counted again, folder by folder
        for (const folder of LOG_FOLDERS) {
          await trialEnvironment.download(
            handle,
            `${CONTAINER_PATHS.logs}/${folder}`,
            path.join(trialDir, folder),
            budget
          );
        }
      });
    } finally {
      // Whatever the download did (a corrupt archive, a full disk): the container's llm-calls.jsonl never stays in
      // place of the gateway's, and everything extracted so far is scrubbed (a scrub that fails fails the step).
      await restoreGatewayCalls(trialDir);
      scrubbed = await scrubTrialFolder(spec);
    }
    const report = budget.report();
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
