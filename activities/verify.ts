import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { ApplicationFailure } from '@temporalio/activity';

import type { Environment } from '../src/contracts/environment';
import { TaskEnvironmentError } from '../src/contracts/environment';
import { runHealthcheck } from '../src/environments/healthcheck';
import { CollectBudget } from '../src/environments/host-files';
import { trialCollectBudget } from '../src/results/collect-budget';
import { jobFiles } from '../src/results/files';
import type { Task } from '../src/task/load';
import { separateVerifierNetwork, unsupportedNeed, UnsupportedNetworkError } from '../src/task/policy';
import { separateVerifierEnvironment, taskResources } from '../src/contracts/task-config';
import { taskAtStep } from '../src/task/steps';
import type { CollectedArtifact } from '../src/trial/artifacts';
import { collectArtifacts, placeArtifacts } from '../src/trial/artifacts';
import { verifierBuild } from '../src/trial/verifier-build';

import { readReward } from '../src/trial/reward';
import type { VerifierRun } from '../src/trial/verifier-runs';
import { lastVerifierRun, recordVerifierRun } from '../src/trial/verifier-runs';
import type { EnvironmentHandle, Rewards, TaskErrorType, TrialSpec } from '../src/contracts/trial';
import { TASK_ERROR_TYPES } from '../src/contracts/trial';

/** Largest reward file read: far above any real one (a 10 MB reward.json is fine), far below a worker's memory. */
const REWARD_FILE_MAX_BYTES = 64 * 2 ** 20;
const REWARD_FILES = ['reward.txt', 'reward.json'] as const;

/**
 * Shell that prints each reward file that is a regular file (not a link) after a header line `<marker> <name>
 * <bytes>`, in the test's own exec: no extra round trip to read the reward. An unreadable file prints no size.
 */
function printRewardFiles(marker: string): string {
  const dir = `${CONTAINER_SHELL_PATHS.logs}/verifier`;
  return (
    `for name in ${REWARD_FILES.join(' ')}; do f="${dir}/$name"; ` +
    `if [ -f "$f" ] && [ ! -L "$f" ]; then printf '%s %s %s\\n' ${marker} "$name" "$(wc -c < "$f")"; cat "$f"; fi; done`
  );
}

/**
 * The reward files printed by printRewardFiles; null when the output is not exactly that (cut at the exec's output
 * limit, a file that changed while printed, not valid UTF-8, an unreadable file): then they are copied out instead.
 */
function printedRewardFiles(stdout: string, marker: string): { txt?: string; json?: string } | null {
  const output = Buffer.from(stdout, 'utf8');
  const files: { txt?: string; json?: string } = {};
  let offset = 0;
  while (offset < output.length) {
    const lineEnd = output.indexOf(10, offset);
    if (lineEnd < 0) return null;
    const header = /^(\S+) (reward\.txt|reward\.json) +(\d+)$/.exec(output.subarray(offset, lineEnd).toString());
    if (!header || header[1] !== marker) return null;
    const size = Number(header[3]);
    const content = output.subarray(lineEnd + 1, lineEnd + 1 + size);
    if (content.length !== size || content.toString('utf8').includes('\ufffd')) return null;
    files[header[2] === 'reward.txt' ? 'txt' : 'json'] = content.toString('utf8');
    offset = lineEnd + 1 + size;
  }
  return files;
}

/**
 * The reward files as files (copied out of the environment, not printed through an exec whose output is cut), each
 * undefined when absent. One too big to read is refused as unparsable.
 */
async function downloadRewardFiles(
  environment: Environment,
  handle: EnvironmentHandle
): Promise<{ txt?: string; json?: string; tooBig?: string }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-reward-'));
  try {
    const files: Partial<Record<(typeof REWARD_FILES)[number], string>> = {};
    for (const name of REWARD_FILES) {
      const budget = new CollectBudget({ maxBytes: REWARD_FILE_MAX_BYTES, maxFiles: 1 });
      // Each into a folder of its own: a reward.txt that is a folder must not provide a reward.json.
      await environment.download(handle, `${CONTAINER_PATHS.verifierLogs}/${name}`, path.join(dir, name), budget);
      if (budget.exhausted) return { tooBig: name };
      files[name] = await readFile(path.join(dir, name, name), 'utf8').catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined; // absent, or not a regular file (a link is not followed)
        throw err;
      });
    }
    return { txt: files['reward.txt'], json: files['reward.json'] };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
import { taskStepSpec } from './task-step';
import type { ActivityDeps } from './context';
import { heartbeating, inPhaseNetwork, loadTrialTask, resolveTaskEnv, taskFailure } from './context';
import { log } from './secrets';
import { CONTAINER_PATHS, CONTAINER_SHELL_PATHS } from '../src/contracts/paths';

