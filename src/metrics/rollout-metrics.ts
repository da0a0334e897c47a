/**
 * Rollout's own Prometheus metrics (docs/production.md, "Metrics"): one registry per process, fed where things
 * happen (activities, the gateway, budget ledgers) and served by `rollout worker --metrics-port` next to the
 * Temporal SDK's worker metrics. Counters and histograms only grow within a process: fleet views sum across workers.
 * A leaf: it imports nothing of Rollout's.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const metricsRegistry = new Registry();
collectDefaultMetrics({ register: metricsRegistry });

const registers = [metricsRegistry];

const stepsInProgress = new Gauge({
  name: 'rollout_trial_steps_in_progress',
  help: 'Lifecycle steps running on this worker now, by provider and step (the trials it works on, by state)',
  labelNames: ['provider', 'step'] as const,
  registers,
});

const stepDuration = new Histogram({
  name: 'rollout_step_duration_seconds',
  help: 'Duration of lifecycle steps (build, start, install, execute, verify, collect, stop, cleanup) on this worker',
  labelNames: ['provider', 'step', 'outcome'] as const,
  buckets: [0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200],
  registers,
});

const trialsFinished = new Counter({
  name: 'rollout_trials_finished_total',
  help: 'Trials whose result this worker wrote, by provider, outcome (ok, error) and error type',
  labelNames: ['provider', 'outcome', 'error_type'] as const,
  registers,
});

const trialRestarts = new Counter({
  name: 'rollout_trial_restarts_total',
  help: 'Restarts (lost host, infrastructure errors) of the trials whose result this worker wrote',
  labelNames: ['provider'] as const,
  registers,
});

const sandboxesHeld = new Gauge({
  name: 'rollout_sandboxes_held',
  help: 'Trial environments (containers, pods, sandboxes) started and not yet removed, as seen by this worker; sum across workers for the fleet',
  labelNames: ['provider'] as const,
  registers,
});

const gatewayCalls = new Counter({
  name: 'rollout_gateway_calls_total',
  help: 'Model calls through the gateway, by dialect and outcome (ok, the API error type, refused_trial_limit, refused_job_budget)',
  labelNames: ['dialect', 'outcome'] as const,
  registers,
});

const gatewayLatency = new Histogram({
  name: 'rollout_gateway_call_duration_seconds',
  help: 'Duration of model calls through the gateway, waits and retries included',
  labelNames: ['dialect'] as const,
  buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600],
  registers,
});

const gatewayRetries = new Counter({
  name: 'rollout_gateway_retries_total',
  help: 'Upstream attempts the gateway retried, by dialect and the status that caused it (0: unreachable)',
  labelNames: ['dialect', 'status'] as const,
  registers,
});

const gatewayWait = new Counter({
  name: 'rollout_gateway_wait_seconds_total',
  help: 'Time model calls waited at the gateway, by reason (rate_limit: job.yaml/worker rate_limits leases; other: concurrency slots and retry backoff)',
  labelNames: ['dialect', 'reason'] as const,
  registers,
});

const gatewayTokens = new Counter({
  name: 'rollout_gateway_tokens_total',
  help: 'Tokens of model calls through the gateway, by dialect and kind (input, output, cached)',
  labelNames: ['dialect', 'kind'] as const,
  registers,
});

const jobSpend = new Gauge({
  name: 'rollout_job_spend',
  help: "A budgeted job's spend as its ledger last told this worker, by unit (cost_usd, tokens, llm_calls)",
  labelNames: ['job', 'unit'] as const,
  registers,
});

const jobBudget = new Gauge({
  name: 'rollout_job_budget',
  help: "A budgeted job's limit by unit (cost_usd, tokens): spend / budget is the share used",
  labelNames: ['job', 'unit'] as const,
  registers,
});

/** Jobs whose spend series are kept; the oldest go first (a long-lived worker sees many jobs). */
const JOBS_KEPT = 200;
const jobsSeen: string[] = [];

/** Times one lifecycle step: in progress while it runs, then its duration by outcome. */
export async function measureStep<T>(provider: string, step: string, work: () => Promise<T>): Promise<T> {
  const labels = { provider, step };
  stepsInProgress.inc(labels);
  const end = stepDuration.startTimer(labels);
  try {
    const result = await work();
    end({ outcome: 'ok' });
    return result;
  } catch (err) {
    end({ outcome: (err as Error).name === 'CancelledFailure' ? 'cancelled' : 'failed' });
    throw err;
  } finally {
    stepsInProgress.dec(labels);
  }
}

