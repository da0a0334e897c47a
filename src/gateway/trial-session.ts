/**
 * One trial's session on the gateway (its execute step): its token, its calls' records, its spend against the agent's
 * `limits` and the job's `budget`. Each model call is admitted before it goes upstream, holding its conservative
 * charge (./charge.ts) until its spend is recorded: with its trial's calls in flight under the trial's limits, and
 * with the job's calls in flight on this gateway under the job's budget (./budget.ts). A call that went upstream
 * and returned no usage (a stream cut, the agent gone) is charged that much. A model without a price is refused
 * under a cost cap. The session's close waits for its calls in flight (cutting them after CLOSE_WAIT_MS), so the
 * trial's spend is all reported before its step ends and the job starts another trial.
 */
import { createHash, randomBytes } from 'node:crypto';
import { appendFile } from 'node:fs/promises';
import type http from 'node:http';
import path from 'node:path';

import { log } from '../log';
import type { BudgetRefusal, JobBudget, SpendSource } from '../budget/job-budget';
import { NO_PRICE, untilWoken, wakeAll } from '../budget/job-budget';
import type { TrainingOptions } from './call-additions';
import type { Usage, Vendor } from './dialect';
import type { ApiErrorType } from '../contracts/trial-errors';
import { priceOf } from '../budget/workflow/prices';
import type { RateLimitRule } from '../contracts/job-config';
import type { LlmCallRecord } from './records';
import { LLM_CALLS_FILE } from '../contracts/paths';
import { boundedRecordLine } from './record-bounds';
import type { ReplicaPool } from './replicas';
import { StickyReplica } from './replicas';
import { gatewayCallEnded } from '../metrics/rollout-metrics';
import type { Spend, TrialLimits } from '../budget/workflow/spend';
import { addCallSpend, addSpend, copySpend, emptySpend, limitReached } from '../budget/workflow/spend';
import type { Upstreams } from './upstreams';
import type { GatewayAccess } from '../contracts/agent';

const VENDOR_ROOTS: Record<Vendor, string> = { openai: '/openai/v1', anthropic: '/anthropic', gemini: '/gemini' };

/** How long a session's close waits for its calls in flight before cutting them (and again after). */
const CLOSE_WAIT_MS = 10_000;
/** Tries to report a closing session's spend to its ledger before giving up (the next report from here carries it). */
const FINAL_REPORT_TRIES = 4;

export interface ApiFailure {
  type: ApiErrorType;
  status: number;
  message: string;
}

export interface TrialSessionOptions extends TrainingOptions {
  trialId: string;
  /** The trial's job: its calls get their own adaptive concurrency toward each upstream (call-limits.ts). */
  jobName?: string;
  /** The trial's `agent/` folder on this host: llm-calls.jsonl goes there. */
  agentDir: string;
  upstreams: Upstreams;
  /** job.yaml `rate_limits`: shared limits (leases from the deployment's limiter) and per-worker concurrency caps. */
  rateLimits?: RateLimitRule[];
  /** The agent's job.yaml `limits` on this trial's calls. */
  limits?: TrialLimits;
  /** With job.yaml `budget`: the job whose ledger each call is checked against, and the agent its spend counts for. */
  budget?: { jobName: string; agentName: string };
}

/** What a session needs of its gateway. */
export interface SessionHost {
  budgetOf(jobName: string): JobBudget | null;
  replicaPool(replicas: string[]): ReplicaPool;
  urlFor(host: string): Promise<string>;
  forget(session: TrialSession): void;
}

/** A call's admission: refused (why), the agent gone while it waited, or admitted (`release` once it is recorded). */
export type Admission = { refusal: BudgetRefusal } | { gone: true } | { release: () => void };