export interface VerifyInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
  /** A multi-step task's step (task.toml `[[steps]]` name): its tests, verifier keys and artifacts. */
  taskStep?: string;
}

/**
 * Step 5. First, in either mode, Harbor's collection pass: the collect hooks run and the artifacts (/logs/artifacts
 * always) are copied out of the agent's environment into the trial's artifacts/. Shared (the default): a clean
 * /logs/verifier (whatever the agent wrote there is removed), tests/ copied to /tests, test.sh run from the working
 * directory with its output in /logs/verifier/test-stdout.txt, then the reward read (printed by the same exec; copied
 * out when that output cannot be trusted). Separate (Harbor's `verifier.environment_mode`): test.sh runs in an
 * environment of its own, built from tests/ (which owns /tests), healthy, holding only those artifacts; its
 * /logs/verifier then replaces the agent environment's, where collect finds it.
 */
export function runVerifier(deps: ActivityDeps) {
  return async function runVerifier({ spec, handle, taskStep }: VerifyInput): Promise<Rewards> {
    const environment = deps.environment(spec.environmentType);
    const task = taskAtStep(await loadTrialTask(spec), taskStep);
    const separate = separateVerifierEnvironment(task.config);
    const timeoutSec = taskStep ? taskStepSpec(spec, taskStep).timeouts.verify : spec.timeouts.verify;
    const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
    const run = { sandbox: handle.id, step: taskStep ?? null };
    const earlier = await lastVerifierRun(trialDir, run);
    if (earlier && earlier.state !== 'aborted') return earlierOutcome(spec, earlier);
    await recordVerifierRun(trialDir, run, { state: 'started' });
    try {
      const rewards = await scoreOnce();
      await recordVerifierRun(trialDir, run, { state: 'scored', rewards });
      return rewards;
    } catch (err) {
      const failed = taskErrorOf(err);
      await recordVerifierRun(trialDir, run, failed ? { state: 'failed', error: failed } : { state: 'aborted' });
      throw err;
    }

    function scoreOnce(): Promise<Rewards> {
      return heartbeating(async (signal) => {
        // Harbor's collection pass, before the tests in either mode (a multi-step task's after each step, into
        // steps/<name>/artifacts, Harbor's layout).
        const steps = spec.multiStep?.steps ?? [];
        // The agent's environment has no further use in separate mode (on a multi-step task's last step): main is
        // stopped before the sidecars' evidence is taken, as Harbor does; its /logs/verifier is emptied first for the
        // verifier's, copied there later.
        const lastUse = separate && (!taskStep || steps.at(-1)?.name === taskStep);
        let mainStopped = false;
        // The agent's leftovers die first (the execute step left that to this one, see leftoversKilledByVerifier):
        // with the reset, in one exec, where nothing is collected that the reset would touch.
        const killLeftovers = leftoversKilledByVerifier(spec, task, environment);
        const resetFirst = killLeftovers && collectsNothingFirst(task);
        if (resetFirst) {
          await resetVerifierLogs(environment, handle, signal, true, environment.killAllCommand).catch(
            async (err: unknown) => {
              // No process could start, or none will after the kill (a fork bomb's zombies hold the pids limit):
              // killAll has other means (the docker provider restarts the container). Then the reset alone.
              const reason = (err instanceof Error ? err.message : String(err)).split('\n')[0];
              await log(spec, 'verify', `killing the agent's processes with the reset failed (${reason}): killAll`);
              await environment.killAll(handle);
              await resetVerifierLogs(environment, handle, signal, true);
            }
          );
        } else if (killLeftovers) await environment.killAll(handle);
        const artifactsDir = path.join(...(taskStep ? [trialDir, 'steps', taskStep] : [trialDir]), 'artifacts');
        const collected = await collectArtifacts(environment, handle, {
          hooks: task.config.verifier.collect,
          entries: task.config.artifacts,
          hostDir: artifactsDir,
          budget: await trialCollectBudget(trialDir, spec.collectLimits, [artifactsDir]),
          signal,
          report: (message) => log(spec, 'verify', message),
          ...(lastUse
            ? {
                beforeSidecars: async () => {
                  if (!environment.halt) return;
                  await resetVerifierLogs(environment, handle, signal, false);
                  await environment.halt(handle);
                  mainStopped = true;
                },
              }
            : {}),
        });
        if (!separate) {
          if (!resetFirst) await resetVerifierLogs(environment, handle, signal, true);
          // A step's own tests/ over the task's shared one.
          for (const dir of task.testsDirs) await environment.upload(handle, dir, '/tests');
          return test(environment, handle, spec, task, timeoutSec, signal, 'shared');
        }
        return verifySeparately(
          deps,
          environment,
          { spec, handle },
          task,
          collected,
          { timeoutSec, mainStopped },
          signal
        );
      });
    }
  };
}

