import type { LogLevel as TemporalLogLevel } from '@temporalio/common';
import { IllegalStateError } from '@temporalio/common';
import { DefaultLogger, makeTelemetryFilterString, Runtime } from '@temporalio/worker';

import type { LogLevel } from '../contracts/job-config';
import { logEnabled, setLogLevel } from '../log';

/**
 * Rollout's messages and its workflows' `log` at `level` (the job's log_level); Temporal's own (SDK and core) at
 * ROLLOUT_TEMPORAL_LOG_LEVEL (default ERROR, or DEBUG with log_level debug), so Rollout's output stays readable. A
 * process that installed its own runtime first (a library user) keeps it. `shutdownSignals: []` leaves signals to the
 * caller (`rollout serve` ends its warm pool before its workers stop). False: a runtime was installed already.
 */
export function installQuietRuntime(
  level: LogLevel = 'info',
  options: {
    shutdownSignals?: NodeJS.Signals[];
    /**
     * The workflows of the job this process runs: its in-process worker serves every job's workflows, but only these
     * log here at their own level; other jobs' lines are debug.
     */
    ownsWorkflow?: (workflowId: string) => boolean;
    /** `host:port` where the SDK's core serves its worker metrics in Prometheus text (`rollout worker --metrics-port`). */
    prometheusAddress?: string;
  } = {}
): boolean {
  setLogLevel(level);
  const temporal =
    (process.env.ROLLOUT_TEMPORAL_LOG_LEVEL as TemporalLogLevel | undefined) ?? (level === 'debug' ? 'DEBUG' : 'ERROR');
  const severity = (entryLevel: TemporalLogLevel) => ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR'].indexOf(entryLevel);
  // Workflow `log` calls arrive with sdkComponent "workflow"; everything else is Temporal's own.
  const logger = new DefaultLogger('TRACE', (entry) => {
    const fromWorkflow = entry.meta?.sdkComponent === 'workflow';
    const workflowId: unknown = entry.meta?.workflowId;
    const ours = !options.ownsWorkflow || typeof workflowId !== 'string' || options.ownsWorkflow(workflowId);
    const wanted = fromWorkflow
      ? logEnabled(ours ? entryLevelOf(entry.level) : 'debug')
      : severity(entry.level) >= severity(temporal);
    if (wanted) {
      console.error(`${entry.level.toLowerCase()}: ${entry.message}${errorOf(entry.meta)}${workflowOf(entry.meta)}`);
    }
  });
  try {
    Runtime.install({
      ...(options.shutdownSignals ? { shutdownSignals: options.shutdownSignals } : {}),
      logger,
      telemetryOptions: {
        logging: { forward: {}, filter: makeTelemetryFilterString({ core: temporal }) },
        ...(options.prometheusAddress ? { metrics: { prometheus: { bindAddress: options.prometheusAddress } } } : {}),
      },
    });
    return true;
  } catch (err) {
    if (!(err instanceof IllegalStateError)) throw err;
    return false;
  }
}

function entryLevelOf(level: TemporalLogLevel): LogLevel {
  return level === 'TRACE' || level === 'DEBUG'
    ? 'debug'
    : level === 'INFO'
      ? 'info'
      : level === 'WARN'
        ? 'warn'
        : 'error';
}

/** `: <error>` for a line that says what failed (a workflow's `log.warn(…, { error })`). */
function errorOf(meta: Record<string, unknown> | undefined): string {
  return typeof meta?.error === 'string' ? `: ${meta.error}` : '';
}

/** ` (workflow <id>)` for a workflow's log line. */
function workflowOf(meta: Record<string, unknown> | undefined): string {
  return typeof meta?.workflowId === 'string' ? ` (workflow ${meta.workflowId})` : '';
}