export class TrialSession implements SpendSource {
  readonly token = `rollout-${randomBytes(24).toString('hex')}`;
  private seq = 0;
  /** Bytes written to the calls file so far (record-bounds.ts caps it). */
  private recordedBytes = 0;
  private writes: Promise<void> = Promise.resolve();
  private lastFailure: ApiFailure | null = null;
  private readonly spent: Spend = emptySpend();
  /** The conservative charge of each of this trial's calls in flight (its limits count them until recorded). */
  private readonly held = new Set<Spend>();
  private readonly waiters: (() => void)[] = [];
  /** Calls begun and not yet recorded: the close waits for them. */
  private readonly inFlight = new Set<{ res: http.ServerResponse; done: Promise<void> }>();
  private lastRefusal: BudgetRefusal | null = null;
  private closing = false;
  private ended = false;
  private readonly jobBudget: JobBudget | null;
  readonly sessionId = randomBytes(12).toString('hex');
  /** The replica this trial's OpenAI calls go to (job.yaml `replicas`), or null. */
  readonly replicas: StickyReplica | null;
  private readonly totals: Usage & { calls: number } = {
    input_tokens: 0,
    output_tokens: 0,
    cached_tokens: 0,
    calls: 0,
  };
  readonly callsFile: string;
  /** The trial's path segment: readable, and safe in a URL (trial ids hold slashes some SDKs would mangle). */
  readonly pathId: string;

  constructor(
    private readonly gateway: SessionHost,
    readonly options: TrialSessionOptions
  ) {
    this.callsFile = path.join(options.agentDir, LLM_CALLS_FILE);
    const hash = createHash('sha256').update(options.trialId).digest('hex').slice(0, 16);
    this.pathId = `${options.trialId.replace(/[^A-Za-z0-9._-]+/g, '-').slice(-60)}-${hash}`;
    this.jobBudget = options.budget ? gateway.budgetOf(options.budget.jobName) : null;
    this.replicas = options.replicas?.length
      ? new StickyReplica(gateway.replicaPool(options.replicas), options.note ?? (() => undefined))
      : null;
  }

  get agentName(): string {
    return this.options.budget?.agentName ?? '';
  }

  spend(): Spend {
    return copySpend(this.spent);
  }

  closed(): boolean {
    return this.ended;
  }

  /**
   * A model call under way (before its admission): the close waits for its end (the returned function, called once
   * it is recorded). Null once the session is closing: the call is refused as with an expired token.
   */
  begin(res: http.ServerResponse): (() => void) | null {
    if (this.closing) return null;
    let end!: () => void;
    const call = { res, done: new Promise<void>((resolve) => (end = resolve)) };
    this.inFlight.add(call);
    return () => {
      this.inFlight.delete(call);
      end();
    };
  }

  /**
   * Whether a model call may go, holding `charge` (what it may cost) until `release`: the trial's own limits (its
   * calls in flight counted: past them the call waits for those to end), then the job's budget on all workers. A
   * model without a price is refused under a cost cap. A refusal is kept for the trial's outcome; a later call the
   * job's raised budget lets through clears a job refusal.
   */
  async admit(model: string | null, charge: Usage, gone: AbortSignal): Promise<Admission> {
    const unpriced = model === null || priceOf(model) === null;
    const refuse = (kind: BudgetRefusal['kind'], reached: string) => ({
      refusal: (this.lastRefusal = { kind, reached }),
    });
    const noPrice = `${NO_PRICE} "${model ?? '(none named)'}" (src/budget/workflow/prices.ts), so a cost_usd cap cannot bound it`;
    const limits = this.options.limits;
    if (unpriced && limits?.cost_usd !== undefined) return refuse('trial_limit', noPrice);
    const hold = addCallSpend(emptySpend(), model, charge);
    for (;;) {
      const own = limits && limitReached(this.spent, limits);
      if (own) return refuse('trial_limit', own);
      if (gone.aborted) return { gone: true };
      const withHolds = addSpend(this.spend(), this.heldSpend());
      if (!limits || this.held.size === 0 || limitReached(withHolds, limits) === null) break;
      await untilWoken(this.waiters, CLOSE_WAIT_MS, gone);
    }
    this.held.add(hold);
    const releaseOwn = () => {
      if (this.held.delete(hold)) wakeAll(this.waiters);
    };
    const budget = this.jobBudget;
    if (!budget) return { release: releaseOwn };
    const job = await budget
      .admit(hold, () => this.inFlight.size > 1, gone)
      .catch((err: unknown) => {
        releaseOwn();
        throw err;
      });
    if (!('hold' in job)) {
      releaseOwn();
      return 'gone' in job ? job : refuse('job_budget', job.reached);
    }
    const release = () => {
      budget.release(job.hold);
      releaseOwn();
    };
    if (unpriced && budget.costCapped()) {
      release();
      return refuse('trial_limit', noPrice);
    }
    if (this.lastRefusal?.kind === 'job_budget') this.lastRefusal = null;
    return { release };
  }

