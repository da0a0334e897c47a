import { performance } from 'node:perf_hooks';

import { ApplicationFailure } from '@temporalio/activity';
import path from 'node:path';

import { jobFiles, writeJsonAtomic } from '../src/results/files';
import type { TrialResult } from '../src/results/trial-result';
import { loadTask } from '../src/task/load';
import { sessionTrajectory } from '../src/trajectory/session';
import { sessionTools } from '../src/trial/session-tools';
import type { CommandOutcome, SessionLimits, SessionRecord } from '../src/contracts/session';
import { NOT_THIS_HOST, SESSION_AGENT } from '../src/contracts/session';
import type { EnvironmentHandle, TrialSpec } from '../src/contracts/trial';
import { INFRASTRUCTURE_ERROR } from '../src/contracts/trial';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';
import { trialLayout } from '../src/contracts/paths';

export interface SessionCommandInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
  command: string;
  timeoutSec: number;
  outputLimitBytes: number;
}

/**
 * The exec of a step: the command travels as an environment variable (no quoting to get wrong) and runs in the
 * pipeline's subshell (a fork of the exec's bash, not a new bash: cheaper per step), its output cut.
 */
export function stepExec(command: string, outputLimitBytes: number) {
  return {
    command: `{ eval "$ROLLOUT_STEP_COMMAND"; } 2>&1 | head -c ${outputLimitBytes + 1}; exit \${PIPESTATUS[0]}`,
    env: { ROLLOUT_STEP_COMMAND: command },
  };
}

/**
 * A session's `bash` step, in its container: stdout and stderr as one observation, cut inside the container at the
 * output limit (so a runaway command never floods the worker), every process killed at the step's timeout. Through
 * the shell the environment keeps open for steps where it has one, else as an exec of its own.
 */
export function runSessionCommand(deps: ActivityDeps) {
  return async function runSessionCommand(input: SessionCommandInput): Promise<CommandOutcome> {
    const started = performance.now();
    const environment = deps.environment(input.spec.environmentType);
    const timeoutMs = input.timeoutSec * 1000;
    const result = await heartbeating(
      async (signal) =>
        (await environment.runStep?.(input.handle, {
          command: input.command,
          outputLimitBytes: input.outputLimitBytes,
          timeoutMs,
          signal,
        })) ??
        (await environment.exec(input.handle, {
          ...stepExec(input.command, input.outputLimitBytes),
          timeoutMs,
          signal,
        }))
    );
    const truncated = Buffer.byteLength(result.stdout) > input.outputLimitBytes;
    return {
      exitCode: result.exitCode,
      output: truncated ? Buffer.from(result.stdout).subarray(0, input.outputLimitBytes).toString() : result.stdout,
      timedOut: result.timedOut,
      truncated,
      durationMs: Math.round(performance.now() - started),
    };
  };
}

/**
 * The step as a local activity of the workflow worker, when that worker is also the container's host: no activity
 * task round trip through the server (the step's Update stays in history). Any other worker refuses before running
 * anything, and the workflow sends the step to the host's queue.
 */
export function runSessionCommandHere(deps: ActivityDeps) {
  return onThisHostOnly(deps, runSessionCommand(deps));
}

export interface SessionAliveInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
}

/**
 * Whether a parked session's container still runs, before it is handed out: one backend call where the environment
 * can answer it (Docker: an inspect), else `true` run in it.
 */
export function checkSessionAlive(deps: ActivityDeps) {
  return async function checkSessionAlive({ spec, handle }: SessionAliveInput): Promise<boolean> {
    const environment = deps.environment(spec.environmentType);
    if (environment.isRunning) return environment.isRunning(handle);
    const ran = await environment.exec(handle, { command: 'true', timeoutMs: 10_000 }).catch(() => null);
    return ran?.exitCode === 0;
  };
}

/** checkSessionAlive as a local activity of the container's host (see runSessionCommandHere). */
export function checkSessionAliveHere(deps: ActivityDeps) {
  return onThisHostOnly(deps, checkSessionAlive(deps));
}

/** `activity`, refused (NotThisHost, before anything runs) by a worker that is not the container's host. */
function onThisHostOnly<I extends { spec: TrialSpec }, R>(deps: ActivityDeps, activity: (input: I) => Promise<R>) {
  return async (input: I & { hostQueue: string }): Promise<R> => {
    if (deps.hostQueue(input.spec.environmentType) !== input.hostQueue) {
      throw ApplicationFailure.nonRetryable(`this worker is not ${input.hostQueue}`, NOT_THIS_HOST);
    }
    return activity(input);
  };
}

export interface SessionRecordInput {
  spec: TrialSpec;
  record: SessionRecord;
  /** The tools' limits, as the client was told them (absent in sessions started before it was passed). */
  limits?: SessionLimits;
}

/**
 * A session's folder holds the same files as a trial's, so the viewer, the job's results and `rollout export` see
 * it: `result.json` (agent "session", the verifier's rewards), `agent/trajectory.json` (ATIF: each tool call, its
 * observation and timing), and `session.json`, the session's own record of its steps.
 */
export async function writeSessionRecord({ spec, record, limits }: SessionRecordInput): Promise<void> {
  const dir = jobFiles.trialDir(spec.jobDir, spec.trialName);
  await writeJsonAtomic(path.join(dir, 'session.json'), record);
  const loaded = await loadTask(spec.taskDir);
  const instruction = loaded.task?.instruction ?? '';
  const tools = limits ? sessionTools(limits) : [];
  await writeJsonAtomic(trialLayout(dir).trajectory, sessionTrajectory(record, instruction, tools));
  const result: TrialResult & { session: object } = {
    trial_name: spec.trialName,
    task_name: spec.taskName,
    dataset_name: spec.datasetName,
    agent_name: SESSION_AGENT,
    agent: null,
    attempt: 1,
    rewards: record.rewards,
    error: record.error ? { type: INFRASTRUCTURE_ERROR, message: record.error, step: 'trial' } : null,
    agent_exit_code: null,
    started_at: record.started_at,
    finished_at: record.ended_at ?? new Date().toISOString(),
    steps: {},
    workflow_id: record.workflow_id,
    job_name: spec.jobName,
    task_dir: spec.taskDir,
    environment_type: spec.environmentType,
    host: record.host,
    image: null,
    unenforced_limits: [],
    restarts: 0,
    collected: null,
    usage: null,
    session: {
      session_id: record.session_id,
      ended_by: record.ended_by,
      warm: record.warm,
      n_steps: record.steps.length,
    },
  };
  await writeJsonAtomic(jobFiles.trialResult(spec.jobDir, spec.trialName), result);
}