/**
 * What an earlier run of this step recorded for the same sandbox: its score or its task failure, as it was. One that
 * started and recorded nothing died with its worker; its tests may still run in the sandbox, so they are not started
 * beside them: an infrastructure error, and the trial restarts on a fresh sandbox.
 */
async function earlierOutcome(spec: TrialSpec, earlier: VerifierRun): Promise<Rewards> {
  const at = `recorded ${earlier.at} for sandbox ${earlier.sandbox.slice(0, 12)}`;
  if (earlier.state === 'scored') {
    await log(spec, 'verify', `already scored (${at}): rewards ${JSON.stringify(earlier.rewards)} kept, not run again`);
    return earlier.rewards;
  }
  if (earlier.state === 'failed') {
    await log(spec, 'verify', `already scored (${at}): ${earlier.error.type} kept, not run again`);
    throw taskFailure(earlier.error.type, earlier.error.message);
  }
  const message = `the verifier started (${at}) on a worker that died before it recorded an outcome: not run twice on the same sandbox`;
  await log(spec, 'verify', message);
  throw ApplicationFailure.nonRetryable(message, VERIFIER_INTERRUPTED_ERROR);
}

const VERIFIER_INTERRUPTED_ERROR = 'VerifierInterruptedError';

/** The task failure an error is (a score the agent earned, recorded as such), or null for any other error. */
function taskErrorOf(err: unknown): { type: TaskErrorType; message: string } | null {
  if (err instanceof TaskEnvironmentError) return { type: err.type, message: err.message };
  if (err instanceof ApplicationFailure && isTaskErrorType(err.type)) return { type: err.type, message: err.message };
  return null;
}

async function verifySeparately(
  deps: ActivityDeps,
  environment: Environment,
  { spec, handle }: VerifyInput,
  task: Task,
  collected: CollectedArtifact[],
  { timeoutSec, mainStopped }: { timeoutSec: number; mainStopped: boolean },
  signal: AbortSignal
): Promise<Rewards> {
  const config = separateVerifierEnvironment(task.config)!;
  if (!environment.snapshots) {
    // Only an environment that builds images can build the verifier's from tests/.
    throw taskFailure('EnvironmentStartError', `separate verifier environments need docker, not ${environment.type}`);
  }
  let verifier: EnvironmentHandle;
  try {
    const unsupported = unsupportedNeed({ ...task.config, environment: config });
    if (unsupported) throw new TaskEnvironmentError('EnvironmentStartError', unsupported);
    const build = await verifierBuild(task, {
      force: spec.forceBuild,
      jobName: spec.jobName,
      signal,
      mainEnvKey: spec.envKey,
    });
    const { image } = await environment.build(build!);
    const resources = taskResources(config);
    ({ handle: verifier } = await environment.start({
      image,
      jobName: spec.jobName,
      trialId: spec.trialId,
      trialName: spec.trialName,
      workerId: deps.hostId,
      resources,
      env: resolveTaskEnv(config.env, spec),
      workdir: config.workdir,
      role: 'verifier',
      network: separateVerifierNetwork(task.config, config),
      users: task.config.verifier.user === undefined ? [] : [task.config.verifier.user],
      gpus: resources.gpus,
    }));
    if (config.healthcheck) {
      const { attempts } = await runHealthcheck(environment, verifier, config.healthcheck, signal);
      await log(spec, 'verify', `verifier healthcheck passed (attempt ${attempts}): ${config.healthcheck.command}`);
    }
  } catch (err) {
    if (err instanceof TaskEnvironmentError)
      throw taskFailure(err.type, `separate verifier environment: ${err.message}`);
    if (err instanceof UnsupportedNetworkError) throw taskFailure('EnvironmentStartError', err.message);
    throw err;
  }
  try {
    await log(
      spec,
      'verify',
      `separate verifier environment ${verifier.id.slice(0, 12)} with ${collected.length} artifact(s)`
    );
    await placeArtifacts(environment, verifier, collected);
    const rewards = await test(environment, verifier, spec, task, timeoutSec, signal, 'separate');
    await copyVerifierLogs(spec, environment, verifier, handle, mainStopped ? null : signal);
    return rewards;
  } finally {
    await environment.remove(verifier);
  }
}

/**
 * Whether the agent's processes are left running after its step, for the verifier's first exec to kill (one exec
 * less per trial): when the tests run next in the agent's own environment. A separate verifier leaves the agent's
 * environment to the collection pass, so the execute step kills them itself.
 */
