import path from 'node:path';

import { ApplicationFailure } from '@temporalio/activity';

import { loadAgentConfig } from '../src/agents/config';
import { installGate } from '../src/agents/install-gate';
import { caBundleStart } from '../src/environments/ca-trust';
import type { Environment } from '../src/contracts/environment';
import { INSTRUCTION_FILE, TaskEnvironmentError } from '../src/contracts/environment';
import { runHealthcheck } from '../src/environments/healthcheck';
import { sandboxStarted } from '../src/metrics/rollout-metrics';
import {
  phaseNetworks,
  taskUsers,
  unenforcedTaskKeys,
  unsupportedNeed,
  UnsupportedNetworkError,
} from '../src/task/policy';
import { stepTaskConfig } from '../src/task/steps';
import type { EnvironmentHandle, TrialSpec } from '../src/contracts/trial';
import type { WorkerCaps } from '../src/task/worker-caps';
import { WORKER_CAPS_ERROR, workerCapExcess } from '../src/task/worker-caps';
import { containerCaBundle, containerEnv, installSnapshotKey } from './agent-run';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, taskFailure } from './context';
import { log } from './secrets';
import { sandboxRecordState } from '../src/results/sandbox-record';
import { recordedCreation, removeRecordedSandboxes } from './sandbox-record';

export interface StartInput {
  spec: TrialSpec;
  image: string;
}

export interface StartOutput {
  handle: EnvironmentHandle;
  unenforced: string[];
}

/** Room left in the start step (after waiting for another trial's install) to start the container itself. */
const START_MARGIN_MS = 60_000;

/**
 * Step 2: a fresh environment for the trial, with its resource limits, the instruction in the file
 * $ROLLOUT_TASK_INSTRUCTION_FILE and, when small enough, in $ROLLOUT_TASK_INSTRUCTION. Whatever an earlier attempt of
 * this trial left on this host is removed first. A catalogue agent's install snapshot of this image, when this host
 * has one, is started instead of the image. It starts on task.toml's baseline network, with its GPUs, and its
 * healthcheck must pass before the step ends. Task keys not acted on here are returned among `unenforced`.
 */
