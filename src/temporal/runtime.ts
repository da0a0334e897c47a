import { IllegalStateError } from '@temporalio/common';
import { DefaultLogger, makeTelemetryFilterString, Runtime } from '@temporalio/worker';

/**
 * Temporal's own logging at ROLLOUT_TEMPORAL_LOG_LEVEL (default ERROR), so Rollout's output stays readable. A
 * process that installed its own runtime first (a library user) keeps it.
 */
export function installQuietRuntime(): void {
  const level = (process.env.ROLLOUT_TEMPORAL_LOG_LEVEL ?? 'ERROR') as 'ERROR';
  try {
    Runtime.install({
      logger: new DefaultLogger(level),
      telemetryOptions: { logging: { forward: {}, filter: makeTelemetryFilterString({ core: level }) } },
    });
  } catch (err) {
    if (!(err instanceof IllegalStateError)) throw err;
  }
}
