/** The docker CLI's plugins (buildx, compose), for what the engine API (dockerode) cannot do. */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';

/** Runs a CLI to its end: its exit code (-1 when it could not start or was killed), output streamed line-wise. */
export function runCommand(
  command: string,
  args: string[],
  options: {
    signal: AbortSignal;
    env: Record<string, string>;
    /** The command sees `env` alone, nothing of this worker's environment (compose interpolates what it sees). */
    isolated?: boolean;
    cwd?: string;
    onOutput: (text: string) => void;
    /** Takes stdout (a command's result) apart from onOutput, which then has stderr only. */
    onStdout?: (text: string) => void;
  }
): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(options.isolated ? onPath(command) : command, args, {
      env: options.isolated ? options.env : { ...process.env, ...options.env },
      cwd: options.cwd,
      signal: options.signal,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const stdout = new StringDecoder('utf8');
    const stderr = new StringDecoder('utf8');
    const onStdout = options.onStdout ?? options.onOutput;
    child.stdout.on('data', (chunk: Buffer) => onStdout(stdout.write(chunk)));
    child.stderr.on('data', (chunk: Buffer) => options.onOutput(stderr.write(chunk)));
    child.once('error', (err) => {
      if (err.name !== 'AbortError') options.onOutput(err.message);
    });
    child.once('close', (code) => resolve(code ?? -1));
  });
}

/** The command's file on this worker's PATH (an isolated command gets no PATH of its own), or the name as given. */
function onPath(command: string): string {
  if (path.isAbsolute(command)) return command;
  const dir = (process.env.PATH ?? '')
    .split(path.delimiter)
    .find((folder) => folder && existsSync(path.join(folder, command)));
  return dir ? path.join(dir, command) : command;
}

/** The last lines of a command's output, each also passed on as it arrives. */
export class LineTail {
  private readonly lines: string[] = [];

  constructor(
    private readonly limit: number,
    private readonly onLine?: (line: string) => void
  ) {}

  add(text: string): void {
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      this.lines.push(line);
      if (this.lines.length > this.limit) this.lines.shift();
      this.onLine?.(line);
    }
  }

  text(): string {
    return this.lines.join('\n');
  }
}