export function startEnvironment(deps: ActivityDeps) {
  return async function startEnvironment({ spec, image }: StartInput): Promise<StartOutput> {
    refuseOverWorkerCaps(spec, deps.caps);
    const [task, agent] = await Promise.all([loadTrialTask(spec), loadAgentConfig(spec.jobDir, spec.agentName)]);
    const environment = deps.environment(spec.environmentType);
    try {
      const unsupported = unsupportedNeed(task.config);
      if (unsupported) throw taskFailure('EnvironmentStartError', unsupported);
      const networks = phaseNetworks(task.config);
      // A multi-step task's steps may set their own phases' networks: an allowlist there is refused now, not later.
      for (const step of task.config.steps ?? []) phaseNetworks(stepTaskConfig(task.config, step));
      const started = await heartbeating(async (signal) => {
        const key = installSnapshotKey(deps, task, agent, spec);
        const caBundle = containerCaBundle(deps, spec.environmentType);
        const ca = caBundle ? caBundleStart(caBundle) : null;
        const snapshot = await findSnapshot(environment, image, key, spec, signal);
        const creation = {
          provider: spec.environmentType,
          perSecond: spec.createsPerSecond,
          owner: spec.trialId,
          signal,
        };
        // What an earlier attempt created (on any host) goes first; this one's sandbox is recorded as it is made.
        const { empty: firstCreation } = await sandboxRecordState(spec.jobDir, spec.trialName);
        await removeRecordedSandboxes(environment, spec, 'start');
        const result = await deps.creation.create(creation, () =>
          recordedCreation(spec, deps.hostId, () =>
            environment.start({
              image: snapshot ?? image,
              jobName: spec.jobName,
              trialId: spec.trialId,
              trialName: spec.trialName,
              workerId: deps.hostId,
              resources: spec.resources,
              env: containerEnv(deps, task, spec),
              workdir: task.config.environment.workdir,
              environmentDir: path.join(task.dir, 'environment'),
              envKey: spec.envKey,
              network: networks.baseline,
              gpus: task.resources.gpus,
              users: taskUsers(task.config),
              // The instruction's text (validated UTF-8, so exactly the task's bytes) as INSTRUCTION_FILE.
              files: [{ containerPath: INSTRUCTION_FILE, text: task.instruction }, ...(ca?.files ?? [])],
              setup: ca?.setup,
              settings: spec.environmentSettings,
              budgetSec: trialBudgetSec(spec),
              firstCreation,
              timeoutMs: Math.max(START_MARGIN_MS, spec.timeouts.start * 1000 - START_MARGIN_MS),
              signal,
            })
          )
        );
        sandboxStarted(spec.environmentType, spec.trialId);
        for (const warning of result.warnings ?? []) await log(spec, 'start', `warning: ${warning}`);
        const check = task.config.environment.healthcheck;
        if (check) {
          const { attempts } = await runHealthcheck(environment, result.handle, check, signal);
          await log(spec, 'start', `healthcheck passed (attempt ${attempts}): ${check.command}`);
        }
        return { ...result, snapshot };
      });
      const phasesOffline = networks.agent === 'none' || networks.verifier === 'none';
      const unenforcedNetwork = !environment.setNetwork && phasesOffline ? ['network'] : [];
      const unenforced = [
        ...new Set([...started.unenforced, ...unenforcedNetwork, ...unenforcedTaskKeys(task.config)]),
      ];
      const notEnforced = unenforced.length ? ` (not enforced here: ${unenforced.join(', ')})` : '';
      const from = started.snapshot ? ` from install snapshot ${started.snapshot}` : '';
      await log(spec, 'start', `environment ${started.handle.id.slice(0, 12)} started${from}${notEnforced}`);
      return { handle: started.handle, unenforced };
    } catch (err) {
      if (err instanceof TaskEnvironmentError) throw taskFailure(err.type, err.message);
      if (err instanceof UnsupportedNetworkError) throw taskFailure('EnvironmentStartError', err.message);
      throw err;
    }
  };
}

/** What the trial may still spend in its environment after start: install, agent, verifier and collection. */
function trialBudgetSec(spec: TrialSpec): number {
  const { install, execute, verify, collect, stop } = spec.timeouts;
  // A multi-step task's steps each have their own limits.
  const steps = spec.multiStep?.steps.reduce((sum, step) => sum + step.timeouts.prepare + step.timeouts.verify, 0);
  return install + (steps ?? execute + verify) + collect + stop;
}

function findSnapshot(
  environment: Environment,
  image: string,
  key: string | null,
  spec: TrialSpec,
  signal: AbortSignal
): Promise<string | null> {
  const snapshots = environment.snapshots;
  if (!key || !snapshots) return Promise.resolve(null);
  const maxWaitMs = Math.max(0, spec.timeouts.start * 1000 - START_MARGIN_MS);
  return installGate.snapshotFor(`${image}\n${key}`, spec.trialId, () => snapshots.find(image, key), signal, maxWaitMs);
}

/**
 * The trial's resources, steps and timeouts within this worker's caps, whatever the job planned: over them, no
 * environment starts. The refusal is not the task's or the agent's doing, so it is not scored (an infrastructure
 * error: the trial may run on a worker whose caps allow it).
 */
function refuseOverWorkerCaps(spec: TrialSpec, caps: WorkerCaps) {
  const excess = workerCapExcess(spec, caps);
  if (excess.length > 0)
    throw ApplicationFailure.nonRetryable(
      `this worker refuses the trial: ${excess.map((over) => `${over.field}: ${over.message}`).join('; ')}`,
      WORKER_CAPS_ERROR
    );
}
