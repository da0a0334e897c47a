/**
 * The model gateway: an HTTP proxy each worker runs on its host, between a trial's agent and the model vendor.
 * A trial's calls arrive under `/t/<trialId>/<vendor>/…` with a per-trial token instead of a key; the gateway puts
 * the real key (read on the worker) on the upstream request, passes responses through as they arrive (SSE is never
 * buffered), and appends one record per call to the trial's `agent/llm-calls.jsonl` as each call ends.
 *
 * Tokens are valid only between openTrial and TrialSession.close (the execute step): a token copied out of a
 * container is useless after its trial, and a wrong token never reaches upstream.
 *
 * Rate limits and overload are absorbed here (forward.ts): a 429, 503 or 529 is retried within `max_wait` per call,
 * and each upstream gets an adaptive concurrency limit (adaptive-limit.ts), so a burst settles instead of cascading.
 */
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

import { log } from '../log';
import type { SpendLedgers } from '../budget/job-budget';
import { JobBudget, refusalMessage } from '../budget/job-budget';
import { chargeOf, conservativeUsage } from './charge';
import type { CallKind, Dialect, Usage, Vendor } from './dialect';
import { dialectOf } from './dialects';
import type { CallLimitsOptions } from '../limits/call-limits';
import { CallLimits } from '../limits/call-limits';
import type { ShapedCall } from './call-additions';
import { replyFilter, shapeCall, trainingFields } from './call-additions';
import type { Forwarded } from './forward';
import { forward } from './forward';
import type { LlmCallRecord } from './records';
import { DEFAULT_MAX_WAIT_MS } from './retry-wait';
import { UpstreamAgents } from './upstream-agents';
import type { ReplicaPool } from './replicas';
import { ReplicaPools } from './replicas';
import { acceptedCall, passedHeaders, upstreamKeyPlace } from './routes';
import type { SessionHost, TrialSessionOptions } from './trial-session';
import { TrialSession } from './trial-session';
import type { Upstream } from './upstreams';
import type { CredentialPlace } from './wire';
import { credentialOf, parseJson, reply, upstreamTarget } from './wire';

export type { ApiFailure, TrialSessionOptions } from './trial-session';
export { TrialSession } from './trial-session';

export interface ModelGatewayOptions extends CallLimitsOptions {
  /** How long one call may wait at the gateway in all (slots, retry waits) before its failure is passed on. */
  maxWaitMs?: number;
  /** Where budgeted jobs' spend is kept; without it, only the agents' per-trial `limits` are enforced. */
  spendLedgers?: SpendLedgers;
}

/** Where a call goes: its request, the agent's connection, and its vendor path. */
interface CallTarget {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  url: URL;
  vendor: Vendor;
  rest: string;
  keyPlace: { where: CredentialPlace };
}