  private heldSpend(): Spend {
    const total = emptySpend();
    for (const charge of this.held) addSpend(total, charge);
    return total;
  }

  /** The last refusal at the trial's limits or the job's budget: why the trial ended. */
  refusal(): BudgetRefusal | null {
    return this.lastRefusal;
  }

  /** Base URLs and token for a process that reaches this host at `host` (e.g. a container via the bridge IP). */
  async access(host = '127.0.0.1'): Promise<GatewayAccess> {
    return this.accessAt(await this.gateway.urlFor(host));
  }

  /** Base URLs and token for a process that reaches the gateway at `origin` (a relay's, a public URL). */
  accessAt(origin: string): GatewayAccess {
    const root = `${origin.replace(/\/+$/, '')}/t/${this.pathId}`;
    const baseUrls = Object.fromEntries(
      (Object.keys(VENDOR_ROOTS) as Vendor[]).map((vendor) => [vendor, `${root}${VENDOR_ROOTS[vendor]}`])
    ) as Record<Vendor, string>;
    return { token: this.token, baseUrls };
  }

  /** The failure of the last model call, if it failed (a later success clears it): why an agent gave up. */
  failure(): ApiFailure | null {
    return this.lastFailure;
  }

  usage(): Usage & { calls: number } {
    return { ...this.totals };
  }

  nextSeq(): number {
    return ++this.seq;
  }

  /** One call's record; its spend is its `charged` usage when it has one (no usage came back), else its usage. */
  record(call: LlmCallRecord): void {
    if (call.kind === 'generate') gatewayCallEnded(call);
    if (call.kind === 'generate' && !call.refused) {
      // A failure of the API sets the trial's last failure, a success clears it; other errors (a 404, the agent
      // hanging up) leave it as it was.
      const type = call.error?.type;
      if (type) this.lastFailure = { type, status: call.status, message: call.error!.message };
      else if (!call.error) this.lastFailure = null;
      this.totals.calls += 1;
      if (call.usage) {
        this.totals.input_tokens += call.usage.input_tokens;
        this.totals.output_tokens += call.usage.output_tokens;
        this.totals.cached_tokens += call.usage.cached_tokens;
      }
      addCallSpend(this.spent, call.model, call.charged ?? call.usage);
      this.jobBudget?.changed(this);
    }
    const line = boundedRecordLine(call, this.recordedBytes);
    if (line === null) return;
    this.recordedBytes += Buffer.byteLength(line);
    this.writes = this.writes.then(() => appendFile(this.callsFile, line));
  }

  /**
   * Ends the token's validity; resolves once every call under way is recorded (given CLOSE_WAIT_MS, then cut and
   * charged), its spend reported to the job's ledger, and every record on disk.
   */
  async close(): Promise<void> {
    this.gateway.forget(this);
    this.closing = true;
    const pending = [...this.inFlight];
    if (pending.length > 0) {
      const all = Promise.all(pending.map((call) => call.done));
      if (!(await settledWithin(all, CLOSE_WAIT_MS))) {
        for (const call of pending) call.res.destroy();
        if (!(await settledWithin(all, CLOSE_WAIT_MS)))
          log.warn(`trial ${this.options.trialId}: ${this.inFlight.size} model calls still not ended at its close`);
      }
    }
    if (!this.ended) this.replicas?.release();
    this.ended = true;
    if (this.jobBudget) await this.finalReport(this.jobBudget);
    await this.writes;
  }

  /** The session's last report, tried again a few times: the job starts its next trial once it is counted. */
  private async finalReport(budget: JobBudget): Promise<void> {
    budget.changed(this);
    for (let tried = 1; ; tried++) {
      try {
        return await budget.settled();
      } catch (err) {
        // Past the tries: the next report from this worker carries it.
        if (tried >= FINAL_REPORT_TRIES) {
          log.warn(
            `trial ${this.options.trialId}: its spend could not be reported to the job's budget: ${String(err)}`
          );
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 500 * tried));
      }
    }
  }
}

/** Whether `promise` settled within `ms`. */
async function settledWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const settled = await Promise.race([promise.then(() => true as const), timeout]);
  clearTimeout(timer);
  return settled;
}
