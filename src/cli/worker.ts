/**
 * `rollout worker`: workers only (on this or another host), taking trials of any job. With `--metrics-port`, health,
 * readiness and Prometheus metrics for an orchestrator (src/metrics/server.ts). SIGTERM (or SIGINT) drains it: no new
 * trials, the ones it holds finish within `--shutdown-grace`, and what is left then is handed back to other workers.
 */
import { constants } from 'node:os';

import type { Client } from '@temporalio/client';
import type { Command } from 'commander';
import { InvalidArgumentError, Option } from 'commander';

import { defaultHostId, startWorkers } from '../../workers/create-workers';
import type { RunningWorkers } from '../../workers/create-workers';
import type { CaTrustMode } from '../environments/ca-trust';
import { CA_TRUST_MODES } from '../environments/ca-trust';
import type { EnvironmentType } from '../contracts/job-config';
import { ENVIRONMENT_TYPES } from '../environments/registry';
import { WORKER_CONFIG_ENV, loadWorkerConfig, workerCaps } from '../job/worker-config';
import type { LogLevel } from '../contracts/job-config';
import { LOG_LEVELS } from '../contracts/job-config';
import { log } from '../log';
import { freeLoopbackPort, startMetricsServer } from '../metrics/server';
import type { MetricsServer } from '../metrics/server';
import { connectClient, ensureSearchAttributes, resolveTemporal } from '../temporal/connect';
import { installQuietRuntime } from '../temporal/runtime';

interface WorkerFlags {
  env: EnvironmentType[];
  maxTrials: number;
  hostId: string;
  workflows: boolean;
  logLevel: LogLevel;
  containerCaTrust: CaTrustMode;
  config?: string;
  metricsPort?: number;
  metricsHost: string;
  shutdownGrace: number;
}

/** Default of `--shutdown-grace` (seconds); deploy/kubernetes's terminationGracePeriodSeconds leaves room over it. */
export const DEFAULT_SHUTDOWN_GRACE_SEC = 600;

/** How long a readiness probe waits for Temporal's answer. */
const READY_CHECK_TIMEOUT_MS = 3_000;

function wholeNumber(min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`expected a whole number ≥ ${min}`);
    return n;
  };
}

export function addWorkerCommand(program: Command): void {
  program
    .command('worker')
    .description('run workers only (on this or another host), taking trials of any job')
    .addOption(
      new Option('--env <type...>', 'environment types to serve').choices([...ENVIRONMENT_TYPES]).default(['docker'])
    )
    .option('--max-trials <n>', 'trials this worker may hold at once', wholeNumber(1), 8)
    .option('--host-id <id>', 'name of this host for its task queues', defaultHostId())
    .option('--no-workflows', 'serve only activities, not Job/Trial workflows')
    .option(
      '--config <worker.yaml>',
      `this worker's settings: rate_limits, max_* caps (default: $${WORKER_CONFIG_ENV})`
    )
    .addOption(
      new Option('--log-level <level>', "this worker's and its workflows' log level")
        .choices([...LOG_LEVELS])
        .default('info')
    )
    .addOption(
      new Option(
        '--container-ca-trust <mode>',
        "containers trust the host's CA certificates (auto: if it has extra CAs)"
      )
        .choices([...CA_TRUST_MODES])
        .default('auto')
    )
    .option('--metrics-port <n>', 'serve /healthz, /readyz and /metrics (Prometheus) on this port', wholeNumber(0))
    .option('--metrics-host <address>', 'address the metrics port listens on', '127.0.0.1')
    .option(
      '--shutdown-grace <seconds>',
      'on SIGTERM: how long held trials may run on before they are handed back to other workers',
      wholeNumber(0),
      DEFAULT_SHUTDOWN_GRACE_SEC
    )
    .action(runWorker);
}

