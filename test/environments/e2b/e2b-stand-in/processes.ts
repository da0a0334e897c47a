/**
 * envd's processes, as `docker exec` sessions in a sandbox's container. envd knows each process by its pid in the
 * sandbox, and ends its stream when that process exits, even while what it started still holds its output (envd
 * signals and waits for the process only). So a wrapper runs the command as its child: it prints the child's pid
 * (first stderr line), waits for it, then prints a marker line on stdout and one with its exit status on stderr (all
 * the command wrote before it ended precedes each in its pipe); the stand-in strips them, and ends the process once
 * both came.
 */
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';

import { docker } from './docker-cli';

export interface ProcessEvents {
  start(pid: number): void;
  stdout(data: Buffer): void;
  stderr(data: Buffer): void;
  end(exitCode: number, status: string): void;
}

export interface StartSpec {
  container: string;
  user: string;
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  stdin: boolean;
}

/**
 * `$1` is the end marker; the rest is the command. A background command's stdin would be /dev/null: it gets the
 * wrapper's through fd 3.
 */
const WRAPPER = [
  'm=$1; shift; exec 3<&0',
  '"$@" <&3 3<&- & p=$!',
  'exec 3<&-; echo "$p" >&2; wait "$p"; c=$?',
  `printf '%s\\n' "$m"; printf '%s %s\\n' "$m" "$c" >&2`,
].join('; ');

export class SandboxProcess {
  pid = 0;
  readonly spec: StartSpec;
  private readonly child: ChildProcessWithoutNullStreams;
  private listeners = new Set<ProcessEvents>();
  private readonly marker = `E2B-STAND-IN-END-${randomBytes(6).toString('hex')}`;
  private readonly stdout = new MarkedStream(this.marker, (data) => this.emit((l) => l.stdout(data)));
  private readonly stderr = new MarkedStream(this.marker, (data) => this.emit((l) => l.stderr(data)));
  /** The exit status the wrapper reported (its stderr marker). */
  private exitStatus: number | undefined;
  ended: { exitCode: number; status: string } | null = null;

