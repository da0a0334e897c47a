/**
 * All activities, built over their dependencies. Workflows import only `type Activities` from here.
 * Lifecycle steps run on a host's own task queue; the rest on shared queues (see workers/).
 */
import { measureStep } from '../src/metrics/rollout-metrics';
import type { TrialSpec } from '../src/contracts/trial';
import type { JobBudgetReader } from '../src/budget/workflow/spend';
import { buildEnvironment } from './build';
import { claimHost } from './claim-host';
import { cleanupEnvironment } from './cleanup';
import { collectLogs } from './collect';
import type { ActivityDeps } from './context';
import { cappingErrors, heartbeatingActivity } from './context';
import { executeAgent } from './execute';
import { removeImage } from './images';
import { installAgent } from './install';
import { onHost } from './on-host';
import { readPlanPage } from './plan';
import { endedTrials } from './reconcile';
import { uploadTrial, writeJobResult, writeTrialResult } from './results';
import { scrubbingErrors } from './secrets';
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
  return cappingErrors(
    scrubbingErrors({
      claimHost: heartbeatingActivity(claimHost(deps)),
      buildEnvironment: measured('build', buildEnvironment(deps)),
      startEnvironment: measured('start', startEnvironment(deps)),
      installAgent: measured('install', installAgent(deps)),
      executeAgent: measured('execute', executeAgent(deps)),
      runVerifier: measured('verify', runVerifier(deps)),
      collectLogs: measured('collect', collectLogs(deps)),
      stopEnvironment: measured('stop', stopEnvironment(deps)),
      cleanupEnvironment: measured('cleanup', cleanupEnvironment(deps)),
      removeImage: removeImage(deps),
      uploadTrial: heartbeatingActivity(uploadTrial),
      writeTrialResult: heartbeatingActivity(writeTrialResult),
      runSessionCommand: runSessionCommand(deps),
      runSessionCommandHere: runSessionCommandHere(deps),
      checkSessionAlive: checkSessionAlive(deps),
      checkSessionAliveHere: checkSessionAliveHere(deps),
      writeSessionRecord,
    })
  );
}

/** A lifecycle step timed for the worker's metrics (src/metrics), by the trial's provider. */
function measured<I extends { spec: TrialSpec }, O>(step: string, activity: (input: I) => Promise<O>) {
  return (input: I): Promise<O> => measureStep(input.spec.environmentType, step, () => activity(input));
}

/**
 * The lifecycle steps a Trial runs as local activities of its workflow worker when that worker is the container's
 * host (no activity task round trip through the server). The agent's own steps (install, execute) are not among
 * them: they never run twice in one environment, and a local activity is run again after a worker crash.
 */
export function createLocalStepActivities(deps: ActivityDeps, provider: ProviderActivities, job: JobActivities) {
  return {
    buildEnvironment: onHost(deps, provider.buildEnvironment),
    startEnvironment: onHost(deps, provider.startEnvironment),
    runVerifier: onHost(deps, provider.runVerifier),
    collectLogs: onHost(deps, provider.collectLogs),
    stopEnvironment: onHost(deps, provider.stopEnvironment),
    cleanupEnvironment: onHost(deps, provider.cleanupEnvironment),
    uploadTrial: onHost(deps, provider.uploadTrial),
    // Also the fallback of a trial whose host is gone: run as an ordinary activity on the job queue, it runs anywhere.
    writeTrialResult: onHost(deps, job.writeTrialResult),
  };
}

/** Activities of the job itself, served next to the workflows; `jobBudget` reads a budgeted job's spend. */
export function createJobActivities(jobBudget: JobBudgetReader) {
  return cappingErrors(
    scrubbingErrors({
      readPlanPage: heartbeatingActivity(readPlanPage),
      endedTrials: heartbeatingActivity(endedTrials),
      writeJobResult: heartbeatingActivity(writeJobResult(jobBudget)),
      writeTrialResult: heartbeatingActivity(writeTrialResult),
    })
  );
}

export type ProviderActivities = ReturnType<typeof createProviderActivities>;
export type LocalStepActivities = ReturnType<typeof createLocalStepActivities>;
export type JobActivities = ReturnType<typeof createJobActivities>;