/** `rollout worker`: metrics first (liveness while connecting), then the workers until they stop or drain. */
async function runWorker(opts: WorkerFlags): Promise<void> {
  // From the start: a pod deleted while its worker connects sends SIGTERM once, and a PID 1 ignores a signal it has
  // no handler for (it would wait out the whole grace period).
  const signals = drainOnSignals(opts.shutdownGrace);
  const config = await loadWorkerConfig(opts.config);
  const sdkPort = opts.metricsPort === undefined ? null : await freeLoopbackPort();
  const sdkMetrics = installQuietRuntime(opts.logLevel, {
    shutdownSignals: [],
    ...(sdkPort ? { prometheusAddress: `127.0.0.1:${sdkPort}` } : {}),
  });
  const endpoint = await resolveTemporal({ startDevServer: false });
  let workers: RunningWorkers | null = null;
  let client: Client | null = null;
  // Up before the connection, so a liveness probe passes while the worker connects (readiness does not).
  const metrics =
    opts.metricsPort === undefined
      ? null
      : await startMetricsServer({
          host: opts.metricsHost,
          port: opts.metricsPort,
          sdkMetricsUrl: sdkPort && sdkMetrics ? `http://127.0.0.1:${sdkPort}/metrics` : null,
          notReady: () => notReady(workers, client),
        });
  if (metrics) log.info(`worker metrics on ${metrics.url}/metrics (health: /healthz, /readyz)`);
  const connected = await connectClient(endpoint);
  client = connected.client;
  await ensureSearchAttributes(connected.connection, endpoint.namespace);
  workers = await startWorkers({
    address: endpoint.address,
    namespace: endpoint.namespace,
    connectionOptions: endpoint.connection,
    client,
    hostId: opts.hostId,
    environmentTypes: opts.env,
    maxTrials: opts.maxTrials,
    serveWorkflows: opts.workflows,
    containerCaTrust: opts.containerCaTrust,
    rateLimits: config.rate_limits,
    caps: workerCaps(config),
    shutdownGraceMs: opts.shutdownGrace * 1000,
  });
  const drained = signals.attach(workers);
  log.info(
    `worker ${workers.workerId}: serving ${opts.env.join(', ')} on ${endpoint.address} (max ${opts.maxTrials} trials)`
  );
  await workers.done;
  await drained(); // a drain's own last steps (handed-back environments removed) follow its stop
  await closeAll(metrics, connected.connection);
}

async function closeAll(metrics: MetricsServer | null, connection: { close(): Promise<void> }): Promise<void> {
  await metrics?.close();
  await connection.close();
}

/**
 * The first SIGTERM or SIGINT drains the worker within the grace period; a second one stops it at once (its held
 * trials' steps are cancelled and restart elsewhere, as after a crash but without waiting for a heartbeat timeout).
 * One that comes while the worker still starts (connecting to Temporal) stops it at once: it holds nothing yet.
 */
function drainOnSignals(graceSec: number): { attach(workers: RunningWorkers): () => Promise<void> } {
  let running: RunningWorkers | null = null;
  let signalled = false;
  let drain: Promise<void> = Promise.resolve();
  const onSignal = (signal: NodeJS.Signals) => {
    if (!running) {
      log.info(`worker: ${signal} before it ran: stopping (it holds nothing yet)`);
      process.exit(128 + constants.signals[signal]); // the status a shell reports for a process the signal ended
    }
    const workers = running;
    if (signalled) {
      log.warn(`worker ${workers.workerId}: ${signal} again: stopping now`);
      void workers.stop();
      return;
    }
    signalled = true;
    log.info(`worker ${workers.workerId}: ${signal}: draining (no new trials; up to ${graceSec} s for held ones)`);
    drain = workers
      .drain(
        (trials) => log.info(`worker ${workers.workerId}: waiting for ${trials} held trial(s) to finish`),
        Date.now() + graceSec * 1000
      )
      .then((handedBack) => {
        if (handedBack > 0) {
          log.warn(
            `worker ${workers.workerId}: grace period over: ${handedBack} trial(s) handed back to other workers`
          );
        } else log.info(`worker ${workers.workerId}: drained`);
      });
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, onSignal);
  return {
    attach(workers) {
      running = workers;
      return () => drain;
    },
  };
}

/** Why the worker is not ready (null: ready): still connecting, draining, a worker not polling, Temporal not answering. */
async function notReady(workers: RunningWorkers | null, client: Client | null): Promise<string | null> {
  if (!workers || !client) return 'connecting to Temporal';
  if (workers.draining()) return 'draining';
  const states = workers.states();
  if (states.some((state) => state !== 'RUNNING')) return `workers ${states.join(', ')}`;
  try {
    await client.connection.withDeadline(Date.now() + READY_CHECK_TIMEOUT_MS, () =>
      client.workflowService.getSystemInfo({})
    );
    return null;
  } catch (err) {
    return `Temporal does not answer: ${(err as Error).message.split('\n')[0]}`;
  }
}
