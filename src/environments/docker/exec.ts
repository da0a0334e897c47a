/** Commands in a trial's container: Docker execs, the shell kept open for a session's steps, the kill of all. */
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';

import type Docker from 'dockerode';

import type { EnvironmentHandle } from '../../contracts/trial';
import type {
  ExecRequest,
  ExecResult,
  ShellStep,
  StreamedProcess,
  StreamedProcessRequest,
} from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { OutputTail, TextSink } from '../exec-output';
import type { DockerEngine } from './engine';
import { daemonMessage, ignoreMissing, statusCode } from './engine';
import { Shells } from '../kit/shell';
import { KILL_ALL, KILL_ALL_LEFT_ZOMBIES, KILL_ALL_REFUSED, envList } from '../trial-container';
import { StepShell } from './shell';

/** How long a streamed process may take to end once its stdin is closed, before its stream is dropped. */
const PROCESS_END_WAIT_MS = 5000;

export class DockerExec {
  private readonly shells = new Shells();
  /** The shell kept open for a session's steps, per container. */
  private readonly stepShells = new Map<string, StepShell>();

  constructor(private readonly engine: DockerEngine) {}

  private get docker(): Docker {
    return this.engine.docker;
  }

  /** The container's shell, as its start found it. */
  setShell(containerId: string, shell: string): void {
    this.shells.set(containerId, shell);
  }

  /** Forgets a container that is going away (its shell, its open step shell). */
  forget(containerId: string): void {
    this.shells.forget(containerId);
    this.stepShells.get(containerId)?.close();
    this.stepShells.delete(containerId);
  }

