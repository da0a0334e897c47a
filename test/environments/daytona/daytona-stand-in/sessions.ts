/**
 * Sessions of the Daytona stand-in's toolbox: commands run to their end or in the background, their output kept as
 * the sandbox daemon keeps it (a log of lines, each prefixed by \x01\x01\x01 for stdout or \x02\x02\x02 for stderr,
 * a final line without its newline given one), followed over a websocket, and their stdin fed with `input`. The real
 * daemon runs each command inside one shell per session; here each is a docker exec of its own, which the session's
 * deletion kills (its process group), as the daemon's deletion kills the session shell's group.
 */
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';

import type { Runner, RunningExec } from './runner';

export const STDOUT_PREFIX = Buffer.from([1, 1, 1]);
export const STDERR_PREFIX = Buffer.from([2, 2, 2]);

export class SessionCommand {
  readonly id = randomUUID();
  exitCode: number | null = null;
  private readonly log: Buffer[] = [];
  private readonly followers = new Set<{ chunk: (data: Buffer) => void; end: () => void }>();
  readonly done: Promise<void>;

  constructor(
    readonly command: string,
    private readonly running: RunningExec,
    readonly pidFile: string,
    private readonly suppressInputEcho: boolean
  ) {
    const streams = Promise.all([this.lines(running.stdout, STDOUT_PREFIX), this.lines(running.stderr, STDERR_PREFIX)]);
    this.done = streams
      .then(() => running.exited)
      .then((code) => {
        // A command killed with its session has no code of its own: the daemon's shell reports 137 for SIGKILL.
        this.exitCode = code ?? 137;
        for (const follower of this.followers) follower.end();
        this.followers.clear();
      });
  }

  /** The whole log so far. */
  output(): Buffer {
    return Buffer.concat(this.log);
  }

  /** Calls `chunk` with the log so far and each addition, and `end` once the command has ended. */
  follow(chunk: (data: Buffer) => void, end: () => void): () => void {
    const existing = this.output();
    if (existing.length) chunk(existing);
    if (this.exitCode !== null) {
      end();
      return () => undefined;
    }
    const follower = { chunk, end };
    this.followers.add(follower);
    return () => this.followers.delete(follower);
  }

  /** Writes to the command's stdin (a newline added, as the daemon does); echoed to the log unless suppressed. */
  input(data: string): void {
    const line = data.endsWith('\n') ? data : `${data}\n`;
    this.running.stdin.write(line);
    if (!this.suppressInputEcho) this.append(Buffer.concat([STDOUT_PREFIX, Buffer.from(line)]));
  }

  private append(data: Buffer): void {
    this.log.push(data);
    for (const follower of this.followers) follower.chunk(data);
  }

  /** Each line of `stream` into the log with its prefix; resolves when the stream ends. */
  private lines(stream: Readable, prefix: Buffer): Promise<void> {
    let pending = Buffer.alloc(0);
    return new Promise((resolve) => {
      stream.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        for (let end = pending.indexOf(10); end >= 0; end = pending.indexOf(10)) {
          this.append(Buffer.concat([prefix, pending.subarray(0, end + 1)]));
          pending = pending.subarray(end + 1);
        }
      });
      stream.once('end', () => {
        if (pending.length) this.append(Buffer.concat([prefix, pending, Buffer.from('\n')]));
        resolve();
      });
    });
  }
}

/**
 * Runs "$1" as the leader of a process group of its own (setsid, where the image has it), its pid written to "$0"
 * first: what the session's deletion kills.
 */
const LEADER = [
  `run='echo $$ > "$0"; exec /bin/sh -c "$1"'`,
  'if command -v setsid >/dev/null 2>&1; then exec setsid -w /bin/sh -c "$run" "$0" "$1"; fi',
  'exec /bin/sh -c "$run" "$0" "$1"',
].join('; ');

export class Session {
  readonly commands = new Map<string, SessionCommand>();

  constructor(
    readonly id: string,
    private readonly runner: Runner,
    private readonly containerId: string
  ) {}

  /** Starts a command: `sh -c` in the sandbox, its process group's id recorded so deletion can kill the group. */
  async execute(command: string, suppressInputEcho: boolean): Promise<SessionCommand> {
    const pidFile = `/tmp/.daytona-stand-in-${randomUUID()}`;
    const running = await this.runner.exec(this.containerId, ['/bin/sh', '-c', LEADER, pidFile, command]);
    const record = new SessionCommand(command, running, pidFile, suppressInputEcho);
    this.commands.set(record.id, record);
    return record;
  }

  /** Kills what still runs of the session's commands (each one's process group, else its process). */
  async kill(): Promise<void> {
    const running = [...this.commands.values()].filter((command) => command.exitCode === null);
    if (!running.length) return;
    const script = running
      .map(({ pidFile }) => `p=$(cat ${pidFile} 2>/dev/null) && { kill -9 -- -"$p" 2>/dev/null || kill -9 "$p"; }`)
      .join('; ');
    await this.runner.execToEnd(this.containerId, ['/bin/sh', '-c', `${script}; true`]);
  }
}
