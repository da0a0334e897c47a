/**
 * The model gateway: an HTTP proxy each worker runs on its host, between a trial's agent and the model vendor.
 * A trial's calls arrive under `/t/<trialId>/<vendor>/…` with a per-trial token instead of a key; the gateway puts
 * the real key (read on the worker) on the upstream request, passes responses through as they arrive (SSE is never
 * buffered), and appends one record per call to the trial's `agent/llm-calls.jsonl` as each call ends.
 *
 * Tokens are valid only between openTrial and TrialSession.close (the execute step): a token copied out of a
 * container is useless after its trial, and a wrong token never reaches upstream.
 */
import { createHash, randomBytes } from 'node:crypto';
import { appendFile, mkdir } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';

import type { Dialect, Usage, Vendor } from './dialect';
import { dialectOf } from './dialects';
import type { ApiErrorType } from './errors';
import { classifyFailure } from './errors';
import type { LlmCallRecord } from './records';
import { LLM_CALLS_FILE } from './records';
import { SseParser } from './sse';
import type { GatewayAccess, Upstreams } from './upstreams';

const MAX_RECORDED_BYTES = 32 * 2 ** 20;
const VENDOR_ROOTS: Record<Vendor, string> = { openai: '/openai/v1', anthropic: '/anthropic', gemini: '/gemini' };
const HOP_BY_HOP = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
]);

export interface ApiFailure {
  type: ApiErrorType;
  status: number;
  message: string;
}

export interface TrialSessionOptions {
  trialId: string;
  /** The trial's `agent/` folder on this host: llm-calls.jsonl goes there. */
  agentDir: string;
  upstreams: Upstreams;
}

export class TrialSession {
  readonly token = `rollout-${randomBytes(24).toString('hex')}`;
  private seq = 0;
  private writes: Promise<void> = Promise.resolve();
  private lastFailure: ApiFailure | null = null;
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
    const hash = createHash('sha256').update(options.trialId).digest('hex').slice(0, 8);
    this.pathId = `${options.trialId.replace(/[^A-Za-z0-9._-]+/g, '-').slice(-60)}-${hash}`;
  }

  /** Base URLs and token for a process that reaches this host at `host` (e.g. a container via the bridge IP). */
  async access(host = '127.0.0.1'): Promise<GatewayAccess> {
    const root = `${await this.gateway.urlFor(host)}/t/${this.pathId}`;
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
    if (call.kind === 'generate') {
      const type = call.error?.type;
      this.lastFailure = type ? { type, status: call.status, message: call.error!.message } : null;
      this.totals.calls += 1;
      if (call.usage) {
        this.totals.input_tokens += call.usage.input_tokens;
        this.totals.output_tokens += call.usage.output_tokens;
        this.totals.cached_tokens += call.usage.cached_tokens;
      }
    }
    const line = `${JSON.stringify(call)}\n`;
    this.writes = this.writes.then(() => appendFile(this.callsFile, line));
  }

  /** Ends the token's validity; resolves once every record is on disk. */
  async close(): Promise<void> {
    this.gateway.forget(this);
    await this.writes;
  }
}

export class ModelGateway {
  private readonly servers = new Map<string, Promise<{ server: http.Server; url: string }>>();
  private readonly byTrial = new Map<string, TrialSession>();
  private readonly httpAgent = new http.Agent({ keepAlive: true });
  private readonly httpsAgent = new https.Agent({ keepAlive: true });

