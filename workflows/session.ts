/**
 * A step-by-step (gym-style) session: the workflow owns one container for its task; each step is an Update executed
 * as an activity on the container's host, so a session outlives restarts of the server that created it and of its
 * client, and shows every step in the Temporal UI. It ends on submit (the verifier's reward), on delete, after an
 * idle timeout or at its maximum lifetime; the container is removed in every case.
 */
import type { ActivityOptions } from '@temporalio/workflow';
import {
  ApplicationFailure,
  CancellationScope,
  allHandlersFinished,
  condition,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
} from '@temporalio/workflow';

import type { ProviderActivities } from '../activities';
import type { SessionCommandInput } from '../activities/session';
import type { SessionEnd, SessionInput, SessionRecord, StepOutcome, ToolCall } from '../src/trial/session-types';
import { primaryReward } from '../src/results/job-stats';
import { providerQueue } from '../src/temporal/queues';
import type { EnvironmentHandle } from '../src/trial/types';
import {
  endSessionSignal,
  sessionClaimUpdate,
  sessionReadyUpdate,
  sessionRecordQuery,
  sessionStepUpdate,
} from './session-messages';
import { notRunHere } from './trial/local-steps';

const HEARTBEAT_TIMEOUT_MS = 10_000;
const GRACE_SEC = 60;
const CLAIM_TIMEOUT = '30 seconds';
/** Sessions started before steps could run as local activities replay without them. */
const LOCAL_STEP_PATCH = 'session-step-local-activity';
const CLAIM_BY_STATE_PATCH = 'session-claim-by-state';

