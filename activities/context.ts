/** What every activity shares: its dependencies, heartbeating while Docker works, and typed task failures. */
import { stat } from 'node:fs/promises';
import path from 'node:path';

import { Context, ApplicationFailure, CancelledFailure } from '@temporalio/activity';

import type { Environment } from '../src/contracts/environment';
import type { SandboxCreation } from '../src/environments/sandbox-creation';
import { phaseNetworks } from '../src/task/policy';
import type { TaskConfig } from '../src/contracts/task-config';
import type { EnvironmentHandle } from '../src/contracts/trial';
import type { PolicyVersions } from '../src/contracts/policy-versions';
import type { ModelGateway } from '../src/gateway/gateway';
import type { EnvironmentType } from '../src/contracts/job-config';
import { trialTaskDir } from '../src/task/locate';
import { appendTrialLog } from '../src/results/trial-log';
import { SecretScrubber } from '../src/results/scrub';
import { secretValuesOf } from '../src/secrets/key-names';
import type { Task, TaskLoad } from '../src/task/load';
import { loadTask } from '../src/task/load';
import type { WorkerCaps } from '../src/task/worker-caps';
import { MissingEnvironmentVariableError, resolveEnv } from '../src/env-vars';
import { capText, formatProblem } from '../src/contracts/errors';
import { CloudQuotaError } from '../src/environments/kit/quota';
import { TaskEnvironmentError } from '../src/contracts/environment';
import { SealedSecretsError, unsealEnv } from '../src/secrets/sealed-env';
import { taskEnvAllowed } from '../src/task/task-env';
import type { TaskErrorType, TrialSpec } from '../src/contracts/trial';

export interface ActivityDeps {
  hostId: string;
  environment(type: EnvironmentType): Environment;
  /** The task queue only this host's worker polls: steps after `start` must run where the container lives. */
  hostQueue(type: EnvironmentType): string;
  slots: TrialSlots;
  /** Host CA bundle that containers get (see src/environments/ca-trust.ts); null: containers keep their own trust. */
  caBundle: string | null;
  /** This worker's model gateway: built-in agents (and custom ones with `gateway: true`) reach models through it. */
  gateway: ModelGateway;
  /** What each sandbox creation waits for: the deployment's pace and this worker's adaptive in-flight limit. */
  creation: SandboxCreation;
  /** The jobs' policy versions, stamped on model calls (absent without a Temporal client: calls go unstamped). */
  policyVersions?: PolicyVersions;
  /** This worker's caps on the trials it starts (worker.yaml `max_*`, with this host's defaults). */
  caps: WorkerCaps;
}

/** Per-worker limit on trials that hold an environment on this host (`rollout worker --max-trials`). */
export interface TrialSlots {
  tryAcquire(trialId: string): boolean;
  release(trialId: string): void;
}

const HEARTBEAT_INTERVAL_MS = 2_000;

/**
 * Runs `work` while heartbeating, so Temporal notices a dead worker within the heartbeat timeout and delivers
 * cancellation, which reaches `work` through the signal.
 */
export async function heartbeating<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const context = Context.current();
  // A local activity has no heartbeat (its workflow task is kept alive instead).
  if (context.info.isLocal) return work(context.cancellationSignal);
  // No heartbeat up front: short steps finish well within the heartbeat timeout, and each heartbeat is a server write.
  const timer = setInterval(() => context.heartbeat(), HEARTBEAT_INTERVAL_MS);
  try {
    return await work(context.cancellationSignal);
  } finally {
    clearInterval(timer);
  }
}

/**
 * A quick housekeeping activity, heartbeating while it runs: with a short heartbeat timeout, a worker that died or a
 * completion the server never got (it was down at that moment) is retried within seconds, not after start-to-close.
 */
export function heartbeatingActivity<A extends unknown[], R>(activity: (...args: A) => Promise<R>) {
  return (...args: A): Promise<R> => heartbeating(() => activity(...args));
}

/** A task outcome (not an infrastructure failure): never retried, recorded as the trial's error. */
export function taskFailure(type: TaskErrorType, message: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(capText(message), type);
}

/**
 * The activities with every error they throw capped (message and stack, causes too) before Temporal puts it in a
 * payload; an environment's task errors (a broken container) as the task failures they are; a cloud quota that
 * outlasted its wait as an infrastructure error not retried at once (the trial restarts after it instead).
 */
export function cappingErrors<T extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: T): T {
  const capped = Object.entries(activities).map(([name, activity]) => [
    name,
    async (...args: Parameters<typeof activity>) => {
      try {
        return await activity(...args);
      } catch (err) {
        if (workerShuttingDown()) throw handedBack(err);
        if (err instanceof CloudQuotaError) throw capError(ApplicationFailure.nonRetryable(err.message, err.name));
        throw capError(err instanceof TaskEnvironmentError ? taskFailure(err.type, err.message) : err);
      }
    },
  ]);
  return Object.fromEntries(capped) as T;
}

/** This worker stops (past its drain's grace period) and cancelled the activity under way. */
function workerShuttingDown(): boolean {
  const context = Context.current();
  const reason: unknown = context.cancellationSignal.reason;
  return (
    context.cancellationDetails?.workerShutdown === true ||
    (reason instanceof CancelledFailure && reason.message === 'WORKER_SHUTDOWN')
  );
}

