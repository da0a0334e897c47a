/**
 * One agent call forwarded upstream, retried at the gateway when the upstream is rate-limited or overloaded (429,
 * 503, 529: after its `retry-after`, or a jittered backoff) or could not be reached, within `max_wait` per call: the
 * agent sees a slow answer, not an error, whatever its own retry logic. Nothing reaches the agent before the answer
 * that is passed on, so streams are retried only before their first byte; once passed on, a response streams through
 * unbuffered. Each attempt and every wait is returned for the call's record.
 */
import type http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

import type { AdaptiveLimit, Permit } from '../limits/adaptive-limit';
import type { Dialect } from './dialect';
import type { ApiErrorType } from '../contracts/trial-errors';
import { classifyBroken, classifyStatus } from './errors';
import type { CallAttempt } from './records';
import { CONNECT_ATTEMPTS, RETRIED_STATUSES, connectRetryWaitMs, retryAfterMs, statusRetryWaitMs } from './retry-wait';
import type { ReplyFilter } from './call-additions';
import { SseParser, SseRewriter } from './sse';
import type { UpstreamAgents } from './upstream-agents';
import { requestFor } from './upstream-agents';
import { HOP_BY_HOP, MAX_RECORDED_BYTES, reply, responseOf } from './wire';

/** The most of a retried reply's body kept as its attempt's error. */
const ATTEMPT_ERROR_CHARS = 2000;

export interface ForwardRequest {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  target: URL;
  headers: http.OutgoingHttpHeaders;
  body: Buffer;
  dialect: Dialect | null;
  /** Takes out of a successful reply what the gateway asked for and the agent did not (./call-additions). */
  filter?: ReplyFilter | null;
  /** An upstream that cannot be reached gets the agent a 502 (default); false leaves the reply to the caller. */
  replyUnreachable?: boolean;
}

export interface ForwardDeps {
  agents: UpstreamAgents;
  /** The upstream's concurrency: a slot is held while an attempt is in flight, never while waiting to retry. */
  limit: AdaptiveLimit;
  /** Whose call it is (the trial): waiting calls get slots fairly across owners. */
  owner: string;
  maxWaitMs: number;
}

export interface Forwarded {
  /** The status passed on to the agent; 0 when none was (unreachable, or the agent left first). */
  status: number;
  response: unknown;
  failure: { type: ApiErrorType | null; message: string } | null;
  attempts: CallAttempt[];
  /** Time spent waiting at the gateway: for a slot toward the upstream and between attempts. */
  waitedMs: number;
  /** The call went upstream and ended early (the stream broke, the agent left): it may be billed all the same. */
  cut?: 'stream-cut' | 'client-closed';
}

type AttemptEnd =
  | { kind: 'answered'; status: number; response: unknown; cut: 'stream-cut' | 'client-closed' | null }
  | { kind: 'retry'; status: number; message: string; waitMs: number }
  | { kind: 'unreachable'; message: string };

export async function forward(request: ForwardRequest, deps: ForwardDeps): Promise<Forwarded> {
  const started = Date.now();
  const attempts: CallAttempt[] = [];
  let waitedMs = 0;
  const gone = new AbortController();
  request.res.on('close', () => {
    if (!request.res.writableFinished) gone.abort();
  });
  // Gone before the call got here (while it waited for its admission or a lease): nothing goes upstream.
  if (request.res.destroyed) gone.abort();
  // The agent hung up while the call waited here: the reason it waited is the call's failure.
  const abandoned = (): Forwarded => {
    const last = attempts.at(-1);
    const type = !last ? null : last.status === 0 ? classifyBroken('unreachable') : classifyStatus(last.status, '');
    const message = `the agent closed the connection while the gateway waited${last ? ` (last: ${last.error})` : ''}`;
    return { status: 0, response: null, failure: { type, message }, attempts, waitedMs };
  };
  for (let statusRetries = 0, connectRetries = 0; ;) {
    if (gone.signal.aborted) return abandoned();
    const queued = Date.now();
    let permit: Permit;
    try {
      permit = await deps.limit.acquire(gone.signal, deps.owner);
    } catch {
      waitedMs += Date.now() - queued;
      return abandoned();
    }
    waitedMs += Date.now() - queued;
    const begun = Date.now();
    const retryWait = (headers: http.IncomingHttpHeaders): number | null => {
      const wait = statusRetryWaitMs(statusRetries, retryAfterMs(headers));
      return Date.now() - started + wait <= deps.maxWaitMs ? wait : null;
    };
    const end = await attempt(request, deps.agents.for(request.target), gone.signal, retryWait);
    const status = end.kind === 'unreachable' ? 0 : end.status;
    deps.limit.release(permit, RETRIED_STATUSES.has(status));
    const entry: CallAttempt = {
      started_at: new Date(begun).toISOString(),
      latency_ms: Date.now() - begun,
      status,
      error: end.kind === 'answered' ? null : end.message,
      wait_ms: 0,
    };
    attempts.push(entry);
    if (end.kind === 'answered') return { ...answered(end), attempts, waitedMs };
    if (end.kind === 'retry') {
      entry.wait_ms = end.waitMs;
      statusRetries += 1;
    } else {
      const wait = connectRetryWaitMs(connectRetries);
      connectRetries += 1;
      if (connectRetries >= CONNECT_ATTEMPTS || Date.now() - started + wait > deps.maxWaitMs) {
        if (request.replyUnreachable !== false) reply(request.res, 502, `upstream unreachable: ${end.message}`);
        const failure = { type: classifyBroken('unreachable'), message: `upstream: ${end.message}` };
        return { status: 0, response: null, failure, attempts, waitedMs };
      }
      entry.wait_ms = wait;
    }
    const sleeping = Date.now();
    try {
      await sleep(entry.wait_ms, undefined, { signal: gone.signal });
    } catch {
      return abandoned();
    } finally {
      waitedMs += Date.now() - sleeping;
    }
  }
}

