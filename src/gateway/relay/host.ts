/**
 * The worker's half of the gateway relay (programs.ts has the other): it starts the relay in the environment through
 * `Environment.openProcess` and forwards each request it carries to the model gateway on this host, streaming the
 * response back as it arrives (SSE included). Frames are JSON lines, bodies base64:
 *
 *   environment → worker: {t:"ready",port,runtime} {t:"req",id,method,path,headers} {t:"body",id,data} {t:"end",id}
 *                         {t:"abort",id} (the agent hung up)
 *   worker → environment: {t:"head",id,status,headers} {t:"body",id,data} {t:"end",id} {t:"error",id,message}
 */
import http from 'node:http';

import { z } from 'zod';

import type { Environment, StreamedProcess } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import type { EnvironmentHandle } from '../../contracts/trial';
import { HOP_BY_HOP } from '../wire';
import { RELAY_NO_RUNTIME, relayCommand } from './programs';

const READY_TIMEOUT_MS = 60_000;
const STDERR_KEPT = 2000;
/**
 * The longest frame the worker reads: a request's head (the relays cap headers at 64 KiB) or one body chunk (at
 * most 64 KiB, base64) fits many times over; anything longer is not the relay speaking, so the relay is stopped.
 */
export const MAX_FRAME_CHARS = 2 ** 20 + 4 * 2 ** 16;
/** Relay stderr kept in the trial log: the first lines, each cut, then one line saying the rest was dropped. */
const STDERR_LOG_LINES = 100;
const STDERR_LINE_CHARS = 500;
/** Methods the gateway answers (anything else is refused there anyway; here it never reaches http.request). */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;
/** RFC 9110 token and field-value characters: what http.request accepts without throwing. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/;
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]{0,16384}$/;

const headerValue = z.union([z.string().regex(HEADER_VALUE), z.array(z.string().regex(HEADER_VALUE)).max(100)]);
const requestFrame = z.object({
  t: z.literal('req'),
  id: z.number().int().nonnegative(),
  method: z.enum(METHODS),
  path: z.string().max(16_384),
  headers: z
    .record(z.string().regex(HEADER_NAME), headerValue)
    .refine((headers) => Object.keys(headers).length <= 200, 'too many headers'),
});
const inbound = z.discriminatedUnion('t', [
  z.object({ t: z.literal('ready'), port: z.number().int(), runtime: z.string().max(200) }),
  requestFrame,
  z.object({ t: z.literal('body'), id: z.number().int(), data: z.string() }),
  z.object({ t: z.enum(['end', 'abort']), id: z.number().int() }),
]);
type Inbound = z.infer<typeof inbound>;
/** What a frame that failed validation still says: which request to answer. */
const anyRequest = z.object({ t: z.literal('req'), id: z.number().int().nonnegative() });

export interface GatewayRelay {
  /** Where processes in the environment reach the gateway: `http://127.0.0.1:<port>`. */
  readonly origin: string;
  /** What runs the relay in the environment (e.g. `node v22.23.3`), for the trial log. */
  readonly runtime: string;
  /** Requests carried so far. */
  readonly requests: number;
  /** Why the relay was stopped (it broke the protocol: an oversized frame), or null while it is sound. */
  failure(): string | null;
  /** Ends the relay and every request still open. */
  close(): Promise<void>;
}

export interface RelayOptions {
  /** The gateway's loopback origin on this host (ModelGateway.urlFor('127.0.0.1')). */
  gatewayOrigin: string;
  /** The trial's path on the gateway (`/t/<pathId>/`): the only requests forwarded. */
  trialPath: string;
  command?: string;
  /** Lines the relay writes on stderr (diagnostics), capped. */
  onLog?: (line: string) => void;
  /** The relay broke the protocol and was stopped: the step should fail (e.g. by ending the agent's processes). */
  onFailure?: (message: string) => void;
}

/** Starts the relay in the environment; resolves once it listens there. */
export async function openGatewayRelay(
  environment: Environment,
  handle: EnvironmentHandle,
  options: RelayOptions
): Promise<GatewayRelay> {
  if (!environment.openProcess) throw new Error(`${environment.type} environments cannot run the gateway relay`);
  const relay = new RelayConnection(options);
  const process = await environment.openProcess(handle, {
    command: options.command ?? relayCommand(),
    onStdout: (chunk) => relay.onStdout(chunk),
    onStderr: (chunk) => relay.onStderr(chunk),
  });
  relay.attach(process);
  return relay.ready(process);
}

