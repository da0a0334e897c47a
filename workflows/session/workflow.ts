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

import type { ProviderActivities } from '../../activities';
import type { SessionCommandInput } from '../../activities/session';
import type {
  SessionClaim,
  SessionEnd,
  SessionInput,
  SessionRecord,
  StepOutcome,
  ToolCall,
} from '../../src/contracts/session';
import { primaryReward } from '../../src/results/job-stats';
import { providerQueue } from '../../src/contracts/queues';
import type { EnvironmentHandle } from '../../src/contracts/trial';
import {
  endSessionSignal,
  sessionClaimUpdate,
  sessionReadyUpdate,
  sessionRecordQuery,
  sessionStepUpdate,
} from './messages';
import { notRunHere } from '../trial/local-steps';

const HEARTBEAT_TIMEOUT_MS = 10_000;
const GRACE_SEC = 60;
const CLAIM_TIMEOUT = '30 seconds';
/** Sessions started before steps could run as local activities replay without them. */
const LOCAL_STEP_PATCH = 'session-step-local-activity';
const CLAIM_BY_STATE_PATCH = 'session-claim-by-state';

export async function sessionWorkflow(input: SessionInput): Promise<SessionRecord> {
  const session = new SessionRun(input);
  session.handleQueries();
  const hostQueue = await session.claimHost();
  if (hostQueue === null) return session.record;
  session.onHost(hostQueue);
  session.handleSteps();
  session.handleClaim();
  try {
    await session.startContainer();
    await session.liveUntilEnded();
  } catch (err) {
    session.end('failed');
    session.record.error ??= failureMessage(err);
  } finally {
    await CancellationScope.nonCancellable(() => session.finish());
  }
  return session.record;
}

/** One session's state, and the phases and handlers of its workflow. */
class SessionRun {
  readonly record: SessionRecord;
  private handle: EnvironmentHandle | null = null;
  private endedBy: SessionEnd | null = null;
  private busy = false;
  /** A warm-pool session waits, ready, for a client to claim it; its idle time counts from the claim. */
  private claimed: boolean;
  private idleTimeoutSec: number;
  /** Set when the container is ready, then after every step. */
  private lastActivity = 0;
  private hostQueue = '';
  private host!: ReturnType<typeof hostActivities>;
  private local!: ProviderActivities;
  /** Set once a local activity was refused: this session's workflow worker is not its container's host. */
  private notHere = false;

  constructor(private readonly input: SessionInput) {
    this.record = {
      session_id: input.sessionId,
      task_name: input.spec.taskName,
      workflow_id: input.spec.trialId,
      status: 'starting',
      warm: input.pooled ?? false,
      ended_by: null,
      error: null,
      rewards: null,
      started_at: new Date().toISOString(),
      ready_at: null,
      ended_at: null,
      host: null,
      ...(input.policyVersion !== undefined ? { policy_version: input.policyVersion } : {}),
      steps: [],
    };
    this.claimed = !input.pooled;
    this.idleTimeoutSec = input.limits.idleTimeoutSec;
  }

  end(reason: SessionEnd): void {
    this.endedBy ??= reason;
  }

  handleQueries(): void {
    setHandler(sessionRecordQuery, () => this.record);
    setHandler(endSessionSignal, () => this.end('deleted'));
    setHandler(sessionReadyUpdate, async () => {
      await condition(() => this.handle !== null || this.endedBy !== null);
      if (!this.handle) {
        throw ApplicationFailure.nonRetryable(this.record.error ?? `session ended (${this.endedBy})`, 'SessionEnded');
      }
      return { ready_at: this.record.ready_at! };
    });
  }

  /** A host with a free slot, or null (the session then has ended, failed). */
  async claimHost(): Promise<string | null> {
    const { spec } = this.input;
    const { claimHost } = proxyActivities<ProviderActivities>({
      taskQueue: providerQueue(spec.environmentType),
      startToCloseTimeout: '1 minute',
      // Sessions share the workers' trial slots; when every worker stays full, the session fails instead of waiting.
      scheduleToCloseTimeout: CLAIM_TIMEOUT,
      retry: { initialInterval: '1s', maximumInterval: '5s' },
    });
    try {
      return (await claimHost({ trialId: spec.trialId, environmentType: spec.environmentType })).hostQueue;
    } catch {
      this.end('failed');
      this.record.error = `no worker had a free slot within ${CLAIM_TIMEOUT}`;
      this.record.status = 'ended';
      this.record.ended_by = this.endedBy;
      await condition(allHandlersFinished);
      return null;
    }
  }

