/**
 * Commands in a Modal sandbox through the SDK's exec (Modal's task command router): output streamed back, timeouts
 * and aborts ending in the kill of every process the command left (as for Docker), Rollout's own scripts fed and read
 * as streams (the carrier of ./files.ts), and processes kept open both ways for the gateway relay. Modal's exec has no user of its
 * own: another user's command goes through su (the sandbox runs as root; see commandLine).
 */
import type { Writable } from 'node:stream';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';

import type { ContainerProcess, Sandbox } from 'modal';

import { shellQuote } from '../../shell';
import type { EnvironmentHandle } from '../../contracts/trial';
import type { ExecRequest, ExecResult, StreamedProcess, StreamedProcessRequest } from '../../contracts/environment';
import { OutputTail, TextSink } from '../exec-output';
import { Shells } from '../kit/shell';
import { KILL_ALL, commandLine } from '../trial-container';
import type { ModalConnection } from './client';
import { isNotFound, sdkMessage } from './client';

/** Bytes per stdin write: each is one call to the sandbox's command router. */
const STDIN_BATCH = 1024 * 1024;
/** How long a streamed process may take to end once its stdin is closed, before it is killed. */
const PROCESS_END_WAIT_MS = 5000;

type Outcome = { kind: 'ended'; exitCode: number } | { kind: 'timedOut' } | { kind: 'aborted' };

export class SandboxExec {
  private readonly shells = new Shells();

  constructor(private readonly connection: ModalConnection) {}

  forget(id: string): void {
    this.shells.forget(id);
  }

  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    const { argv, stdin } = commandLine(await this.shellOf(handle), request, handle.workdir);
    const process = await this.start(handle, argv);
    if (stdin !== undefined) await writeAll(process, Readable.from([Buffer.from(stdin)]));
    const outcome = await this.outcome(handle, process, { stdout, stderr }, request);
    if (outcome.kind === 'ended') {
      return { exitCode: outcome.exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    }
    await this.killAll(handle);
    if (outcome.kind === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  /** Kills every process in the sandbox but PID 1 (which only keeps it up): all the agent started, daemons included. */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    const process = await this.start(handle, ['/bin/sh', '-c', `${KILL_ALL}; true`]);
    await this.outcome(handle, process, {});
  }

  /**
   * One of Rollout's own scripts under /bin/sh, fed `stdin` (in batches, then closed), its stdout to `stdout`: the
   * carrier of tar transfers (./files.ts).
   */
  async runScript(
    handle: EnvironmentHandle,
    script: string,
    io: { stdin?: Readable; stdout?: NodeJS.WritableStream }
  ): Promise<{ exitCode: number | string; stderr: string }> {
    const stderr = new OutputTail();
    const process = await this.start(handle, ['/bin/sh', '-c', script]);
    const [outcome] = await Promise.all([
      this.outcome(handle, process, { stdout: io.stdout, stderr }),
      io.stdin && writeAll(process, io.stdin),
    ]);
    return { exitCode: outcome.kind === 'ended' ? outcome.exitCode : outcome.kind, stderr: stderr.text() };
  }

  /**
   * A process with stdin and stdout open both ways (the gateway relay's channel). Its shell's pid goes to a file
   * first, so that kill can end it when closing its stdin does not.
   */
  async openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    const pidFile = `/tmp/rollout-process-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}.pid`;
    const script = `echo $$ > ${pidFile}; exec ${await this.shellOf(handle)} -c ${shellQuote(request.command)}`;
    const process = await this.start(handle, ['/bin/sh', '-c', script], request.env);
    const exited = this.outcome(handle, process, {
      stdout: new TextSink(request.onStdout),
      stderr: new TextSink(request.onStderr ?? (() => {})),
    }).then(
      (outcome) => (outcome.kind === 'ended' ? outcome.exitCode : null),
      () => null
    );
    const writer = process.stdin.getWriter();
    const encoder = new TextEncoder();
    let closed = false;
    const kill = async () => {
      if (!closed) {
        closed = true;
        await writer.close().catch(() => undefined); // the process is gone already
      }
      const ended = await Promise.race([exited.then(() => true), sleep(PROCESS_END_WAIT_MS).then(() => false)]);
      if (!ended) {
        const killer = await this.start(handle, [
          '/bin/sh',
          '-c',
          `kill -9 "$(cat ${pidFile})" 2>/dev/null; rm -f ${pidFile}`,
        ]);
        await this.outcome(handle, killer, {});
      }
    };
    return { write: (data) => writer.write(encoder.encode(data)), exited, kill };
  }