/**
 * Where a request frame may go: the trial's own path on the gateway's origin, never elsewhere. The target starts
 * from the gateway's origin; the frame only supplies an origin-form path (no scheme, no authority) that still starts
 * with the trial's prefix once dot segments are resolved. Null: refuse it.
 */
export function relayTarget(gatewayOrigin: string, trialPath: string, requestPath: string): URL | null {
  if (!requestPath.startsWith(trialPath) || /[\\\s#]/.test(requestPath)) return null;
  const base = new URL(gatewayOrigin);
  const parsed = new URL(requestPath, base.origin);
  if (parsed.origin !== base.origin || !parsed.pathname.startsWith(trialPath)) return null;
  const target = new URL(base.origin);
  target.pathname = parsed.pathname;
  target.search = parsed.search;
  return target;
}

class RelayConnection implements GatewayRelay {
  origin = '';
  runtime = '';
  requests = 0;
  /** The current line's pieces so far: each chunk is scanned once, for its own newlines. */
  private partial: string[] = [];
  private partialChars = 0;
  private stderr = '';
  private stderrLines = 0;
  private stopped: string | null = null;
  private process: StreamedProcess | null = null;
  private writes: Promise<void> = Promise.resolve();
  private readonly open = new Map<number, http.ClientRequest>();
  private onReady: ((port: number) => void) | null = null;
  private readonly readyPort = new Promise<number>((resolve) => (this.onReady = resolve));

  constructor(private readonly options: RelayOptions) {}

  attach(process: StreamedProcess): void {
    this.process = process;
  }

  failure(): string | null {
    return this.stopped;
  }

  async ready(process: StreamedProcess): Promise<GatewayRelay> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>(
      (resolve) => (timer = setTimeout(() => resolve('timeout'), READY_TIMEOUT_MS))
    );
    const outcome = await Promise.race([this.readyPort, process.exited.then((code) => ({ code })), timeout]);
    clearTimeout(timer);
    if (typeof outcome === 'number') {
      this.origin = `http://127.0.0.1:${outcome}`;
      return this;
    }
    await process.kill();
    const stderr = this.stderr.trim().slice(-STDERR_KEPT);
    if (outcome !== 'timeout' && outcome.code === RELAY_NO_RUNTIME && /neither node nor python3/.test(stderr)) {
      // The environment lacks what the agent needs anyway: the task's (or agent's) problem, not the host's.
      throw new TaskEnvironmentError(
        'EnvironmentStartError',
        `${stderr} (or set ROLLOUT_GATEWAY_PUBLIC_URL: see docs/environments.md)`
      );
    }
    const why =
      outcome === 'timeout'
        ? `not listening after ${READY_TIMEOUT_MS / 1000} s`
        : (this.stopped ?? `exit ${outcome.code}`);
    throw new Error(`the gateway relay did not start in the environment (${why})${stderr ? `: ${stderr}` : ''}`);
  }

  onStdout(chunk: string): void {
    let start = 0;
    for (let i = chunk.indexOf('\n'); i >= 0 && !this.stopped; i = chunk.indexOf('\n', start)) {
      const piece = chunk.slice(start, i);
      start = i + 1;
      if (this.partialChars + piece.length > MAX_FRAME_CHARS) return this.stop();
      const line = this.partialChars > 0 ? this.partial.join('') + piece : piece;
      this.partial = [];
      this.partialChars = 0;
      this.onLine(line);
    }
    if (this.stopped || start === chunk.length) return;
    const rest = chunk.slice(start);
    if (this.partialChars + rest.length > MAX_FRAME_CHARS) return this.stop();
    this.partial.push(rest);
    this.partialChars += rest.length;
  }

  onStderr(chunk: string): void {
    this.stderr = (this.stderr + chunk).slice(-STDERR_KEPT);
    for (const line of chunk.split('\n')) {
      if (!line.trim() || this.stderrLines > STDERR_LOG_LINES) continue;
      this.stderrLines += 1;
      if (this.stderrLines > STDERR_LOG_LINES) this.options.onLog?.('(further relay stderr not logged)');
      else this.options.onLog?.(line.length > STDERR_LINE_CHARS ? `${line.slice(0, STDERR_LINE_CHARS)}…` : line);
    }
  }

  /** An oversized frame: not the relay speaking. Everything open ends, the relay is killed, the step told. */
  private stop(): void {
    this.stopped = `the gateway relay sent a frame over ${MAX_FRAME_CHARS} characters; it was stopped`;
    this.partial = [];
    this.partialChars = 0;
    for (const req of this.open.values()) req.destroy();
    this.open.clear();
    this.process?.kill().catch((err: unknown) => this.options.onLog?.(`stopping the relay failed: ${String(err)}`));
    this.options.onFailure?.(this.stopped);
  }

  /** One line from the relay: a frame is handled; a frame that breaks anything is answered, never thrown. */
  private onLine(line: string): void {
    const json = safeJson(line);
    const parsed = inbound.safeParse(json);
    if (!parsed.success) {
      // Anything else on stdout (a shell profile's chatter) is not a frame; a malformed request is answered.
      const request = anyRequest.safeParse(json);
      if (request.success) this.refuse(request.data.id, 400, 'malformed request (method, headers or path)');
      return;
    }
    try {
      this.handle(parsed.data);
    } catch (err) {
      const id = 'id' in parsed.data ? parsed.data.id : null;
      if (id !== null) this.fail(id, err as Error, true);
      else this.options.onLog?.(`relay frame refused: ${(err as Error).message}`);
    }
  }

  private handle(frame: Inbound): void {
    if (frame.t === 'ready') {
      this.runtime = frame.runtime;
      this.onReady?.(frame.port);
    } else if (frame.t === 'req') this.request(frame);
    else if (frame.t === 'body') this.open.get(frame.id)?.write(Buffer.from(frame.data, 'base64'));
    else if (frame.t === 'end') this.open.get(frame.id)?.end();
    else this.finish(frame.id)?.destroy();
  }

  private request(frame: Extract<Inbound, { t: 'req' }>): void {
    this.requests += 1;
    if (this.open.has(frame.id)) return this.refuse(frame.id, 400, 'request id already in use');
    const target = relayTarget(this.options.gatewayOrigin, this.options.trialPath, frame.path);
    if (!target) return this.refuse(frame.id, 400, "only the trial's own gateway path is relayed");
    const headers = Object.fromEntries(Object.entries(frame.headers).filter(([name]) => !HOP_BY_HOP.has(name)));
    const req = http.request(target, { method: frame.method, headers });
    this.open.set(frame.id, req);
    req.on('response', (res) => {
      const head = Object.fromEntries(Object.entries(res.headers).filter(([name]) => !HOP_BY_HOP.has(name)));
      this.send({ t: 'head', id: frame.id, status: res.statusCode ?? 502, headers: head });
      res.on('data', (chunk: Buffer) => this.send({ t: 'body', id: frame.id, data: chunk.toString('base64') }));
      res.on('end', () => {
        if (this.finish(frame.id)) this.send({ t: 'end', id: frame.id });
      });
      res.on('error', (err) => this.fail(frame.id, err));
    });
    req.on('error', (err) => this.fail(frame.id, err));
  }

  /** A complete answer the worker gives itself (nothing forwarded): status, a line of text, end. */
  private refuse(id: number, status: number, message: string): void {
    this.finish(id)?.destroy();
    this.send({ t: 'head', id, status, headers: { 'content-type': 'text/plain' } });
    this.send({ t: 'body', id, data: Buffer.from(`rollout relay: ${message}\n`).toString('base64') });
    this.send({ t: 'end', id });
  }

  private finish(id: number): http.ClientRequest | undefined {
    const req = this.open.get(id);
    this.open.delete(id);
    return req;
  }

  private fail(id: number, err: Error, always = false): void {
    const req = this.finish(id);
    req?.destroy();
    if (req || always) this.send({ t: 'error', id, message: err.message.slice(0, 500) });
  }

  /** Frames go out in order, each once the environment has taken the one before. */
  private send(frame: Record<string, unknown>): void {
    const process = this.process;
    if (!process || this.stopped) return;
    const line = `${JSON.stringify(frame)}\n`;
    this.writes = this.writes
      .then(() => process.write(line))
      .catch((err: unknown) => this.options.onLog?.(`relay write failed: ${(err as Error).message}`));
  }

  async close(): Promise<void> {
    for (const req of this.open.values()) req.destroy();
    this.open.clear();
    await this.process?.kill();
  }
}

function safeJson(line: string): unknown {
  try {
    return JSON.parse(line) as unknown;
  } catch {
    return undefined;
  }
}
