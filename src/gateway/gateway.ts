/**
 * The model gateway: an HTTP proxy each worker runs on its host, between a trial's agent and the model vendor.
 * A trial's calls arrive under `/t/<trialId>/<vendor>/…` with a per-trial token instead of a key; the gateway puts
 * the real key (read on the worker) on the upstream request, passes responses through as they arrive (SSE is never
 * buffered), and appends one record per call to the trial's `agent/llm-calls.jsonl` as each call ends.
 *
 * Tokens are valid only between openTrial and TrialSession.close (the execute step): a token copied out of a
 * container is useless after its trial, and a wrong token never reaches upstream.
 * Rate limits and overload are absorbed here (forward.ts): a 429, 503 or 529 is retried within `max_wait` per call,
 * and each upstream gets an adaptive concurrency limit (adaptive-limit.ts), so a burst settles instead of cascading.
 */
import { createHash, randomBytes } from 'node:crypto';
import { appendFile, mkdir } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';

import { log } from '../log';
import type { BudgetRefusal, SpendLedgers, SpendSource } from './budget';
import { JobBudget, refusalMessage } from './budget';
import type { Usage, Vendor } from './dialect';
import { dialectOf } from './dialects';
import type { ApiErrorType } from './errors';
import type { CallLimitsOptions } from './call-limits';
import { CallLimits } from './call-limits';
import type { ShapedCall, TrainingOptions } from './call-additions';
import { replyFilter, shapeCall, trainingFields } from './call-additions';
import type { Forwarded } from './forward';
import { forward } from './forward';
import type { LlmCallRecord } from './records';
import { LLM_CALLS_FILE } from './records';
import { boundedRecordLine } from './record-bounds';
import type { RateLimitRule } from './rate-window';
import { DEFAULT_MAX_WAIT_MS } from './retry-wait';
import type { Spend, TrialLimits } from './spend';
import { addCallSpend, copySpend, emptySpend, limitReached } from './spend';
import { UpstreamAgents } from './upstream-agents';
import type { ReplicaPool } from './replicas';
import { ReplicaPools, StickyReplica } from './replicas';
import { gatewayCallEnded } from '../metrics/rollout-metrics';
import { acceptedCall, passedHeaders, upstreamKeyPlace } from './routes';
import type { GatewayAccess, Upstream, Upstreams } from './upstreams';
import { credentialOf, parseJson, reply, upstreamTarget } from './wire';

const VENDOR_ROOTS: Record<Vendor, string> = { openai: '/openai/v1', anthropic: '/anthropic', gemini: '/gemini' };

export interface ApiFailure {
  type: ApiErrorType;
  status: number;
  message: string;
}

export interface TrialSessionOptions extends TrainingOptions {
  trialId: string;
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

export class TrialSession implements SpendSource {
  readonly token = `rollout-${randomBytes(24).toString('hex')}`;
  private seq = 0;
  /** Bytes written to the calls file so far (record-bounds.ts caps it). */
  private recordedBytes = 0;
  private writes: Promise<void> = Promise.resolve();
  private lastFailure: ApiFailure | null = null;
  private readonly spent: Spend = emptySpend();
  private lastRefusal: BudgetRefusal | null = null;
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
    private readonly gateway: ModelGateway,
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
   * Whether a model call may go: the trial's own limits, then the job's budget on all workers. A refusal is kept for
   * the trial's outcome; a later call the job's raised budget lets through clears a job refusal.
   */
  async admit(): Promise<BudgetRefusal | null> {
    const own = this.options.limits && limitReached(this.spent, this.options.limits);
    if (own) return (this.lastRefusal = { kind: 'trial_limit', reached: own });
    const job = await this.jobBudget?.check();
    if (job) return (this.lastRefusal = { kind: 'job_budget', reached: job });
    if (this.lastRefusal?.kind === 'job_budget') this.lastRefusal = null;
    return null;
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

  record(call: LlmCallRecord): void {
    if (call.kind === 'generate') gatewayCallEnded(call);
    if (call.kind === 'generate' && !call.refused) {
      // An API failure sets the trial's last failure, a success clears it; other errors (a 404, a hang-up) do not.
      const type = call.error?.type;
      if (type) this.lastFailure = { type, status: call.status, message: call.error!.message };
      else if (!call.error) this.lastFailure = null;
      this.totals.calls += 1;
      if (call.usage) {
        this.totals.input_tokens += call.usage.input_tokens;
        this.totals.output_tokens += call.usage.output_tokens;
        this.totals.cached_tokens += call.usage.cached_tokens;
      }
      addCallSpend(this.spent, call.model, call.usage);
      this.jobBudget?.changed(this);
    }
    const line = boundedRecordLine(call, this.recordedBytes);
    if (line === null) return;
    this.recordedBytes += Buffer.byteLength(line);
    this.writes = this.writes.then(() => appendFile(this.callsFile, line));
  }

  /** Ends the token's validity; resolves once every record is on disk. */
  async close(): Promise<void> {
    this.gateway.forget(this);
    if (!this.ended) this.replicas?.release();
    this.ended = true;
    if (this.jobBudget) {
      this.jobBudget.changed(this);
      // Best effort: a ledger that cannot be reached now is told by the next report from this worker.
      await this.jobBudget
        .settled()
        .catch((err: unknown) =>
          log.warn(`trial ${this.options.trialId}: its spend could not be reported to the job's budget: ${String(err)}`)
        );
    }
    await this.writes;
  }
}

export interface ModelGatewayOptions extends CallLimitsOptions {
  /** How long one call may wait at the gateway in all (slots, retry waits) before its failure is passed on. */
  maxWaitMs?: number;
  /** Where budgeted jobs' spend is kept; without it, only the agents' per-trial `limits` are enforced. */
  spendLedgers?: SpendLedgers;
}

export class ModelGateway {
  private readonly servers = new Map<string, Promise<{ server: http.Server; url: string }>>();
  private readonly byTrial = new Map<string, TrialSession>();
  private readonly agents = new UpstreamAgents();
  private readonly callLimits: CallLimits;
  private readonly budgets = new Map<string, JobBudget>();
  private readonly replicaPools = new ReplicaPools();
  private readonly maxWaitMs: number;