export async function sessionWorkflow(input: SessionInput): Promise<SessionRecord> {
  const { spec, limits } = input;
  const record: SessionRecord = {
    session_id: input.sessionId,
    task_name: spec.taskName,
    workflow_id: spec.trialId,
    status: 'starting',
    warm: input.pooled ?? false,
    ended_by: null,
    error: null,
    rewards: null,
    started_at: new Date().toISOString(),
    ready_at: null,
    ended_at: null,
    host: null,
    steps: [],
  };
  let handle: EnvironmentHandle | null = null;
  let endedBy: SessionEnd | null = null;
  let busy = false;
  // A warm-pool session waits, ready, for a client to claim it; its idle time counts from the claim.
  let claimed = !input.pooled;
  let idleTimeoutSec = limits.idleTimeoutSec;
  /** Set when the container is ready, then after every step. */
  let lastActivity: number;
  const end = (reason: SessionEnd) => (endedBy ??= reason);

  setHandler(sessionRecordQuery, () => record);
  setHandler(endSessionSignal, () => {
    end('deleted');
  });
  setHandler(sessionReadyUpdate, async () => {
    await condition(() => handle !== null || endedBy !== null);
    if (!handle) throw ApplicationFailure.nonRetryable(record.error ?? `session ended (${endedBy})`, 'SessionEnded');
    return { ready_at: record.ready_at! };
  });

  const { claimHost } = proxyActivities<ProviderActivities>({
    taskQueue: providerQueue(spec.environmentType),
    startToCloseTimeout: '1 minute',
    // Sessions share the workers' trial slots; when every worker stays full, the session fails instead of waiting.
    scheduleToCloseTimeout: CLAIM_TIMEOUT,
    retry: { initialInterval: '1s', maximumInterval: '5s' },
  });
  let hostQueue: string;
  try {
    ({ hostQueue } = await claimHost({ trialId: spec.trialId, environmentType: spec.environmentType }));
  } catch {
    end('failed');
    record.error = `no worker had a free slot within ${CLAIM_TIMEOUT}`;
    record.status = 'ended';
    record.ended_by = endedBy;
    await condition(allHandlersFinished);
    return record;
  }
  record.host = hostQueue;
  const host = hostActivities(input, hostQueue);
  const local = proxyLocalActivities<ProviderActivities>({
    startToCloseTimeout: (limits.stepTimeoutSec + GRACE_SEC) * 1000,
    retry: { maximumAttempts: 1 },
  });
  /** Set once a local activity was refused: this session's workflow worker is not its container's host. */
  let notHere = false;
  /** On the container's host: here, as a local activity, when this worker is the host (fast), else on its queue. */
  async function onHost<I, R>(
    here: (input: I & { hostQueue: string }) => Promise<R>,
    there: (input: I) => Promise<R>,
    input: I
  ): Promise<R> {
    if (!notHere && patched(LOCAL_STEP_PATCH)) {
      try {
        return await here({ ...input, hostQueue });
      } catch (err) {
        if (!notRunHere(err)) throw err;
        notHere = true;
      }
    }
    return there(input);
  }
  const runCommand = (command: SessionCommandInput) =>
    onHost(local.runSessionCommandHere, host.runSessionCommand, command);
  /**
   * Liveness before hand-out: a container that died while parked is never given to a client. Asked of the backend
   * (one Docker inspect); sessions claimed before that ran `true` in the container, and still replay so.
   */
  const isAlive = (environment: EnvironmentHandle): Promise<boolean> =>
    patched(CLAIM_BY_STATE_PATCH)
      ? onHost(local.checkSessionAliveHere, host.checkSessionAlive, { spec, handle: environment })
      : runCommand({ spec, handle: environment, command: 'true', timeoutSec: 10, outputLimitBytes: 100 }).then(
          (ran) => ran.exitCode === 0
        );

  setHandler(
    sessionStepUpdate,
    async (call: ToolCall): Promise<StepOutcome> => {
      await condition(() => !busy && (handle !== null || endedBy !== null));
      if (!handle || endedBy) throw ApplicationFailure.nonRetryable(`session ended (${endedBy})`, 'SessionEnded');
      busy = true;
      const startedAt = new Date();
      try {
        const outcome = await runStep(call, handle, record.steps.length + 1);
        record.steps.push({ ...outcome, tool_call: call, started_at: startedAt.toISOString() });
        setCurrentDetails(`**${input.sessionId}** (${spec.taskName}): ${record.steps.length} steps`);
        return outcome;
      } finally {
        busy = false;
        lastActivity = Date.now();
      }
    },
    {
      validator: (call: ToolCall) => {
        if (endedBy) throw new Error(`session ended (${endedBy})`);
        if (call.name !== 'bash' && call.name !== 'submit') throw new Error(`unknown tool "${call.name}"`);
        if (call.name === 'bash' && typeof call.arguments.command !== 'string') {
          throw new Error('bash needs arguments.command (a string)');
        }
      },
    }
  );

  setHandler(
    sessionClaimUpdate,
    async ({ idleTimeoutSec: idle }) => {
      await condition(() => handle !== null || endedBy !== null);
      if (!handle || endedBy) throw ApplicationFailure.nonRetryable(`session ended (${endedBy})`, 'SessionEnded');
      const alive = await isAlive(handle).catch(() => false);
      if (!alive) {
        record.error = 'the parked container was no longer alive';
        end('failed');
        throw ApplicationFailure.nonRetryable(record.error, 'SessionEnded');
      }
      claimed = true;
      if (idle !== undefined) idleTimeoutSec = Math.min(idle, idleTimeoutSec);
      lastActivity = Date.now();
      return { ready_at: record.ready_at! };
    },
    {
      validator: (_claim: { idleTimeoutSec?: number }) => {
        if (claimed) throw new Error('session already claimed');
      },
    }
  );

  async function runStep(call: ToolCall, environment: EnvironmentHandle, step: number): Promise<StepOutcome> {
    const started = Date.now();
    if (call.name === 'submit') {
      end('submitted');
      try {
        const rewards = await host.runVerifier({ spec, handle: environment });
        record.rewards = rewards;
        return {
          observation: `verifier rewards: ${JSON.stringify(rewards)}`,
          reward: primaryReward(rewards) ?? 0,
          finished: true,
          info: { step, rewards, duration_ms: Date.now() - started },
        };
      } catch (err) {
        const message = failureMessage(err);
        record.error = message;
        return {
          observation: `verifier failed: ${message}`,
          reward: 0,
          finished: true,
          info: { step, rewards: null, error: message, duration_ms: Date.now() - started },
        };
      }
    }
    const ran = await runCommand({
      spec,
      handle: environment,
      command: call.arguments.command as string,
      timeoutSec: limits.stepTimeoutSec,
      outputLimitBytes: limits.outputLimitBytes,
    });
    const notes = [
      ran.truncated ? `[output cut at ${limits.outputLimitBytes} bytes]` : '',
      ran.timedOut ? `[step timed out after ${limits.stepTimeoutSec} s; its processes were killed]` : '',
    ].filter(Boolean);
    return {
      observation: [ran.output, ...notes].filter(Boolean).join('\n'),
      reward: 0,
      finished: false,
      info: {
        step,
        exit_code: ran.exitCode,
        timed_out: ran.timedOut,
        truncated: ran.truncated,
        duration_ms: ran.durationMs,
      },
    };
  }

  try {
    const image = await host.buildEnvironment({ spec });
    const started = await host.startEnvironment({ spec, image: image.image });
    handle = started.handle;
    record.status = 'ready';
    record.ready_at = new Date().toISOString();
    lastActivity = Date.now();
    const deadline = Date.now() + limits.maxLifetimeSec * 1000;
    while (!endedBy) {
      const idleLeft = claimed ? lastActivity + idleTimeoutSec * 1000 - Date.now() : Infinity;
      const lifeLeft = deadline - Date.now();
      if (lifeLeft <= 0) end('max_lifetime');
      else if (idleLeft <= 0 && !busy) end('idle');
      else if (!claimed) await condition(() => endedBy !== null || claimed, lifeLeft);
      else await condition(() => endedBy !== null || busy, Math.max(1, Math.min(idleLeft, lifeLeft)));
      if (busy) await condition(() => !busy || endedBy !== null);
    }
  } catch (err) {
    end('failed');
    record.error ??= failureMessage(err);
  } finally {
    await CancellationScope.nonCancellable(async () => {
      await condition(allHandlersFinished);
      record.status = 'ended';
      record.ended_by = endedBy;
      record.ended_at = new Date().toISOString();
      // Best effort, each: the session has ended either way; what failed is logged.
      const failed = (what: string) => (err: unknown) =>
        log.warn(`session ${spec.trialId}: ${what} failed`, { error: failureMessage(err) });
      await host.writeSessionRecord({ spec, record, limits }).catch(failed('writing its record'));
      if (handle) await host.stopEnvironment({ spec, handle }).catch(failed('stopping its environment'));
      await host.cleanupEnvironment({ spec }).catch(failed('cleaning up its environment'));
    });
  }
  return record;
}