export function leftoversKilledByVerifier(spec: TrialSpec, task: Task, environment: Environment): boolean {
  return spec.verify && !separateVerifierEnvironment(task.config) && environment.killAllCommand !== undefined;
}

/** No collect hook runs and no declared artifact is copied before the tests: only /logs/artifacts, which no reset touches. */
function collectsNothingFirst(task: Task): boolean {
  return task.config.verifier.collect.length === 0 && task.config.artifacts.length === 0;
}

async function resetVerifierLogs(
  environment: Environment,
  handle: EnvironmentHandle,
  signal: AbortSignal,
  withTests: boolean,
  /** The environment's killAllCommand, run first. */
  killFirst?: string
): Promise<void> {
  const { logs, tests } = CONTAINER_SHELL_PATHS;
  const folders = withTests ? `"${logs}/verifier" "${tests}"` : `"${logs}/verifier"`;
  const reset = await environment.exec(handle, {
    // Emptied rather than replaced: a compose task may mount a volume there (HOST_VERIFIER_LOGS_PATH).
    command: `${killFirst ? `${killFirst}; ` : ''}mkdir -p ${folders} && find ${folders} -mindepth 1 -delete && chmod 777 "${logs}/verifier"`,
    user: '0',
    signal,
  });
  if (reset.exitCode !== 0) throw new Error(`could not reset /logs/verifier: ${reset.stderr.trim()}`);
}

/**
 * Runs tests/test.sh where /tests is and reads the reward. In the agent's environment, on the network task.toml gives
 * the verifier phase; a separate verifier's environment was started on its own.
 */
async function test(
  environment: Environment,
  handle: EnvironmentHandle,
  spec: TrialSpec,
  task: Task,
  timeoutSec: number,
  signal: AbortSignal,
  where: 'shared' | 'separate'
): Promise<Rewards> {
  const { logs, tests } = CONTAINER_SHELL_PATHS;
  const marker = `rollout-reward-${randomBytes(8).toString('hex')}`;
  const inPhase = <T>(work: () => Promise<T>) =>
    where === 'shared' ? inPhaseNetwork(environment, handle, task.config, 'verifier', work) : work();
  const run = await inPhase(() =>
    environment.exec(handle, {
      command: `bash "${tests}/test.sh" > "${logs}/verifier/test-stdout.txt" 2>&1; ${printRewardFiles(marker)}`,
      env: resolveTaskEnv(task.config.verifier.env, spec),
      user: task.config.verifier.user,
      timeoutMs: timeoutSec * 1000,
      signal,
    })
  );
  await log(spec, 'verify', run.timedOut ? 'tests/test.sh timed out' : `tests/test.sh exit ${run.exitCode}`);
  if (run.timedOut) throw taskFailure('VerifierTimeoutError', `tests/test.sh exceeded ${timeoutSec} s`);

  const printed = printedRewardFiles(run.stdout, marker);
  const reward = readReward(printed ?? (await downloadRewardFiles(environment, handle)));
  if ('error' in reward) {
    await log(spec, 'verify', `${reward.error}: ${reward.message}`);
    throw taskFailure(reward.error, reward.message);
  }
  await log(spec, 'verify', `rewards ${JSON.stringify(reward.rewards)}`);
  return reward.rewards;
}

/**
 * The separate verifier's /logs/verifier into the agent's environment, where the collect step takes it from (a
 * stopped container takes files too). `resetWith` null: the agent's /logs/verifier was emptied before main stopped.
 */
async function copyVerifierLogs(
  spec: TrialSpec,
  environment: Environment,
  from: EnvironmentHandle,
  to: EnvironmentHandle,
  resetWith: AbortSignal | null
): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-verifier-logs-'));
  try {
    // Within the job's collect limits: the task's test.sh writes what it likes there, and this copy is on the worker.
    const budget = new CollectBudget(spec.collectLimits);
    await environment.download(from, CONTAINER_PATHS.verifierLogs, dir, budget);
    const report = budget.report();
    if (report.limit_reached) {
      const cut = report.cut.join(', ');
      await log(
        spec,
        'verify',
        `separate verifier's /logs/verifier: collect_max_${report.limit_reached} reached, not copied: ${cut}`
      );
    }
    if (resetWith) await resetVerifierLogs(environment, to, resetWith, false);
    await environment.upload(to, dir, CONTAINER_PATHS.verifierLogs);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function isTaskErrorType(type: string | undefined | null): type is TaskErrorType {
  return (TASK_ERROR_TYPES as readonly (string | undefined | null)[]).includes(type);
}