export class ModelGateway implements SessionHost {
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
    // A generation is under way from here: the session's close waits for its record (or refuses it once closing).
    const end = accepted.kind === 'generate' ? session.begin(res) : () => undefined;
    if (!end) return reply(res, 401, 'invalid or expired trial token', vendor);
    try {
      await this.call(
        session,
        { req, res, url, vendor, rest, keyPlace: upstreamKeyPlace(vendor, credential.where) },
        accepted
      );
    } finally {
      end();
    }
  }

  /** One accepted call: admitted against limits and budget (generations), sent upstream, recorded. */
  private async call(
    session: TrialSession,
    { req, res, url, vendor, rest, keyPlace }: CallTarget,
    { kind, method, received }: { kind: CallKind; method: string; received: Buffer }
  ): Promise<void> {
    const dialect = dialectOf(vendor, rest);
    const agentBody = parseJson(received);
    // Usage asked for on every stream; job.yaml `tokens` and `sampling`: the call as the upstream gets it.
    const shaped: ShapedCall | null =
      kind === 'generate' && dialect && agentBody ? shapeCall(dialect, agentBody, session.options.shaping) : null;
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
    // What the call may cost: held against limits and budget while it runs, charged if its usage does not come back.
    const estimate = conservativeUsage(requestBody.length, body ?? {});
    let release = () => {};
    if (kind === 'generate') {
      const admitted = await admit(session, res, vendor, model, estimate, record);
      if (!admitted) return;
      release = admitted;
    }
    try {
      const forwarded = await this.send(session, { req, res, url, vendor, rest, keyPlace }, headers, requestBody, {
        dialect,
        model,
        shaped,
        kind,
      });
      const { status, response, attempts } = forwarded;
      const ok = dialect && status > 0 && status < 400 && response !== null;
      const usage = ok ? dialect.usage(response) : null;
      // Billed by the vendor: an answer, or a call cut once it went upstream (the stream broke, the agent left).
      const billed = kind === 'generate' && (forwarded.cut ? status < 400 : status >= 200 && status < 400);
      const charged = billed ? chargeOf(estimate, usage, forwarded.cut !== undefined) : undefined;
      record({
        status,
        response,
        usage,
        ...(charged ? { charged } : {}),
        error: forwarded.failure && { type: forwarded.failure.type, message: forwarded.failure.message.slice(0, 2000) },
        attempts,
        waited_ms: forwarded.waitedMs + forwarded.rateLimitWaitMs,
        ...(forwarded.rules > 0 ? { rate_limit_wait_ms: forwarded.rateLimitWaitMs } : {}),
        ...trainingFields(shaped, ok ? (dialect.tokens?.(response) ?? null) : null, await policyVersion),
        ...(forwarded.replica ? { replica: forwarded.replica } : {}),
      });
    } finally {
      release();
    }
  }

  /** The call upstream: after its shared rate-limit leases, to its trial's replica or its vendor's upstream. */
  private async send(
    session: TrialSession,
    { req, res, url, vendor, rest, keyPlace }: CallTarget,
    headers: http.OutgoingHttpHeaders,
    requestBody: Buffer,
    call: { dialect: Dialect | null; model: string | null; shaped: ShapedCall | null; kind: CallKind }
  ): Promise<Forwarded & { replica?: string; rateLimitWaitMs: number; rules: number }> {
    const { dialect, model, shaped, kind } = call;
    const rules = kind === 'generate' ? this.callLimits.rulesOf(session.options.rateLimits ?? [], vendor, model) : [];
    const rateLimitWaitMs = await this.callLimits.sharedLeases(rules, requestBody, res);
    const filter = dialect && shaped ? replyFilter(dialect, shaped.added) : null;
    const sendTo = (upstream: Upstream, lastTry: boolean) => {
      const { target, headers: keyed } = upstreamTarget(upstream, rest, url.searchParams, headers, keyPlace);
      return forward(
        { req, res, target, headers: keyed, body: requestBody, dialect, filter, replyUnreachable: lastTry },
        {
          agents: this.agents,
          limit: this.callLimits.limitOf(target, rules, session.options.jobName),
          owner: session.pathId,
          maxWaitMs: this.maxWaitMs,
        }
      );
    };
    const sticky = vendor === 'openai' ? session.replicas : null;
    const forwarded: Forwarded & { replica?: string } = await (sticky
      ? sticky.forward(res, (replica, lastTry) =>
          sendTo({ ...session.options.upstreams.openai, baseUrl: replica }, lastTry)
        )
      : sendTo(session.options.upstreams[vendor], true));
    return { ...forwarded, rateLimitWaitMs, rules: rules.length };
  }
}

/**
 * Admits a generation against the trial's limits and the job's budget. Refused (or the agent gone while it waited):
 * the agent gets its answer, the call is recorded, and null comes back; else the hold's release.
 */
async function admit(
  session: TrialSession,
  res: http.ServerResponse,
  vendor: Vendor,
  model: string | null,
  estimate: Usage,
  record: (ended: Pick<LlmCallRecord, 'status' | 'response' | 'usage' | 'error'> & Partial<LlmCallRecord>) => void
): Promise<(() => void) | null> {
  const gone = new AbortController();
  res.once('close', () => gone.abort());
  const admission = await session.admit(model, estimate, gone.signal).catch((err: unknown) => new Error(String(err)));
  if (admission instanceof Error || 'refusal' in admission) {
    const refusal = admission instanceof Error ? admission : admission.refusal;
    // Never sent upstream: the agent sees why, in its vendor's error shape (402: its SDK does not retry it).
    const [status, message] =
      refusal instanceof Error
        ? [503, `rollout: the job's budget could not be checked (${refusal.message}); try again`]
        : [402, refusalMessage(refusal)];
    reply(res, status, message, vendor);
    // The ledger out of reach is not the agent's doing either: the trial ends unscored, and runs again.
    if (refusal instanceof Error) {
      record({ status, response: null, usage: null, error: { type: 'ApiOverloadedError', message } });
    } else {
      record({ status, response: null, usage: null, error: { type: null, message }, refused: refusal.kind });
    }
    return null;
  }
  if ('gone' in admission) {
    const message = 'the agent closed the connection while the call waited for its limits or the budget';
    record({ status: 0, response: null, usage: null, error: { type: null, message } });
    return null;
  }
  return admission.release;
}
