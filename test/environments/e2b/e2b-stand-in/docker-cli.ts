/** The stand-in's sandboxes and builds run through the local `docker` CLI. */
import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';

export interface DockerRun {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs `docker <args>` to its end (stdin piped from `input` when given). */
export function docker(args: string[], input?: Buffer | Readable): Promise<DockerRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('docker', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') })
    );
    // A reader that stopped early (a command that ignores its stdin) is not a failure of the run.
    child.stdin.on('error', () => undefined);
    if (input === undefined) child.stdin.end();
    else if (Buffer.isBuffer(input)) child.stdin.end(input);
    else input.pipe(child.stdin);
  });
}

/** Like docker(), but a non-zero exit throws with docker's own message. */
export async function dockerOk(args: string[], input?: Buffer | Readable): Promise<string> {
  const run = await docker(args, input);
  if (run.code !== 0) throw new Error(`docker ${args[0]}: ${run.stderr.trim() || `exit ${run.code}`}`);
  return run.stdout.toString('utf8').trim();
}
