import { performance } from 'node:perf_hooks';

import { jobFiles, writeJsonAtomic } from '../src/results/files';
import type { CommandOutcome, SessionRecord } from '../src/trial/session-types';
import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';

export interface SessionCommandInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
  command: string;
  timeoutSec: number;
  outputLimitBytes: number;
}

/**
 * A session's `bash` step, in its container: stdout and stderr as one observation, cut inside the container at the
 * output limit (so a runaway command never floods the worker), every process killed at the step's timeout.
 */
export function runSessionCommand(deps: ActivityDeps) {
  return async function runSessionCommand(input: SessionCommandInput): Promise<CommandOutcome> {
    const started = performance.now();
    const result = await heartbeating((signal) =>
      deps.environment(input.spec.environmentType).exec(input.handle, {
        // The command travels as an environment variable: no quoting to get wrong.
        command: `bash -c "$ROLLOUT_STEP_COMMAND" 2>&1 | head -c ${input.outputLimitBytes + 1}; exit \${PIPESTATUS[0]}`,
        env: { ROLLOUT_STEP_COMMAND: input.command },
        timeoutMs: input.timeoutSec * 1000,
        signal,
      })
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

/** `<job>/session__<id>/trajectory.json`: every step with its tool call, observation and timing. */
export async function writeSessionRecord({ spec, record }: { spec: TrialSpec; record: SessionRecord }): Promise<void> {
  await writeJsonAtomic(`${jobFiles.trialDir(spec.jobDir, spec.trialName)}/trajectory.json`, record);
}