  /** Whether the sandbox still runs (one API call, nothing run in it). */
  async isRunning(handle: EnvironmentHandle): Promise<boolean> {
    try {
      const sandbox = await this.connection.sandbox(handle.id);
      return (await this.connection.withQuotaBackoff('polling a sandbox', () => sandbox.poll())) === null;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /** See Shells. */
  private shellOf(handle: EnvironmentHandle): Promise<string> {
    return this.shells.of(handle.id, async (probe) => {
      const outcome = await this.outcome(handle, await this.start(handle, ['/bin/sh', '-c', probe]), {});
      return outcome.kind === 'ended' ? outcome.exitCode : null;
    });
  }

  private async start(
    handle: EnvironmentHandle,
    command: string[],
    env?: Record<string, string>
  ): Promise<ContainerProcess<Uint8Array>> {
    let sandbox: Sandbox;
    try {
      sandbox = await this.connection.sandbox(handle.id);
      const options = { mode: 'binary' as const, ...(env && Object.keys(env).length ? { env } : {}) };
      return await this.connection.withQuotaBackoff('starting a command', () => sandbox.exec(command, options));
    } catch (err) {
      throw lost(handle, err);
    }
  }

  /** Streams the process's output into the sinks until it ends, its time is up or the signal aborts. */
  private async outcome(
    handle: EnvironmentHandle,
    process: ContainerProcess<Uint8Array>,
    sinks: { stdout?: NodeJS.WritableStream; stderr?: Writable },
    limits: { timeoutMs?: number; signal?: AbortSignal } = {}
  ): Promise<Outcome> {
    const drained = Promise.all([drain(process.stdout, sinks.stdout), drain(process.stderr, sinks.stderr)]);
    const ended = Promise.all([process.wait(), drained]).then(([exitCode]): Outcome => ({ kind: 'ended', exitCode }));
    const stop = new AbortController();
    const stopped = [
      ...(limits.timeoutMs
        ? [sleep(limits.timeoutMs, undefined, { signal: stop.signal }).then((): Outcome => ({ kind: 'timedOut' }))]
        : []),
      ...(limits.signal
        ? [
            new Promise<Outcome>((resolve) => {
              if (limits.signal!.aborted) resolve({ kind: 'aborted' });
              limits.signal!.addEventListener('abort', () => resolve({ kind: 'aborted' }), { once: true });
            }),
          ]
        : []),
    ];
    try {
      return await Promise.race([ended, ...stopped]);
    } catch (err) {
      throw lost(handle, err);
    } finally {
      stop.abort();
      // What ended the wait (a timeout) leaves the streams to end with the processes killAll kills.
      ended.catch(() => undefined);
      for (const promise of stopped) promise.catch(() => undefined);
    }
  }
}

async function drain(stream: ReadableStream<Uint8Array>, sink: NodeJS.WritableStream | undefined): Promise<void> {
  const reader = stream.getReader();
  for (let next = await reader.read(); !next.done; next = await reader.read()) sink?.write(next.value);
}

/** Writes a stream to the process's stdin in batches (each write is a call to Modal), then closes it. */
async function writeAll(process: ContainerProcess<Uint8Array>, source: Readable): Promise<void> {
  const writer = process.stdin.getWriter();
  let batch: Buffer[] = [];
  let size = 0;
  for await (const chunk of source) {
    batch.push(chunk as Buffer);
    size += (chunk as Buffer).length;
    if (size >= STDIN_BATCH) {
      await writer.write(Buffer.concat(batch));
      batch = [];
      size = 0;
    }
  }
  if (size) await writer.write(Buffer.concat(batch));
  await writer.close();
}

/** A sandbox that is gone (terminated, past its timeout) is Modal's doing or the janitor's: an infrastructure error. */
function lost(handle: EnvironmentHandle, err: unknown): Error {
  if (isNotFound(err)) return new Error(`modal sandbox ${handle.id} is gone: ${sdkMessage(err)}`, { cause: err });
  return err instanceof Error ? err : new Error(String(err));
}