  onHost(hostQueue: string): void {
    this.hostQueue = hostQueue;
    this.record.host = hostQueue;
    this.host = hostActivities(this.input, hostQueue);
    this.local = proxyLocalActivities<ProviderActivities>({
      startToCloseTimeout: (this.input.limits.stepTimeoutSec + GRACE_SEC) * 1000,
      retry: { maximumAttempts: 1 },
    });
  }

  /** On the container's host: here, as a local activity, when this worker is the host (fast), else on its queue. */
  private async onContainerHost<I, R>(
    here: (input: I & { hostQueue: string }) => Promise<R>,
    there: (input: I) => Promise<R>,
    input: I
  ): Promise<R> {
    if (!this.notHere && patched(LOCAL_STEP_PATCH)) {
      try {
        return await here({ ...input, hostQueue: this.hostQueue });
      } catch (err) {
        if (!notRunHere(err)) throw err;
        this.notHere = true;
      }
    }
    return there(input);
  }

  private runCommand(command: SessionCommandInput) {
    return this.onContainerHost(this.local.runSessionCommandHere, this.host.runSessionCommand, command);
  }

  /**
   * Liveness before hand-out: a container that died while parked is never given to a client. Asked of the backend
   * (one Docker inspect); sessions claimed before that ran `true` in the container, and still replay so.
   */
  private isAlive(environment: EnvironmentHandle): Promise<boolean> {
    const { spec } = this.input;
    return patched(CLAIM_BY_STATE_PATCH)
      ? this.onContainerHost(this.local.checkSessionAliveHere, this.host.checkSessionAlive, {
          spec,
          handle: environment,
        })
      : this.runCommand({ spec, handle: environment, command: 'true', timeoutSec: 10, outputLimitBytes: 100 }).then(
          (ran) => ran.exitCode === 0
        );
  }

  handleSteps(): void {
    setHandler(sessionStepUpdate, (call: ToolCall, options?: { policyVersion?: number }) => this.step(call, options), {
      validator: (call: ToolCall, _options?: { policyVersion?: number }) => {
        if (this.endedBy) throw new Error(`session ended (${this.endedBy})`);
        if (call.name !== 'bash' && call.name !== 'submit') throw new Error(`unknown tool "${call.name}"`);
        if (call.name === 'bash' && typeof call.arguments.command !== 'string') {
          throw new Error('bash needs arguments.command (a string)');
        }
      },
    });
  }

  private async step(call: ToolCall, options: { policyVersion?: number } = {}): Promise<StepOutcome> {
    await condition(() => !this.busy && (this.handle !== null || this.endedBy !== null));
    if (!this.handle || this.endedBy) {
      throw ApplicationFailure.nonRetryable(`session ended (${this.endedBy})`, 'SessionEnded');
    }
    this.busy = true;
    // Set when the step starts, as a job's call takes the version current when it starts.
    if (options.policyVersion !== undefined) this.record.policy_version = options.policyVersion;
    const version = this.record.policy_version;
    const startedAt = new Date();
    try {
      const outcome = await this.runStep(call, this.handle, this.record.steps.length + 1);
      this.record.steps.push({
        ...outcome,
        tool_call: call,
        started_at: startedAt.toISOString(),
        ...(version !== undefined ? { policy_version: version } : {}),
      });
      setCurrentDetails(`**${this.input.sessionId}** (${this.input.spec.taskName}): ${this.record.steps.length} steps`);
      return outcome;
    } finally {
      this.busy = false;
      this.lastActivity = Date.now();
    }
  }

  handleClaim(): void {
    setHandler(sessionClaimUpdate, (claim) => this.claim(claim), {
      validator: (_claim: SessionClaim) => {
        if (this.claimed) throw new Error('session already claimed');
      },
    });
  }