function answered(end: Extract<AttemptEnd, { kind: 'answered' }>): Omit<Forwarded, 'attempts' | 'waitedMs'> {
  const { status, response, cut } = end;
  if (cut === 'client-closed') {
    return {
      status,
      response,
      cut,
      failure: { type: null, message: 'the agent closed the connection before the end' },
    };
  }
  if (cut === 'stream-cut') {
    const failure = { type: classifyBroken(cut), message: 'upstream stream cut before its end' };
    return { status, response, cut, failure };
  }
  if (status < 400) return { status, response, failure: null };
  const text = typeof response === 'string' ? response : JSON.stringify(response);
  return { status, response, failure: { type: classifyStatus(status, text), message: text.slice(0, 2000) } };
}

/** One request upstream. A reply to retry (within max_wait) is read and dropped; any other is passed on. */
function attempt(
  { req, res, target, headers, body, dialect, filter }: ForwardRequest,
  agent: http.Agent,
  gone: AbortSignal,
  retryWait: (headers: http.IncomingHttpHeaders) => number | null
): Promise<AttemptEnd> {
  return new Promise<AttemptEnd>((resolve) => {
    const upstreamReq = requestFor(target)(target, { method: req.method, headers, agent });
    let status = 0;
    let parser: SseParser | null = null;
    let settled = false;
    const partial = () => (parser && dialect ? dialect.assemble(parser.end()) : null);
    const settle = (end: AttemptEnd) => {
      if (settled) return;
      settled = true;
      gone.removeEventListener('abort', onGone);
      resolve(end);
    };
    // The agent went away: stop the upstream call too.
    const onGone = () => {
      upstreamReq.destroy();
      settle({ kind: 'answered', status, response: partial(), cut: 'client-closed' });
    };
    gone.addEventListener('abort', onGone, { once: true });
    upstreamReq.on('error', (err) => {
      if (!res.headersSent) return settle({ kind: 'unreachable', message: err.message });
      res.destroy();
      settle({ kind: 'answered', status, response: partial(), cut: 'stream-cut' });
    });
    upstreamReq.on('response', (upstreamRes) => {
      status = upstreamRes.statusCode ?? 502;
      const wait = RETRIED_STATUSES.has(status) ? retryWait(upstreamRes.headers) : null;
      if (wait !== null) return readForRetry(upstreamRes, wait, settle);
      const responseHeaders = { ...upstreamRes.headers };
      for (const key of HOP_BY_HOP) delete responseHeaders[key];
      const sse = /text\/event-stream/.test(upstreamRes.headers['content-type'] ?? '');
      const strip = filter && status < 400 && !upstreamRes.headers['content-encoding'] ? filter : null;
      // A stream is rewritten event by event as it passes; a JSON reply to rewrite is held to its end (its length
      // changes). Anything else passes through untouched.
      const rewriter = strip && sse ? new SseRewriter(strip) : null;
      const held: Buffer[] | null = strip && !sse ? [] : null;
      if (strip) delete responseHeaders['content-length'];
      if (!held) {
        res.writeHead(status, responseHeaders);
        res.flushHeaders();
      }
      parser = sse ? new SseParser() : null;
      const chunks: Buffer[] = [];
      let size = 0;
      upstreamRes.on('data', (chunk: Buffer) => {
        if (held) held.push(chunk);
        else res.write(rewriter ? rewriter.push(chunk) : chunk);
        if (parser) parser.push(chunk);
        else if ((size += chunk.length) <= MAX_RECORDED_BYTES) chunks.push(chunk);
      });
      upstreamRes.on('end', () => {
        if (held) {
          const reply = strippedJson(Buffer.concat(held), strip!);
          res.writeHead(status, { ...responseHeaders, 'content-length': reply.length });
          res.end(reply);
        } else res.end(rewriter?.end());
        settle({
          kind: 'answered',
          status,
          response: responseOf(dialect, parser, Buffer.concat(chunks), size),
          cut: null,
        });
      });
      upstreamRes.on('aborted', () => {
        // The upstream stream broke mid-way: the agent must see a broken stream too, not a clean end.
        res.destroy();
        settle({ kind: 'answered', status, response: partial(), cut: 'stream-cut' });
      });
    });
    upstreamReq.end(body);
  });
}

/** A reply to retry: its start is kept for the message, the rest read and dropped; then the attempt ends. */
function readForRetry(upstreamRes: http.IncomingMessage, waitMs: number, settle: (end: AttemptEnd) => void): void {
  const status = upstreamRes.statusCode ?? 502;
  const chunks: Buffer[] = [];
  let size = 0;
  upstreamRes.on('data', (chunk: Buffer) => {
    if (size < ATTEMPT_ERROR_CHARS) chunks.push(chunk);
    size += chunk.length;
  });
  const retry = () => {
    const message = `HTTP ${status}: ${Buffer.concat(chunks).toString('utf8').slice(0, ATTEMPT_ERROR_CHARS)}`;
    settle({ kind: 'retry', status, message, waitMs });
  };
  upstreamRes.on('end', retry);
  upstreamRes.on('aborted', retry);
}

/** A JSON reply without what the gateway added; a body that is not a JSON object passes as it came. */
function strippedJson(body: Buffer, strip: ReplyFilter): Buffer {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return body;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return body;
  const stripped = strip(value as Record<string, unknown>);
  return stripped ? Buffer.from(JSON.stringify(stripped)) : body;
}