  constructor(private readonly options: ModelGatewayOptions = {}) {
    this.maxWaitMs = options.maxWaitMs ?? DEFAULT_MAX_WAIT_MS;
    this.callLimits = new CallLimits(options);
  }

  /**
   * A listener on `host` (started on first use): loopback for the worker, the bridge address for containers; on
   * `port` when one is given (the address a public URL is mapped to), else an ephemeral one.
   */
  urlFor(host: string, port = 0): Promise<string> {
    const key = `${host} ${port}`;
    let listening = this.servers.get(key);
    if (!listening) {
      listening = this.listen(host, port);
      this.servers.set(key, listening);
      listening.catch(() => this.servers.delete(key));
    }
    return listening.then((l) => l.url);
  }

  async openTrial(options: TrialSessionOptions): Promise<TrialSession> {
    await mkdir(options.agentDir, { recursive: true });
    const session = new TrialSession(this, options);
    // An earlier attempt's session left open (its worker crashed mid-step) ends here: one token per trial.
    await this.byTrial.get(session.pathId)?.close();
    this.byTrial.set(session.pathId, session);
    return session;
  }

  /** A budgeted job's view on this worker (one for all its trials here), or null when no ledger is known. */
  budgetOf(jobName: string): JobBudget | null {
    const ledgers = this.options.spendLedgers;
    if (!ledgers) {
      log.warn(`job ${jobName}: this gateway has no Temporal client, so the job's budget is not enforced here`);
      return null;
    }
    let budget = this.budgets.get(jobName);
    if (!budget) this.budgets.set(jobName, (budget = new JobBudget(ledgers, jobName)));
    return budget;
  }

  replicaPool(replicas: string[]): ReplicaPool {
    return this.replicaPools.of(replicas);
  }

  forget(session: TrialSession): void {
    if (this.byTrial.get(session.pathId) === session) this.byTrial.delete(session.pathId);
  }

  async close(): Promise<void> {
    await this.callLimits.close();
    const servers = await Promise.all([...this.servers.values()].map((p) => p.catch(() => null)));
    this.servers.clear();
    this.agents.destroy();
    const closing = servers.flatMap((s) =>
      s
        ? [
            new Promise<void>((resolve) => {
              s.server.close(() => resolve());
              s.server.closeAllConnections();
            }),
          ]
        : []
    );
    await Promise.all(closing);
  }