  /** Runs a command of Rollout's own to its end, with its output. */
  async collectExec(
    containerId: string,
    options: Pick<Docker.ExecCreateOptions, 'Cmd' | 'Env' | 'User'>
  ): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
    const { exec, stream } = await this.startExec(containerId, options);
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    this.docker.modem.demuxStream(stream, stdout, stderr);
    await execOutcome(stream);
    const exitCode = await exitCodeOf(exec);
    assertProcessStarted(exitCode, stdout.text() + stderr.text());
    return { exitCode, stdout: stdout.text(), stderr: stderr.text() };
  }

  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const shell = await this.shellOf(handle.id);
    const { exec, stream } = await this.startExec(handle.id, {
      Cmd: [shell, '-c', request.command],
      Env: envList(request.env ?? {}),
      WorkingDir: request.cwd ?? handle.workdir,
      User: request.user,
    });
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    this.docker.modem.demuxStream(stream, stdout, stderr);
    const outcome = await execOutcome(stream, request.timeoutMs, request.signal);
    if (outcome === 'ended') {
      const exitCode = await exitCodeOf(exec);
      assertProcessStarted(exitCode, stdout.text() + stderr.text());
      return { exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    }
    stream.destroy();
    await this.killAll(handle);
    if (outcome === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  /** A process with stdin attached (see Environment.openProcess); kill ends its stdin, then drops the stream. */
  async openProcess(handle: EnvironmentHandle, request: StreamedProcessRequest): Promise<StreamedProcess> {
    const { exec, stream } = await this.startExec(
      handle.id,
      { Cmd: [await this.shellOf(handle.id), '-c', request.command], Env: envList(request.env ?? {}) },
      true
    );
    this.docker.modem.demuxStream(stream, new TextSink(request.onStdout), new TextSink(request.onStderr ?? (() => {})));
    const exited = execOutcome(stream).then(
      () => exitCodeOf(exec),
      () => null
    );
    const write = (data: string) =>
      new Promise<void>((resolve, reject) => stream.write(data, (err) => (err ? reject(err) : resolve())));
    const kill = async () => {
      if (!stream.writableEnded) stream.end();
      const ended = await Promise.race([exited.then(() => true), sleep(PROCESS_END_WAIT_MS).then(() => false)]);
      if (!ended) stream.destroy();
    };
    return { write, exited, kill };
  }

  async runStep(handle: EnvironmentHandle, step: ShellStep): Promise<ExecResult | null> {
    if (step.command.includes('\0') || (await this.shellOf(handle.id)) !== '/bin/bash') return null;
    let shell = this.stepShells.get(handle.id);
    if (!shell?.open) {
      shell = await StepShell.open(this.docker.getContainer(handle.id), handle.workdir, this.docker.modem);
      this.stepShells.set(handle.id, shell);
    }
    return shell.run(step, () => this.killAll(handle));
  }

  async isRunning(handle: EnvironmentHandle): Promise<boolean> {
    const state = (await ignoreMissing(this.docker.getContainer(handle.id).inspect()))?.State;
    return state !== undefined && state.Running && !state.Paused && !state.Restarting;
  }

  /**
   * Creates and starts an exec. A container that is no longer running, while the daemon answers, was broken from
   * inside (its PID 1 only sleeps): an outcome of what ran in it, not a failure of the host.
   */
  private async startExec(
    containerId: string,
    options: Pick<Docker.ExecCreateOptions, 'Cmd' | 'Env' | 'WorkingDir' | 'User'>,
    stdin = false
  ): Promise<{ exec: Docker.Exec; stream: Duplex }> {
    let exec: Docker.Exec;
    try {
      exec = await this.docker
        .getContainer(containerId)
        .exec({ ...options, AttachStdin: stdin, AttachStdout: true, AttachStderr: true });
    } catch (err) {
      if (statusCode(err) === 409 && /is not running/i.test(daemonMessage(err))) {
        throw new TaskEnvironmentError('EnvironmentBrokenError', `the container stopped: ${daemonMessage(err)}`);
      }
      throw err;
    }
    return { exec, stream: await exec.start({ hijack: true, stdin }) };
  }

  /** See Shells; another worker process may have started the container (this one restarted since). */
  shellOf(containerId: string): Promise<string> {
    return this.shells.of(
      containerId,
      async (probe) => (await this.collectExec(containerId, { Cmd: ['/bin/sh', '-c', probe] })).exitCode
    );
  }

  /**
   * Kills every process in the container but PID 1 (`sleep`): all that a command started, daemons and processes
   * that left its process group included. As root, so that processes of any user go. Where no process can start
   * to do it (a fork bomb holds every pid the container's limit allows), or what was killed stays as zombies holding
   * the pids (see KILL_ALL), the container is restarted: everything in it dies with its PID 1, and its files are
   * kept for the verifier.
   */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    // Never `kill -9 -1` in a container that shares another's (or the host's) processes: it would kill those too.
    const pidMode = (await ignoreMissing(this.docker.getContainer(handle.id).inspect()))?.HostConfig?.PidMode ?? '';
    if (pidMode !== '' && pidMode !== 'private') return this.restart(handle.id, `pid mode ${pidMode}`);
    let killed: { exitCode: number | null };
    try {
      killed = await this.collectExec(handle.id, { Cmd: [await this.shellOf(handle.id), '-c', KILL_ALL], User: '0' });
    } catch (err) {
      if (!(err instanceof TaskEnvironmentError)) throw err;
      return this.restart(handle.id, err.message);
    }
    if (killed.exitCode === KILL_ALL_REFUSED) {
      await this.restart(handle.id, "kill-all refused: the container sees the host's processes");
    } else if (killed.exitCode === KILL_ALL_LEFT_ZOMBIES) {
      await this.restart(handle.id, 'the killed processes hold most of the pids limit (zombies of PID 1)');
    }
  }

  /** Kills the container (PID 1, and so every process in it) and starts it again, its filesystem as it was. */
  private async restart(containerId: string, cause: string): Promise<void> {
    this.stepShells.get(containerId)?.close();
    this.stepShells.delete(containerId);
    const container = this.docker.getContainer(containerId);
    try {
      // 409: it is not running any more (its PID 1 died with the rest); started again all the same.
      await container.kill().catch((err: unknown) => {
        if (statusCode(err) !== 409) throw err;
      });
      await container.start();
    } catch (err) {
      // The daemon answered: a container that cannot start again was broken from inside (its /bin deleted).
      if (statusCode(err) === undefined) throw err;
      throw new TaskEnvironmentError(
        'EnvironmentBrokenError',
        `${cause}; restarting the container failed: ${daemonMessage(err) || String(err)}`
      );
    }
  }
}

/** How an exec's output stream finished: it ended, its time limit passed, or the signal aborted. */
function execOutcome(
  stream: NodeJS.ReadableStream,
  timeoutMs?: number,
  signal?: AbortSignal
): Promise<'ended' | 'timedOut' | 'aborted'> {
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const settle = (outcome: 'ended' | 'timedOut' | 'aborted' | Error) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = () => settle('aborted');
    if (timeoutMs) timer = setTimeout(() => settle('timedOut'), timeoutMs);
    if (signal?.aborted) onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    stream.once('end', () => settle('ended'));
    stream.once('close', () => settle('ended'));
    stream.once('error', (err: Error) => settle(err));
  });
}

/**
 * The runtime could not start the exec's process: the container's own files are broken (an agent deleted /bin or
 * /usr). The daemon answered, so the host is fine; this is the trial's outcome, never a reason to retry.
 */
function assertProcessStarted(exitCode: number | null, output: string): void {
  const failure = /OCI runtime exec failed: exec failed: unable to start container process: .*/.exec(output);
  if ((exitCode === 126 || exitCode === 127) && failure) {
    throw new TaskEnvironmentError(
      'EnvironmentBrokenError',
      `the container can no longer start a process: ${failure[0].trim()}`
    );
  }
}

/** The exit code once Docker has recorded it: the output stream can end a moment before the exec is marked done. */
async function exitCodeOf(exec: Docker.Exec): Promise<number | null> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const info = await exec.inspect();
    if (!info.Running) return info.ExitCode ?? null;
    await sleep(20);
  }
  return null;
}