  constructor(spec: StartSpec, events: ProcessEvents, onStarted: (process: SandboxProcess) => void) {
    this.spec = spec;
    this.listeners.add(events);
    const args = ['exec', '-i', '-u', spec.user];
    if (spec.cwd) args.push('-w', spec.cwd);
    for (const [key, value] of Object.entries(spec.envs)) args.push('-e', `${key}=${value}`);
    args.push(spec.container, '/bin/sh', '-c', WRAPPER, 'sh', this.marker, spec.cmd, ...spec.args);
    this.child = spawn('docker', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdin.on('error', () => undefined);
    if (!spec.stdin) this.child.stdin.end();
    // Output before the pid's line (on the other stream) waits for it: envd's first event is always the start.
    let early: Buffer[] | null = [];
    let head = Buffer.alloc(0);
    const started = () => {
      onStarted(this);
      this.emit((l) => l.start(this.pid));
      for (const chunk of early ?? []) this.onStdout(chunk);
      early = null;
    };
    this.child.stderr.on('data', (chunk: Buffer) => {
      if (this.pid) return this.onStderr(chunk);
      head = Buffer.concat([head, chunk]);
      const newline = head.indexOf(10);
      if (newline < 0) return;
      this.pid = Number(head.subarray(0, newline).toString('utf8'));
      started();
      this.onStderr(head.subarray(newline + 1));
    });
    this.child.stdout.on('data', (chunk: Buffer) => {
      if (early) early.push(chunk);
      else this.onStdout(chunk);
    });
    this.child.on('close', (code) => {
      if (!this.pid) started();
      this.stdout.flush();
      this.stderr.flush();
      // Without the marker, the wrapper itself was killed (a kill of every process in the sandbox).
      this.finish(this.exitStatus ?? (code === null || code > 128 ? 128 + 9 : code));
    });
  }

  private onStdout(chunk: Buffer): void {
    if (this.stdout.push(chunk) !== undefined) this.finishIfDone();
  }

  private onStderr(chunk: Buffer): void {
    const status = this.stderr.push(chunk);
    if (status === undefined) return;
    this.exitStatus = Number(status);
    this.finishIfDone();
  }

  private finishIfDone(): void {
    if (this.stdout.done && this.exitStatus !== undefined) this.finish(this.exitStatus);
  }

  /** Another stream of the same process (envd's Connect call). */
  listen(events: ProcessEvents): void {
    this.listeners.add(events);
  }

  unlisten(events: ProcessEvents): void {
    this.listeners.delete(events);
  }

  writeStdin(data: Buffer): void {
    this.child.stdin.write(data);
  }

  closeStdin(): void {
    this.child.stdin.end();
  }

  async signal(signal: 'KILL' | 'TERM'): Promise<void> {
    // The shell's own kill: an image need not have a kill binary (procps).
    const kill = `kill -${signal} ${this.pid}`;
    await docker(['exec', '-u', 'root', this.spec.container, '/bin/sh', '-c', kill]);
  }

  /** Ends the process with a shell's exit status (128 + N: killed by signal N, which envd reports as exit -1). */
  private finish(shellStatus: number): void {
    if (this.ended) return;
    const signalled = shellStatus > 128;
    this.ended = {
      exitCode: signalled ? -1 : shellStatus,
      status: signalled ? `signal: ${signalName(shellStatus - 128)}` : `exit status ${shellStatus}`,
    };
    const ended = this.ended;
    this.emit((l) => l.end(ended.exitCode, ended.status));
    this.listeners.clear();
    // Its leftovers may hold the session open: the session is ours to drop (nothing in the sandbox is killed).
    this.child.kill();
  }

  private emit(call: (listener: ProcessEvents) => void): void {
    for (const listener of this.listeners) call(listener);
  }
}

function signalName(signal: number): string {
  return { 9: 'killed', 15: 'terminated', 2: 'interrupt', 1: 'hangup' }[signal] ?? `signal ${signal}`;
}

/**
 * One of the wrapper's output streams, which ends with `<marker>[ <status>]` and a newline where the command's own
 * output stopped (perhaps mid-line: the marker is unique enough to need no line of its own). What precedes it is
 * forwarded as it comes, but for a tail that could begin the marker; what follows (a leftover's output) is dropped.
 */
class MarkedStream {
  done = false;
  private held = Buffer.alloc(0);

  constructor(
    private readonly marker: string,
    private readonly forward: (data: Buffer) => void
  ) {}

  /** The marker line's rest once it has come (e.g. the exit status), else undefined. */
  push(chunk: Buffer): string | undefined {
    if (this.done) return undefined;
    this.held = Buffer.concat([this.held, chunk]);
    const text = this.held.toString('latin1');
    const at = text.indexOf(this.marker);
    const end = at < 0 ? -1 : text.indexOf('\n', at);
    if (end >= 0) {
      if (at > 0) this.forward(Buffer.from(this.held.subarray(0, at)));
      this.done = true;
      this.held = Buffer.alloc(0);
      return text.slice(at + this.marker.length, end).trim();
    }
    const keep = at >= 0 ? this.held.length - at : this.markerStartAtEnd();
    if (this.held.length > keep) this.forward(Buffer.from(this.held.subarray(0, this.held.length - keep)));
    this.held = this.held.subarray(this.held.length - keep);
    return undefined;
  }

  /** How many bytes at the end of what is held could begin the marker (only those wait for more). */
  private markerStartAtEnd(): number {
    const needle = Buffer.from(this.marker, 'latin1');
    for (let k = Math.min(this.held.length, needle.length - 1); k > 0; k--) {
      if (this.held.subarray(this.held.length - k).equals(needle.subarray(0, k))) return k;
    }
    return 0;
  }

  flush(): void {
    if (!this.done && this.held.length) this.forward(Buffer.from(this.held));
    this.held = Buffer.alloc(0);
  }
}
