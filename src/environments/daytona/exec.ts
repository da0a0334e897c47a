/**
 * Commands in a Daytona sandbox through its toolbox: each exec is a session of its own (the daemon keeps stdout and
 * stderr apart, streams them over a websocket while the command runs, and feeds its stdin), so a timeout or a
 * cancellation still has the output so far; then every process the agent left is killed as on Docker (KILL_ALL).
 * Rollout's own short commands (setup, archives) use the toolbox's one-shot execute.
 */
import { randomUUID } from 'node:crypto';

import type { Sandbox } from '@daytonaio/sdk';

import { log } from '../../log';
import { shellQuote } from '../../shell';
import type { EnvironmentHandle } from '../../contracts/trial';
import type { ExecRequest, ExecResult, StreamedProcess, StreamedProcessRequest } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { OutputTail } from '../exec-output';
import { Shells } from '../kit/shell';
import { KILL_ALL, commandLine } from '../trial-container';
import type { DaytonaClients } from './client';
import { daytonaCall, isNotFound } from './client';

export class SandboxExec {
  private readonly shells = new Shells();

  constructor(private readonly clients: DaytonaClients) {}

  forget(sandboxId: string): void {
    this.shells.forget(sandboxId);
  }

  /**
   * The command through the sandbox's shell (bash, else sh), in `cwd` (else the handle's), with `env`, as `user`
   * (through su: the sandbox runs as root). At `timeoutMs`, or on `signal`, every process in the sandbox is killed.
   */
  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const sandbox = await this.clients.sandbox(handle.id);
    const shell = await this.shellOf(sandbox);
    const { argv, stdin } = commandLine(shell, request, handle.workdir);
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    const session = await this.session(sandbox, argv.map(shellQuote).join(' '), {
      onStdout: (text) => stdout.write(text),
      onStderr: (text) => stderr.write(text),
    });
    if (stdin !== undefined) await writeLines(session, stdin);
    const outcome = await new Promise<'ended' | 'timedOut' | 'aborted'>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = (result: 'ended' | 'timedOut' | 'aborted') => {
        clearTimeout(timer);
        request.signal?.removeEventListener('abort', onAbort);
        resolve(result);
      };
      const onAbort = () => settle('aborted');
      if (request.timeoutMs) timer = setTimeout(() => settle('timedOut'), request.timeoutMs);
      if (request.signal?.aborted) onAbort();
      request.signal?.addEventListener('abort', onAbort, { once: true });
      void session.exited.then(() => settle('ended'));
    });
    if (outcome === 'ended') {
      const exitCode = await session.exited;
      await session.kill();
      return { exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    }
    await this.killAll(handle);
    await session.kill();
    if (outcome === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  /** Kills every process in the sandbox but its daemon (PID 1): all the agent started, daemons included. */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    await this.root(handle.id, `${KILL_ALL}; true`);
  }

  /** One of Rollout's own commands, as root through the toolbox's execute: its exit code and combined output. */
  async root(sandboxId: string, command: string): Promise<{ exitCode: number; output: string }> {
    const sandbox = await this.clients.sandbox(sandboxId);
    const result = await daytonaCall(() => sandbox.process.executeCommand(command));
    if (result.exitCode === -1) {
      // The daemon could not start a shell at all: the agent broke the sandbox (deleted /bin/sh).
      throw new TaskEnvironmentError(
        'EnvironmentBrokenError',
        `the sandbox can no longer run a command: ${result.result}`
      );
    }
    return { exitCode: result.exitCode, output: result.result };
  }

  /** A process whose stdin and stdout stay open (the gateway relay's channel). See session. */
  async openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    const sandbox = await this.clients.sandbox(handle.id);
    // Its env first, through its stdin, as exec's (see commandLine); then the stream is the caller's.
    const { argv, stdin } = commandLine('/bin/sh', { command: request.command, cwd: '', env: request.env }, '');
    const process = await this.session(sandbox, argv.map(shellQuote).join(' '), {
      onStdout: request.onStdout,
      onStderr: request.onStderr,
    });
    if (stdin !== undefined) await writeLines(process, stdin);
    return process;
  }

  /**
   * Runs `command` in a session of its own, in the background, its output followed as it comes. The daemon passes
   * output on line by line (a last line without a newline gets one) and ends each write to stdin with a newline: a
   * streamed process speaks in lines. kill() deletes the session, which kills the command's process group.
   */
  private async session(
    sandbox: Sandbox,
    command: string,
    streams: { onStdout: (text: string) => void; onStderr?: (text: string) => void }
  ): Promise<StreamedProcess> {
    const sessionId = `rollout-${randomUUID()}`;
    await daytonaCall(() => sandbox.process.createSession(sessionId));
    let deleted: Promise<void> | undefined;
    const kill = () =>
      (deleted ??= daytonaCall(() => sandbox.process.deleteSession(sessionId)).catch((err: unknown) => {
        // Gone with its sandbox, or with a killAll's kill of the session's shell: nothing left to end.
        if (!isNotFound(err)) log.warn(`daytona: deleting session ${sessionId}: ${(err as Error).message}`);
      }));
    let commandId: string;
    try {
      ({ cmdId: commandId } = await daytonaCall(() =>
        sandbox.process.executeSessionCommand(sessionId, { command, runAsync: true, suppressInputEcho: true })
      ));
    } catch (err) {
      await kill();
      throw err;
    }
    const exited = sandbox.process
      .getSessionCommandLogs(sessionId, commandId, streams.onStdout, streams.onStderr ?? (() => undefined))
      .then(
        async () => (await daytonaCall(() => sandbox.process.getSessionCommand(sessionId, commandId))).exitCode ?? null
      )
      .catch((err: unknown) => {
        // Killed: its session is gone, and its exit code with it.
        if (!isNotFound(err)) log.warn(`daytona: following ${sessionId}: ${(err as Error).message}`);
        return null;
      });
    return {
      exited,
      kill,
      write: async (data) => {
        await daytonaCall(() => sandbox.process.sendSessionCommandInput(sessionId, commandId, data));
      },
    };
  }

  /** See Shells. */
  private shellOf(sandbox: Sandbox): Promise<string> {
    return this.shells.of(
      sandbox.id,
      async (probe) => (await daytonaCall(() => sandbox.process.executeCommand(probe))).exitCode
    );
  }
}

/** Lines to a session command's stdin: the daemon ends each write with a newline, so the last one is left off. */
async function writeLines(process: StreamedProcess, text: string): Promise<void> {
  await process.write(text.replace(/\n$/, ''));
}