  /** A listener on `host` (started on first use): loopback for the worker, the bridge address for containers. */
  urlFor(host: string): Promise<string> {
    let listening = this.servers.get(host);
    if (!listening) {
      listening = this.listen(host);
      this.servers.set(host, listening);
      listening.catch(() => this.servers.delete(host));
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

  forget(session: TrialSession): void {
    if (this.byTrial.get(session.pathId) === session) this.byTrial.delete(session.pathId);
  }

  async close(): Promise<void> {
    const servers = await Promise.all([...this.servers.values()].map((p) => p.catch(() => null)));
    this.servers.clear();
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
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

  private async listen(host: string): Promise<{ server: http.Server; url: string }> {
    const server = http.createServer({ noDelay: true }, (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent) reply(res, 502, `gateway error: ${(err as Error).message}`);
        else res.destroy();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => resolve());
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
    const dialect = dialectOf(vendor, rest);
    const requestBody = await readBody(req);
    const body = parseJson(requestBody);
    const upstream = session.options.upstreams[vendor];
    const target = new URL(upstream.baseUrl + rest);
    for (const [key, value] of url.searchParams) if (key !== 'key') target.searchParams.append(key, value);
    const headers: http.OutgoingHttpHeaders = {};
    for (const [key, value] of Object.entries(req.headers)) {
      if (!HOP_BY_HOP.has(key) && key !== 'authorization' && key !== 'x-api-key' && key !== 'x-goog-api-key')
        headers[key] = value;
    }
    if (upstream.apiKey !== null) {
      // The real key goes where the client put the token, so each SDK's own auth scheme is kept.
      if (credential.where === 'query') target.searchParams.set('key', upstream.apiKey);
      else if (credential.where === 'authorization') headers.authorization = `Bearer ${upstream.apiKey}`;
      else headers[credential.where] = upstream.apiKey;
    }
    headers['content-length'] = String(requestBody.length);

    const started = Date.now();
    const call: LlmCallRecord = {
      seq: session.nextSeq(),
      started_at: new Date(started).toISOString(),
      finished_at: '',
      latency_ms: 0,
      dialect: dialect?.name ?? null,
      kind: dialect?.match(rest) ?? 'other',
      method: req.method ?? 'GET',
      path: rest,
      model: dialect?.model(body ?? {}, rest) ?? null,
      stream: dialect ? dialect.stream(body ?? {}, rest, url.searchParams) : false,
      status: 0,
      request: body ?? (requestBody.length ? requestBody.toString('utf8') : null),
      response: null,
      usage: null,
      error: null,
    };
    const finish = (status: number, response: unknown, failure: string | null) => {
      call.finished_at = new Date().toISOString();
      call.latency_ms = Date.now() - started;
      call.status = status;
      call.response = response;
      call.usage = dialect && status < 400 && response !== null ? dialect.usage(response) : null;
      if (failure !== null || status >= 400) {
        const text = failure ?? (typeof response === 'string' ? response : JSON.stringify(response));
        call.error = { type: classifyFailure(failure !== null ? 0 : status, text), message: text.slice(0, 2000) };
      }
      session.record(call);
    };
    await this.forward(req, res, target, headers, requestBody, dialect, finish);
  }

  private forward(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    target: URL,
    headers: http.OutgoingHttpHeaders,
    body: Buffer,
    dialect: Dialect | null,
    finish: (status: number, response: unknown, failure: string | null) => void
  ): Promise<void> {
    return new Promise<void>((resolve) => {
      const secure = target.protocol === 'https:';
      const upstreamReq = (secure ? https : http).request(target, {
        method: req.method,
        headers,
        agent: secure ? this.httpsAgent : this.httpAgent,
      });
      let settled = false;
      const settle = (status: number, response: unknown, failure: string | null) => {
        if (settled) return;
        settled = true;
        finish(status, response, failure);
        resolve();
      };
      // The agent went away: stop the upstream call too.
      res.on('close', () => {
        if (!res.writableFinished) {
          upstreamReq.destroy();
          settle(0, null, 'client closed the connection before the response ended');
        }
      });
      upstreamReq.on('error', (err) => {
        if (!res.headersSent) reply(res, 502, `upstream unreachable: ${err.message}`);
        else res.destroy();
        settle(0, null, `upstream: ${err.message}`);
      });
      upstreamReq.on('response', (upstreamRes) => {
        const status = upstreamRes.statusCode ?? 502;
        const responseHeaders = { ...upstreamRes.headers };
        for (const key of HOP_BY_HOP) delete responseHeaders[key];
        res.writeHead(status, responseHeaders);
        res.flushHeaders();
        const sse = /text\/event-stream/.test(upstreamRes.headers['content-type'] ?? '');
        const parser = sse ? new SseParser() : null;
        const chunks: Buffer[] = [];
        let size = 0;
        upstreamRes.on('data', (chunk: Buffer) => {
          res.write(chunk);
          if (parser) parser.push(chunk);
          else if ((size += chunk.length) <= MAX_RECORDED_BYTES) chunks.push(chunk);
        });
        upstreamRes.on('end', () => {
          res.end();
          settle(status, responseOf(dialect, parser, Buffer.concat(chunks), size), null);
        });
        upstreamRes.on('aborted', () => {
          // The upstream stream broke mid-way: the agent must see a broken stream too, not a clean end.
          res.destroy();
          const partial = parser && dialect ? dialect.assemble(parser.end()) : null;
          settle(status, partial, 'upstream stream cut before its end');
        });
      });
      upstreamReq.end(body);
    });
  }
}

function credentialOf(
  req: http.IncomingMessage,
  url: URL
): { value: string; where: 'authorization' | 'x-api-key' | 'x-goog-api-key' | 'query' } | null {
  const auth = req.headers.authorization;
  if (auth) return { value: auth.replace(/^Bearer\s+/i, ''), where: 'authorization' };
  for (const where of ['x-api-key', 'x-goog-api-key'] as const) {
    const value = req.headers[where];
    if (typeof value === 'string') return { value, where };
  }
  const key = url.searchParams.get('key');
  return key ? { value: key, where: 'query' } : null;
}

/** An error in the shape the vendor's SDK expects, so the agent reports it sensibly. */
function reply(res: http.ServerResponse, status: number, message: string, vendor?: Vendor): void {
  const body =
    vendor === 'anthropic'
      ? { type: 'error', error: { type: status === 401 ? 'authentication_error' : 'api_error', message } }
      : { error: { message, code: status } };
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

function parseJson(body: Buffer): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'));
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

/** The recorded response: rebuilt from SSE events or from a JSON array of chunks (Gemini without alt=sse). */
function responseOf(dialect: Dialect | null, parser: SseParser | null, body: Buffer, size: number): unknown {
  if (parser && dialect) return dialect.assemble(parser.end());
  if (size > MAX_RECORDED_BYTES) return `[response of ${size} bytes not recorded]`;
  const text = body.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return text;
  }
  if (dialect && Array.isArray(value))
    return dialect.assemble(value.map((v) => ({ event: null, data: JSON.stringify(v) })));
  return value;
}
