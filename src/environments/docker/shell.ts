/**
 * A bash kept open in a container for a session's steps: one Docker exec for the whole session instead of one per
 * step (an exec is three API calls and a runtime exec: most of a step's time on a busy host). Each command runs as
 * the left side of a pipeline, so in a subshell of that bash (`cd` and variables do not carry over, as with an exec
 * per step), with stdin from /dev/null, stdout and stderr as one stream cut in the container at the output limit. A
 * random marker per step, written after the output with the exit status, ends the step's output.
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { PassThrough } from 'node:stream';

import type Docker from 'dockerode';

import type { ExecResult, ShellStep } from '../../contracts/environment';

/** Reads marker, byte limit and command, each NUL-terminated (a command holds no NUL), and runs one step. */
const LOOP = [
  'while IFS= read -r -d "" __rollout_marker && IFS= read -r -d "" __rollout_limit &&',
  '  IFS= read -r -d "" __rollout_command; do',
  '  { eval "$__rollout_command"; } </dev/null 2>&1 | head -c "$__rollout_limit"',
  '  __rollout_status=${PIPESTATUS[0]}',
  '  printf "\\n%s %s\\n" "$__rollout_marker" "$__rollout_status"',
  'done',
].join('\n');

interface Pending {
  marker: string;
  resolve: (result: ExecResult) => void;
}

export class StepShell {
  private output = Buffer.alloc(0);
  private pending: Pending | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(private readonly stream: Duplex) {}

  /** Opens the shell in the container (bash, as root unless the image says otherwise, in `workdir`). */
  static async open(container: Docker.Container, workdir: string, modem: Docker['modem']): Promise<StepShell> {
    const exec = await container.exec({
      Cmd: ['/bin/bash', '-c', LOOP],
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      WorkingDir: workdir,
    });
    const stream = await exec.start({ hijack: true, stdin: true });
    const shell = new StepShell(stream);
    const stdout = new PassThrough();
    modem.demuxStream(stream, stdout, new PassThrough().resume());
    stdout.on('data', (chunk: Buffer) => shell.received(chunk));
    const ended = () => shell.ended();
    stream.once('end', ended);
    stream.once('close', ended);
    stream.once('error', ended);
    return shell;
  }

  get open(): boolean {
    return !this.closed;
  }

  /**
   * Runs one step (steps queue behind each other). At the timeout, or when the signal aborts, `kill` ends every
   * process in the container (this shell too: the next step opens another) and the output so far is returned.
   */
  run(step: ShellStep, kill: () => Promise<void>): Promise<ExecResult> {
    const next = this.queue.then(() => this.runNow(step, kill));
    this.queue = next.catch(() => undefined);
    return next;
  }

  close(): void {
    this.stream.destroy();
  }

  private async runNow(step: ShellStep, kill: () => Promise<void>): Promise<ExecResult> {
    step.signal?.throwIfAborted();
    if (this.closed) throw new Error('the step shell has ended');
    const marker = `__rollout_${randomBytes(16).toString('hex')}`;
    const done = new Promise<ExecResult>((resolve) => (this.pending = { marker, resolve }));
    this.output = Buffer.alloc(0);
    this.stream.write(`${marker}\0${step.outputLimitBytes + 1}\0${step.command}\0`);
    let timer: NodeJS.Timeout | undefined;
    const cut = new Promise<'timedOut' | 'aborted'>((resolve) => {
      timer = setTimeout(() => resolve('timedOut'), step.timeoutMs);
      step.signal?.addEventListener('abort', () => resolve('aborted'), { once: true });
    });
    try {
      const outcome = await Promise.race([done, cut]);
      if (typeof outcome !== 'string') return outcome;
      const stdout = this.output.toString();
      this.pending = undefined;
      this.closed = true;
      await kill();
      this.close();
      if (outcome === 'aborted') throw step.signal?.reason;
      return { exitCode: null, stdout, stderr: '', timedOut: true };
    } finally {
      clearTimeout(timer);
    }
  }

  private received(chunk: Buffer): void {
    this.output = Buffer.concat([this.output, chunk]);
    const pending = this.pending;
    if (!pending) return;
    const end = this.output.lastIndexOf(`\n${pending.marker} `);
    const newline = end < 0 ? -1 : this.output.indexOf('\n', end + 1);
    if (newline < 0) return;
    const status = Number(this.output.subarray(end + pending.marker.length + 2, newline).toString());
    this.pending = undefined;
    pending.resolve({ exitCode: status, stdout: this.output.subarray(0, end).toString(), stderr: '', timedOut: false });
  }

  /** The shell is gone (its container stopped, or a step killed it): a step under way gets what it printed. */
  private ended(): void {
    this.closed = true;
    const pending = this.pending;
    this.pending = undefined;
    pending?.resolve({ exitCode: null, stdout: this.output.toString(), stderr: '', timedOut: false });
  }
}