/**
 * A step cut short by its worker's shutdown, as an infrastructure failure: the trial restarts on another worker.
 * Thrown as it was (a cancellation), the trial's workflow would take it for the trial's own cancellation.
 */
function handedBack(err: unknown): ApplicationFailure {
  const message = `worker stopped mid-step (handed back): ${capText(err instanceof Error ? err.message : String(err))}`;
  return ApplicationFailure.retryable(message, WORKER_SHUTDOWN_ERROR);
}

const WORKER_SHUTDOWN_ERROR = 'WorkerShutdownError';

function capError(err: unknown): unknown {
  for (let error = err; error instanceof Error; error = error.cause) {
    error.message = capText(error.message);
    if (error.stack) error.stack = capText(error.stack);
  }
  return err;
}

/**
 * `${VAR}`s of the job's agent env, resolved from this worker's own environment. An unset variable is a task outcome
 * (every attempt would fail alike), not something to retry.
 */
export function resolveWorkerEnv(env: Record<string, string>): Record<string, string> {
  return resolvingFailures(() => resolveEnv(env, process.env));
}

/**
 * `${VAR}`s of the task's own env (environment, solution, verifier): only the names the job's
 * `environment.task_env_allow` lists are read from this worker (never a vendor key or ROLLOUT_*, even if listed);
 * any other name is a task error. The plan refuses such tasks first; this holds for specs from elsewhere too.
 */
export function resolveTaskEnv(env: Record<string, string>, spec: TrialSpec): Record<string, string> {
  return resolvingFailures(() => resolveEnv(env, process.env, taskEnvAllowed(spec.taskEnvAllow)));
}

function resolvingFailures(resolve: () => Record<string, string>): Record<string, string> {
  try {
    return resolve();
  } catch (err) {
    if (err instanceof MissingEnvironmentVariableError)
      throw taskFailure('MissingEnvironmentVariableError', err.message);
    throw err;
  }
}

/**
 * The trial's own sealed secrets (a remote rollout's API key), unsealed on this worker. A value sealed for another
 * trial or with another key is a configuration error (not retried here; the trial ends an infrastructure error,
 * never scored as the agent's).
 */
export function trialSecretEnv(spec: TrialSpec): Record<string, string> {
  if (!spec.sealedAgentEnv) return {};
  try {
    return unsealEnv(spec.sealedAgentEnv, spec);
  } catch (err) {
    if (err instanceof SealedSecretsError) throw ApplicationFailure.nonRetryable(err.message, err.name);
    throw err;
  }
}

/**
 * A line about fetching the trial's task, written while its task (and so its env) is not loaded yet: nothing of the
 * task's env can be in it, the worker's own secrets are redacted. Every other line goes through activities/secrets.ts
 * `log`, which needs the loaded task (and would wait on this very fetch).
 */
function logTaskFetch(spec: TrialSpec, line: string): Promise<void> {
  const scrubbed = new SecretScrubber(secretValuesOf(process.env)).scrub(line);
  return appendTrialLog(spec.jobDir, spec.trialName, 'task', scrubbed);
}

/** Tasks loaded by this worker, by folder, with the modification times of the files they were loaded from. */
const loadedTasks = new Map<string, { stamp: string; load: Promise<TaskLoad> }>();
const LOADED_TASKS_KEPT = 1000;
const TASK_FILES = ['task.toml', 'instruction.md', 'tests/test.sh', 'solution/solve.sh'];

/**
 * Loads the trial's task (every step needs it: parsed and validated once per worker while its files stay as they
 * were); a task that no longer validates is a task error, not something to retry.
 */
export async function loadTrialTask(spec: TrialSpec): Promise<Task> {
  const taskDir = await trialTaskDir(spec, (line) => logTaskFetch(spec, line));
  const times = await Promise.all(
    TASK_FILES.map((file) =>
      stat(path.join(taskDir, file)).then(
        (info) => `${info.mtimeMs}:${info.size}`,
        () => '-'
      )
    )
  );
  const stamp = times.join(' ');
  let cached = loadedTasks.get(taskDir);
  if (cached?.stamp !== stamp) {
    cached = { stamp, load: loadTask(taskDir) };
    loadedTasks.delete(taskDir);
    if (loadedTasks.size >= LOADED_TASKS_KEPT) loadedTasks.delete(loadedTasks.keys().next().value!);
    loadedTasks.set(taskDir, cached);
  }
  const load = await cached.load.catch((err: unknown) => {
    loadedTasks.delete(taskDir);
    throw err;
  });
  if (!load.task) {
    throw taskFailure('EnvironmentBuildError', load.problems.map(formatProblem).join('; '));
  }
  return load.task;
}

export function tail(text: string, lines = 20): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/**
 * Runs `work` on the network task.toml gives its phase ([agent] or [verifier] network_mode) when that differs from
 * the environment's baseline, and puts the baseline back after, as Harbor does.
 */
export async function inPhaseNetwork<T>(
  environment: Environment,
  handle: EnvironmentHandle,
  config: TaskConfig,
  phase: 'agent' | 'verifier',
  work: () => Promise<T>
): Promise<T> {
  const networks = phaseNetworks(config);
  if (networks[phase] === networks.baseline || !environment.setNetwork) return work();
  await environment.setNetwork(handle, networks[phase]);
  try {
    return await work();
  } finally {
    await environment.setNetwork(handle, networks.baseline);
  }
}