export function trialFinished(provider: string, errorType: string | null, restarts: number): void {
  trialsFinished.inc({ provider, outcome: errorType ? 'error' : 'ok', error_type: errorType ?? '' });
  if (restarts > 0) trialRestarts.inc({ provider }, restarts);
}

/** Trials whose environment this process started and has not seen removed. */
const sandboxTrials = new Set<string>();

export function sandboxStarted(provider: string, trialId: string): void {
  if (sandboxTrials.has(trialId)) return; // a retried start replaces the earlier attempt's environment
  sandboxTrials.add(trialId);
  sandboxesHeld.inc({ provider });
}

/**
 * A trial's environment was removed here (its stop step, or cleanup). `roaming`: any worker may have started it (a
 * pod, a cloud sandbox), so one started elsewhere counts down here; otherwise only one this process started does.
 */
export function sandboxRemoved(provider: string, trialId: string, roaming: boolean): void {
  if (sandboxTrials.delete(trialId) || roaming) sandboxesHeld.dec({ provider });
}

/** What the gateway records of a model call (src/gateway/records.ts's LlmCallRecord has these fields). */
export interface GatewayCallObservation {
  dialect: string | null;
  latency_ms: number;
  error: { type: string | null } | null;
  refused?: string;
  /** Each upstream request; all but the last were retried. */
  attempts?: { status: number }[];
  waited_ms?: number;
  rate_limit_wait_ms?: number;
  usage: { input_tokens: number; output_tokens: number; cached_tokens: number } | null;
}

export function gatewayCallEnded(call: GatewayCallObservation): void {
  const dialect = call.dialect ?? 'unknown';
  const outcome = call.refused ? `refused_${call.refused}` : call.error ? (call.error.type ?? 'other_error') : 'ok';
  gatewayCalls.inc({ dialect, outcome });
  gatewayLatency.observe({ dialect }, call.latency_ms / 1000);
  for (const attempt of (call.attempts ?? []).slice(0, -1))
    gatewayRetries.inc({ dialect, status: String(attempt.status) });
  const rateLimitWaitMs = call.rate_limit_wait_ms ?? 0;
  if (rateLimitWaitMs > 0) gatewayWait.inc({ dialect, reason: 'rate_limit' }, rateLimitWaitMs / 1000);
  const otherWaitMs = (call.waited_ms ?? 0) - rateLimitWaitMs;
  if (otherWaitMs > 0) gatewayWait.inc({ dialect, reason: 'other' }, otherWaitMs / 1000);
  if (call.usage) {
    gatewayTokens.inc({ dialect, kind: 'input' }, call.usage.input_tokens);
    gatewayTokens.inc({ dialect, kind: 'output' }, call.usage.output_tokens);
    gatewayTokens.inc({ dialect, kind: 'cached' }, call.usage.cached_tokens);
  }
}

/** A budgeted job's ledger answered: its spend and limits as of now. */
export function jobSpendSeen(
  job: string,
  spent: { cost_usd: number; tokens: number; llm_calls: number },
  budget: { cost_usd?: number; tokens?: number }
): void {
  const at = jobsSeen.indexOf(job);
  if (at >= 0) jobsSeen.splice(at, 1);
  jobsSeen.push(job);
  while (jobsSeen.length > JOBS_KEPT) {
    const gone = jobsSeen.shift()!;
    for (const unit of ['cost_usd', 'tokens', 'llm_calls']) jobSpend.remove({ job: gone, unit });
    for (const unit of ['cost_usd', 'tokens']) jobBudget.remove({ job: gone, unit });
  }
  jobSpend.set({ job, unit: 'cost_usd' }, spent.cost_usd);
  jobSpend.set({ job, unit: 'tokens' }, spent.tokens);
  jobSpend.set({ job, unit: 'llm_calls' }, spent.llm_calls);
  if (budget.cost_usd !== undefined) jobBudget.set({ job, unit: 'cost_usd' }, budget.cost_usd);
  if (budget.tokens !== undefined) jobBudget.set({ job, unit: 'tokens' }, budget.tokens);
}
