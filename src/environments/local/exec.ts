/**
 * The local environment's commands, run by a small helper process of the worker instead of the worker itself: forking
 * a process copies its page tables, so each command forked from a worker of a few hundred MB cost ~20 ms of CPU on
 * this kind of host (a flood of short trials runs four per trial), against a few ms from the ~40 MB helper. Each
 * command is `bash -c` in its own process group, its output tails kept, its group killed at the timeout or on abort.
 */
import type { ChildProcess } from 'node:child_process';
import { fork, spawn } from 'node:child_process';

export interface CommandRequest {
  command: string;
  cwd: string;
  env: Record<string, string>;
  timeoutMs?: number;
}

export interface CommandResult {
  /** The exit code (null when killed by a signal), or why the command was stopped. */
  outcome: number | null | 'timedOut' | 'aborted';
  stdout: string;
  stderr: string;
}

/** Per stream: an agent printing without end must not exhaust the worker's memory. */
const OUTPUT_LIMIT = 1024 * 1024;
/**
 * How long a command waits for its output pipes to close once bash has exited: a process left in the background
 * holds them open. Docker waits as long before it ends an exec's stream.
 */
const PIPE_GRACE_MS = 2000;

type Request = { id: number; run: CommandRequest } | { id: number; abort: true };
type Reply = { id: number; result: CommandResult } | { id: number; error: string };

interface Helper {
  child: ChildProcess;
  pending: Map<number, { resolve: (result: CommandResult) => void; reject: (err: Error) => void }>;
}

let helper: Helper | null = null;
let nextId = 0;

/** Runs the command in the helper process (started on first use, again if it died). */
export function runCommand(request: CommandRequest, signal?: AbortSignal): Promise<CommandResult> {
  const { child, pending } = helperProcess();
  const id = ++nextId;
  return new Promise<CommandResult>((resolve, reject) => {
    const onAbort = () => child.send({ id, abort: true } satisfies Request);
    signal?.addEventListener('abort', onAbort, { once: true });
    const settle = () => {
      signal?.removeEventListener('abort', onAbort);
      pending.delete(id);
      // Only a command under way keeps the worker's event loop alive for the helper.
      if (pending.size === 0) channelOf(child)?.unref();
    };
    pending.set(id, {
      resolve: (result) => (settle(), resolve(result)),
      reject: (err) => (settle(), reject(err)),
    });
    channelOf(child)?.ref();
    child.send({ id, run: request } satisfies Request);
  });
}

function helperProcess(): Helper {
  if (helper) return helper;
  // No inherited flags (a profiler's, an inspector's): the helper is only this module.
  const child = fork(__filename, [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const current: Helper = { child, pending: new Map() };
  child.on('message', (reply: Reply) => {
    const waiting = current.pending.get(reply.id);
    if (!waiting) return;
    if ('error' in reply) waiting.reject(new Error(reply.error));
    else waiting.resolve(reply.result);
  });
  const gone = (reason: string) => {
    if (helper === current) helper = null;
    for (const waiting of [...current.pending.values()]) {
      waiting.reject(new Error(`the local environment's command helper ${reason}`));
    }
  };
  child.once('error', (err) => gone(`failed: ${err.message}`));
  child.once('exit', (code, signal) => gone(`exited (${signal ?? code})`));
  child.unref();
  channelOf(child)?.unref();
  helper = current;
  return current;
}

function channelOf(child: ChildProcess): { ref(): void; unref(): void } | undefined {
  return (child as ChildProcess & { channel?: { ref(): void; unref(): void } }).channel;
}

/** The helper: runs what the worker sends; when the worker goes, every command still running goes too. */
function serve(): void {
  const running = new Map<number, AbortController>();
  process.on('message', (request: Request) => {
    if ('abort' in request) return void running.get(request.id)?.abort();
    const controller = new AbortController();
    running.set(request.id, controller);
    run(request.run, controller.signal)
      .then(
        (result): Reply => ({ id: request.id, result }),
        (err: unknown): Reply => ({ id: request.id, error: err instanceof Error ? err.message : String(err) })
      )
      .then((reply) => process.send?.(reply))
      .finally(() => running.delete(request.id))
      .catch(() => undefined); // the worker is gone: nobody to tell
  });
  process.on('disconnect', () => {
    for (const controller of running.values()) controller.abort();
    process.exit(0);
  });
}

function run(request: CommandRequest, signal: AbortSignal): Promise<CommandResult> {
  const child = spawn('bash', ['-c', request.command], {
    cwd: request.cwd,
    env: request.env,
    detached: true, // its own process group: a timeout kills everything it started
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stdout = captureTail(child.stdout);
  const stderr = captureTail(child.stderr);
  return childOutcome(child, request.timeoutMs, signal).then((outcome) => ({
    outcome,
    stdout: stdout(),
    stderr: stderr(),
  }));
}

/**
 * How a child finished: its exit code (null when killed by a signal), or its time limit passed or the signal aborted
 * (its whole process group is killed first).
 */
function childOutcome(
  child: ChildProcess,
  timeoutMs: number | undefined,
  signal: AbortSignal
): Promise<CommandResult['outcome']> {
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    let graceTimer: NodeJS.Timeout | undefined;
    let stopped: 'timedOut' | 'aborted' | undefined;
    const stop = (reason: 'timedOut' | 'aborted') => {
      stopped = reason;
      if (child.pid !== undefined) killProcess(-child.pid);
    };
    const onAbort = () => stop('aborted');
    if (timeoutMs) timer = setTimeout(() => stop('timedOut'), timeoutMs);
    signal.addEventListener('abort', onAbort, { once: true });
    child.once('error', (err) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      reject(err);
    });
    // Output pipes held open by a background process must not keep the command waiting for ever.
    child.once('exit', () => {
      graceTimer = setTimeout(() => [child.stdout, child.stderr].forEach((pipe) => pipe?.destroy()), PIPE_GRACE_MS);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      clearTimeout(graceTimer);
      signal.removeEventListener('abort', onAbort);
      resolve(stopped ?? code);
    });
  });
}

/** SIGKILL to a process (or a group, for a negative id) that may already be gone. */
export function killProcess(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

/** Collects the last OUTPUT_LIMIT characters of a pipe; call the result for the text. */
function captureTail(pipe: NodeJS.ReadableStream): () => string {
  let text = '';
  pipe.setEncoding('utf8');
  pipe.on('data', (chunk: string) => {
    text += chunk;
    if (text.length > OUTPUT_LIMIT) text = text.slice(-OUTPUT_LIMIT);
  });
  return () => text;
}

if (require.main === module) serve();