  private async claim({ idleTimeoutSec: idle, policyVersion }: SessionClaim): Promise<{ ready_at: string }> {
    await condition(() => this.handle !== null || this.endedBy !== null);
    if (!this.handle || this.endedBy) {
      throw ApplicationFailure.nonRetryable(`session ended (${this.endedBy})`, 'SessionEnded');
    }
    const alive = await this.isAlive(this.handle).catch(() => false);
    if (!alive) {
      this.record.error = 'the parked container was no longer alive';
      this.end('failed');
      throw ApplicationFailure.nonRetryable(this.record.error, 'SessionEnded');
    }
    this.claimed = true;
    if (policyVersion !== undefined) this.record.policy_version = policyVersion;
    if (idle !== undefined) this.idleTimeoutSec = Math.min(idle, this.idleTimeoutSec);
    this.lastActivity = Date.now();
    return { ready_at: this.record.ready_at! };
  }

  private async runStep(call: ToolCall, environment: EnvironmentHandle, step: number): Promise<StepOutcome> {
    if (call.name === 'submit') return this.submit(environment, step);
    const { spec, limits } = this.input;
    const ran = await this.runCommand({
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

  /** The verifier's rewards end the session. */
  private async submit(environment: EnvironmentHandle, step: number): Promise<StepOutcome> {
    const started = Date.now();
    this.end('submitted');
    try {
      const rewards = await this.host.runVerifier({ spec: this.input.spec, handle: environment });
      this.record.rewards = rewards;
      return {
        observation: `verifier rewards: ${JSON.stringify(rewards)}`,
        reward: primaryReward(rewards) ?? 0,
        finished: true,
        info: { step, rewards, duration_ms: Date.now() - started },
      };
    } catch (err) {
      const message = failureMessage(err);
      this.record.error = message;
      return {
        observation: `verifier failed: ${message}`,
        reward: 0,
        finished: true,
        info: { step, rewards: null, error: message, duration_ms: Date.now() - started },
      };
    }
  }

  async startContainer(): Promise<void> {
    const { spec } = this.input;
    const image = await this.host.buildEnvironment({ spec });
    const started = await this.host.startEnvironment({ spec, image: image.image });
    this.handle = started.handle;
    this.record.status = 'ready';
    this.record.ready_at = new Date().toISOString();
    this.lastActivity = Date.now();
  }

  /** Until deleted, submitted, idle (once claimed) or at its maximum lifetime; a running step is never cut. */
  async liveUntilEnded(): Promise<void> {
    const deadline = Date.now() + this.input.limits.maxLifetimeSec * 1000;
    while (!this.endedBy) {
      const idleLeft = this.claimed ? this.lastActivity + this.idleTimeoutSec * 1000 - Date.now() : Infinity;
      const lifeLeft = deadline - Date.now();
      if (lifeLeft <= 0) this.end('max_lifetime');
      else if (idleLeft <= 0 && !this.busy) this.end('idle');
      else if (!this.claimed) await condition(() => this.endedBy !== null || this.claimed, lifeLeft);
      else await condition(() => this.endedBy !== null || this.busy, Math.max(1, Math.min(idleLeft, lifeLeft)));
      if (this.busy) await condition(() => !this.busy || this.endedBy !== null);
    }
  }

  /** The record written and the container removed, whatever ended the session. */
  async finish(): Promise<void> {
    const { spec, limits } = this.input;
    await condition(allHandlersFinished);
    this.record.status = 'ended';
    this.record.ended_by = this.endedBy;
    this.record.ended_at = new Date().toISOString();
    // Best effort, each: the session has ended either way; what failed is logged.
    const failed = (what: string) => (err: unknown) =>
      log.warn(`session ${spec.trialId}: ${what} failed`, { error: failureMessage(err) });
    await this.host.writeSessionRecord({ spec, record: this.record, limits }).catch(failed('writing its record'));
    if (this.handle) {
      await this.host.stopEnvironment({ spec, handle: this.handle }).catch(failed('stopping its environment'));
    }
    await this.host.cleanupEnvironment({ spec }).catch(failed('cleaning up its environment'));
  }
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
