/**
 * All activities, built over their dependencies. Workflows import only `type Activities` from here.
 * Lifecycle steps run on a host's own task queue; the rest on shared queues (see workers/).
 */
import { buildEnvironment } from './build';
import { claimHost } from './claim-host';
import { cleanupEnvironment } from './cleanup';
import { collectLogs } from './collect';
import type { ActivityDeps } from './context';
import { cappingErrors, heartbeatingActivity } from './context';
import { executeAgent } from './execute';
import { removeImage } from './images';
import { installAgent } from './install';
import { readPlanPage } from './plan';
import { endedTrials } from './reconcile';
import { writeJobResult, writeTrialResult } from './results';
import { startEnvironment } from './start';
import { stopEnvironment } from './stop';
import { runVerifier } from './verify';
import {
  checkSessionAlive,
  checkSessionAliveHere,
  runSessionCommand,
  runSessionCommandHere,
  writeSessionRecord,
} from './session';

export type { ActivityDeps, TrialSlots } from './context';

/** Activities of a provider: the shared claim, and the lifecycle steps served on the host queue. */
export function createProviderActivities(deps: ActivityDeps) {
  return cappingErrors({
    claimHost: heartbeatingActivity(claimHost(deps)),
    buildEnvironment: buildEnvironment(deps),
    startEnvironment: startEnvironment(deps),
    installAgent: installAgent(deps),
    executeAgent: executeAgent(deps),
    runVerifier: runVerifier(deps),
    collectLogs: collectLogs(deps),
    stopEnvironment: stopEnvironment(deps),
    cleanupEnvironment: cleanupEnvironment(deps),
    removeImage: removeImage(deps),
    writeTrialResult: heartbeatingActivity(writeTrialResult),
    runSessionCommand: runSessionCommand(deps),
    runSessionCommandHere: runSessionCommandHere(deps),
    checkSessionAlive: checkSessionAlive(deps),
    checkSessionAliveHere: checkSessionAliveHere(deps),
    writeSessionRecord,
  });
}

/** Activities of the job itself, served next to the workflows. */
export const jobActivities = cappingErrors({
  readPlanPage: heartbeatingActivity(readPlanPage),
  endedTrials: heartbeatingActivity(endedTrials),
  writeJobResult: heartbeatingActivity(writeJobResult),
  writeTrialResult: heartbeatingActivity(writeTrialResult),
});

export type ProviderActivities = ReturnType<typeof createProviderActivities>;
export type JobActivities = typeof jobActivities;
