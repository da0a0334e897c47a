/** Shapes of a step-by-step session that travel through Temporal (pure types: workflows import this file). */
import type { Rewards, TrialSpec } from './trial';

/** The agent name of a session's result.json: no agent of the job's ran, the session's client drove it. */
export const SESSION_AGENT = 'session';

/**
 * A session step run as a local activity by a worker that is not the container's host: nothing ran, and the step goes
 * to the host's queue instead.
 */
export const NOT_THIS_HOST = 'NotThisHost';

export interface SessionLimits {
  idleTimeoutSec: number;
  maxLifetimeSec: number;
  stepTimeoutSec: number;
  outputLimitBytes: number;
}

export interface SessionInput {
  sessionId: string;
  /** The planned trial of the session's task, named `session__<id>`: its container, folder and slot. */
  spec: TrialSpec;
  limits: SessionLimits;
  /** Started ahead of demand (warm pool): ready and parked until a client claims it. */
  pooled?: boolean;
  /** The caller's policy version at creation (`POST /sessions {policy_version}`); stamped on each step. */
  policyVersion?: number;
}

/**
 * What a client may set with a claim or a step: a shorter idle timeout, a new policy version (the trainer updated its
 * weights; steps from then on carry it).
 */
export interface SessionClaim {
  idleTimeoutSec?: number;
  policyVersion?: number;
}

export interface ToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

export interface StepOutcome {
  observation: string;
  reward: number;
  finished: boolean;
  info: {
    step: number;
    exit_code?: number | null;
    timed_out?: boolean;
    truncated?: boolean;
    duration_ms: number;
    rewards?: Rewards | null;
    error?: string;
  };
}

/** One recorded step of the trajectory. */
export interface SessionStep extends StepOutcome {
  tool_call: ToolCall;
  started_at: string;
  /** The session's policy version when the step ran (as a job's model calls carry theirs); absent when never set. */
  policy_version?: number;
}

export type SessionEnd = 'submitted' | 'deleted' | 'idle' | 'max_lifetime' | 'failed';

/** `<job>/session__<id>/trajectory.json` and what the Session workflow returns. */
export interface SessionRecord {
  session_id: string;
  task_name: string;
  workflow_id: string;
  status: 'starting' | 'ready' | 'ended';
  /** Started by the warm pool ahead of demand. */
  warm: boolean;
  ended_by: SessionEnd | null;
  error: string | null;
  rewards: Rewards | null;
  started_at: string;
  ready_at: string | null;
  ended_at: string | null;
  host: string | null;
  /** The session's policy version now: set at creation or claim, changed by a step's `policy_version`. */
  policy_version?: number;
  steps: SessionStep[];
}

export interface CommandOutcome {
  exitCode: number | null;
  output: string;
  timedOut: boolean;
  truncated: boolean;
  durationMs: number;
}