  private async listen(host: string, wantedPort: number): Promise<{ server: http.Server; url: string }> {
    const server = http.createServer({ noDelay: true }, (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) reply(res, 502, `gateway error: ${(err as Error).message}`);
        else res.destroy();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(wantedPort, host, () => resolve());
    });
    server.unref();
    const { port } = server.address() as AddressInfo;
    return { server, url: `http://${host.includes(':') ? `[${host}]` : host}:${port}` };
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://gateway');
    const match = /^\/t\/([^/]+)\/(openai\/v1|anthropic|gemini)(\/.*)?$/.exec(url.pathname);
    if (!match) return reply(res, 404, 'not a gateway path: expected /t/<trial>/<openai/v1|anthropic|gemini>/…');
    const session = this.byTrial.get(match[1]!);
    const vendor = match[2]!.split('/')[0] as Vendor;
    const credential = credentialOf(req, url);
    if (!session || credential?.value !== session.token) {
      // Nothing reaches upstream: an expired trial, a wrong path or a copied token from elsewhere.
      return reply(res, 401, 'invalid or expired trial token', vendor);
    }
    const rest = match[3] ?? '/';
    const accepted = await acceptedCall(req, res, vendor, rest);
    if (!accepted) return;
    const { kind, method, received } = accepted;
    const dialect = dialectOf(vendor, rest);
    const agentBody = parseJson(received);
    // job.yaml `tokens` and `sampling`: the call as the upstream gets it (./call-additions).
    const shaped: ShapedCall | null =
      kind === 'generate' && dialect && agentBody && session.options.shaping
        ? shapeCall(dialect, agentBody, session.options.shaping)
        : null;
    const body = shaped?.body ?? agentBody;
    const requestBody = shaped ? Buffer.from(JSON.stringify(shaped.body)) : received;
    const headers: http.OutgoingHttpHeaders = passedHeaders(req.headers);
    headers['content-length'] = String(requestBody.length);
    // Prefix-cache affinity for inference servers and their routers (SkyRL's convention): one id per trial.
    headers['x-session-id'] = session.options.trialId;

    const started = Date.now();
    const seq = session.nextSeq();
    const model = dialect?.model(body ?? {}, rest) ?? null;
    const stream = dialect ? dialect.stream(body ?? {}, rest, url.searchParams) : false;
    // Read while the call runs (no added latency): the job's policy version when the call started, or later.
    const policyVersion = kind === 'generate' ? session.options.policyVersion?.().catch(() => null) : undefined;
    const record = (ended: Pick<LlmCallRecord, 'status' | 'response' | 'usage' | 'error'> & Partial<LlmCallRecord>) =>
      session.record({
        seq,
        started_at: new Date(started).toISOString(),
        finished_at: new Date().toISOString(),
        latency_ms: Date.now() - started,
        dialect: dialect?.name ?? null,
        kind,
        method,
        path: rest,
        model,
        stream,
        request: body ?? (requestBody.length ? requestBody.toString('utf8') : null),
        ...ended,
      });
    if (kind === 'generate') {
      const refusal = await session.admit().catch((err: unknown) => new Error(String(err)));
      if (refusal) {
        // Never sent upstream: the agent sees why, in its vendor's error shape (402: its SDK does not retry it).
        const [status, message] =
          refusal instanceof Error
            ? [503, `rollout: the job's budget could not be checked (${refusal.message}); try again`]
            : [402, refusalMessage(refusal)];
        reply(res, status, message, vendor);
        // The ledger out of reach is not the agent's doing either: the trial ends unscored, and runs again.
        if (refusal instanceof Error)
          return record({ status, response: null, usage: null, error: { type: 'ApiOverloadedError', message } });
        return record({ status, response: null, usage: null, error: { type: null, message }, refused: refusal.kind });
      }
    }
    const rules = kind === 'generate' ? this.callLimits.rulesOf(session.options.rateLimits ?? [], vendor, model) : [];
    const rateLimitWaitMs = await this.callLimits.sharedLeases(rules, requestBody, res);
    const filter = dialect && shaped ? replyFilter(dialect, shaped.added) : null;
    const keyPlace = upstreamKeyPlace(vendor, credential.where);
    const send = (upstream: Upstream, lastTry: boolean) => {
      const { target, headers: keyed } = upstreamTarget(upstream, rest, url.searchParams, headers, keyPlace);
      return forward(
        { req, res, target, headers: keyed, body: requestBody, dialect, filter, replyUnreachable: lastTry },
        {
          agents: this.agents,
          limit: this.callLimits.limitOf(target, rules),
          owner: session.pathId,
          maxWaitMs: this.maxWaitMs,
        }
      );
    };
    const sticky = vendor === 'openai' ? session.replicas : null;
    const forwarded: Forwarded & { replica?: string } = await (sticky
      ? sticky.forward(res, (replica, lastTry) =>
          send({ ...session.options.upstreams.openai, baseUrl: replica }, lastTry)
        )
      : send(session.options.upstreams[vendor], true));
    const { status, response, attempts } = forwarded;
    const ok = dialect && status > 0 && status < 400 && response !== null;
    record({
      status,
      response,
      usage: ok ? dialect.usage(response) : null,
      error: forwarded.failure && { type: forwarded.failure.type, message: forwarded.failure.message.slice(0, 2000) },
      attempts,
      waited_ms: forwarded.waitedMs + rateLimitWaitMs,
      ...(rules.length > 0 ? { rate_limit_wait_ms: rateLimitWaitMs } : {}),
      ...trainingFields(shaped, ok ? (dialect.tokens?.(response) ?? null) : null, await policyVersion),
      ...(forwarded.replica ? { replica: forwarded.replica } : {}),
    });
  }
}