/** An activity failure's own message (the cause), not Temporal's wrapper. */
function failureMessage(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  return err.cause instanceof Error ? err.cause.message : err.message;
}

function hostActivities({ spec, limits }: SessionInput, hostQueue: string) {
  const base: ActivityOptions = {
    taskQueue: hostQueue,
    heartbeatTimeout: HEARTBEAT_TIMEOUT_MS,
    scheduleToStartTimeout: spec.hostLostTimeoutSec * 1000,
  };
  const proxy = (seconds: number, maximumAttempts: number) =>
    proxyActivities<ProviderActivities>({
      ...base,
      startToCloseTimeout: (seconds + GRACE_SEC) * 1000,
      retry: { maximumAttempts, initialInterval: 1000 },
    });
  const { timeouts } = spec;
  return {
    buildEnvironment: proxy(timeouts.build, 3).buildEnvironment,
    startEnvironment: proxy(timeouts.start, 3).startEnvironment,
    // A command is not idempotent: never run it twice.
    runSessionCommand: proxy(limits.stepTimeoutSec, 1).runSessionCommand,
    checkSessionAlive: proxy(10, 1).checkSessionAlive,
    runVerifier: proxy(timeouts.verify, 1).runVerifier,
    writeSessionRecord: proxy(timeouts.collect, 3).writeSessionRecord,
    stopEnvironment: proxy(timeouts.stop, 3).stopEnvironment,
    cleanupEnvironment: proxy(timeouts.cleanup, 3).cleanupEnvironment,
  };
}
