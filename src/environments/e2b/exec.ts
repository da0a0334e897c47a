/** Commands in an E2B sandbox through envd: execs with streamed output, the kill of all, and streamed processes. */
import type { EnvironmentHandle } from '../../contracts/trial';
import type { ExecRequest, ExecResult, StreamedProcess, StreamedProcessRequest } from '../../contracts/environment';
import { log } from '../../log';
import { OutputTail } from '../exec-output';
import { E2B_KILL_ALL, E2B_SETTLE, E2B_SETTLED_MARK } from './kill-all';
import type { CommandHandle, Sandbox } from './client';
import { sdk } from './client';

export class SandboxCommands {
  constructor(private readonly sandboxOf: (handle: EnvironmentHandle) => Promise<Sandbox>) {}

  /**
   * `bash -c`-like (envd runs `bash -l -c`), as root unless the request names a user. At its timeout, or on abort,
   * every process in the sandbox is killed, as Docker's exec does.
   */
  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const sandbox = await this.sandboxOf(handle);
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    const cwd = request.cwd ?? handle.workdir;
    const command = await sandbox.commands
      .run(request.command, {
        background: true,
        user: request.user ?? 'root',
        cwd,
        envs: request.env,
        // No limit on envd's side: the timeout below kills the whole sandbox's processes, not just this one.
        timeoutMs: 0,
        onStdout: (text) => void stdout.write(text),
        onStderr: (text) => void stderr.write(text),
      })
      .catch((err: unknown) => {
        // envd refuses a working directory that does not exist with an RPC error (InvalidArgument "cwd '…' does not
        // exist": envd/internal/services/process/handler/handler.go:239); elsewhere that is the command's exit 1.
        if (err instanceof sdk().InvalidArgumentError && /cwd '.*' does not exist/.test(err.message)) return null;
        throw err;
      });
    if (!command)
      return { exitCode: 1, stdout: '', stderr: `cd: ${cwd}: No such file or directory\n`, timedOut: false };
    const outcome = await settle(command, request.timeoutMs, request.signal);
    if (outcome.kind === 'ended') {
      return { exitCode: outcome.exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    }
    await command.disconnect();
    await this.killAll(handle);
    if (outcome.kind === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  /**
   * Starts the settled mark (E2B_SETTLED_MARK) once the sandbox's boot has settled, before the trial's first command:
   * what runs by then (systemd's services, the template's start command) is spared by every later kill of all. Its
   * start time is fixed when envd reports it started, so it is earlier than anything started after this returns.
   * Returns the working directory commands start in ('' when the settling printed none).
   */
  async settle(handle: EnvironmentHandle): Promise<string> {
    const sandbox = await this.sandboxOf(handle);
    const laidOut = await sandbox.commands
      .run(E2B_SETTLE, { user: 'root', timeoutMs: 90_000 })
      .catch((err: unknown) => ({ ...exitResult(err), stdout: (err as { stdout?: string }).stdout ?? '' }));
    const workdir = laidOut.stdout.split('\n')[0]!.trim();
    if (laidOut.exitCode !== 0) {
      // No mark: the kill of all spares only what started before envd (services that started later die with it).
      log.warn(`e2b: sandbox ${handle.id}: no settled mark (exit ${laidOut.exitCode})`);
      return workdir;
    }
    const mark = await sandbox.commands.run(E2B_SETTLED_MARK, { background: true, user: 'root', timeoutMs: 0 });
    await mark.disconnect();
    return workdir;
  }

  async killAll(handle: EnvironmentHandle): Promise<void> {
    const sandbox = await this.sandboxOf(handle);
    const result = await sandbox.commands.run(E2B_KILL_ALL, { user: 'root', timeoutMs: 0 }).catch(exitResult);
    if (result.exitCode !== 0) {
      throw new Error(`the kill of all processes in sandbox ${handle.id} failed (exit ${result.exitCode})`);
    }
  }

  async openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    const sandbox = await this.sandboxOf(handle);
    const command = await sandbox.commands.run(request.command, {
      background: true,
      stdin: true,
      user: 'root',
      envs: request.env,
      timeoutMs: 0,
      onStdout: (text) => request.onStdout(text),
      onStderr: (text) => request.onStderr?.(text),
    });
    let killed = false;
    return {
      write: (data) => command.sendStdin(data),
      exited: command.wait().then(
        (result) => result.exitCode,
        // Killed, or its stream lost with the sandbox: no exit code.
        (err: unknown) => (!killed && err instanceof sdk().CommandExitError && err.exitCode >= 0 ? err.exitCode : null)
      ),
      kill: async () => {
        if (killed) return;
        killed = true;
        await command.kill();
      },
    };
  }
}

type Outcome = { kind: 'ended'; exitCode: number | null } | { kind: 'timedOut' } | { kind: 'aborted' };

function settle(command: CommandHandle, timeoutMs?: number, signal?: AbortSignal): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const done = (outcome: Outcome) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve(outcome);
    };
    const onAbort = () => done({ kind: 'aborted' });
    if (timeoutMs) timer = setTimeout(() => done({ kind: 'timedOut' }), timeoutMs);
    signal?.addEventListener('abort', onAbort, { once: true });
    command.wait().then(
      (result) => done({ kind: 'ended', exitCode: result.exitCode }),
      (err: unknown) => {
        if (err instanceof sdk().CommandExitError) return done({ kind: 'ended', exitCode: exitResult(err).exitCode });
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    );
  });
}

/**
 * A command's end as a result: the SDK throws CommandExitError for a non-zero exit (envd's -1: killed by a signal,
 * no exit code); anything else (the sandbox gone, the stream lost) is thrown on.
 */
function exitResult(err: unknown): { exitCode: number | null } {
  if (err instanceof sdk().CommandExitError) return { exitCode: err.exitCode < 0 ? null : err.exitCode };
  throw err;
}
