/** Runs the real `rollout` CLI (bin/rollout.js) as a child process against the tests' Temporal server. */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { cp, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { REPO_ROOT, TEST_ADDRESS, TEST_HOST_ID } from './temporal';

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export const CLI = path.join(REPO_ROOT, 'bin', 'rollout.js');

export function cliEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, TEMPORAL_ADDRESS: TEST_ADDRESS, ROLLOUT_HOST_ID: TEST_HOST_ID, ...extra };
}

/** Longest a CLI run may take in a test before it is killed (its result then says so in stderr). */
const CLI_TIMEOUT_MS = 10 * 60_000;

export interface CliOptions {
  cwd: string;
  env?: Record<string, string>;
  timeoutMs?: number;
}

/** Starts the CLI; it is killed (SIGKILL) if it runs past the timeout, so no test waits on it for ever. */
export function startCli(args: string[], options: CliOptions): ChildProcess & { output: Promise<CliRun> } {
  const child = spawn(process.execPath, [CLI, ...args], { cwd: options.cwd, env: cliEnv(options.env) });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timeoutMs = options.timeoutMs ?? CLI_TIMEOUT_MS;
  const timer = setTimeout(() => {
    stderr += `\n[test] rollout ${args.join(' ')} killed after ${timeoutMs / 1000} s\n`;
    child.kill('SIGKILL');
  }, timeoutMs);
  const output = new Promise<CliRun>((resolve) =>
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    })
  );
  return Object.assign(child, { output });
}

export function runCli(args: string[], options: CliOptions): Promise<CliRun> {
  return startCli(args, options).output;
}

/** A scratch folder with copies of the given fixture folders (test/fixtures/<name> or examples/...). */
export async function workspace(copies: Record<string, string> = {}): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-test-'));
  for (const [target, source] of Object.entries(copies)) {
    await cp(path.join(REPO_ROOT, source), path.join(dir, target), { recursive: true });
  }
  return dir;
}

/** Writes `<dir>/job.yaml`: the oracle over `<dir>/tasks`, with the given top-level keys. */
export async function writeOracleJob(dir: string, keys: Record<string, string | number>): Promise<void> {
  const lines = Object.entries(keys).map(([key, value]) => `${key}: ${value}`);
  await writeFile(
    path.join(dir, 'job.yaml'),
    [...lines, 'agents:', '  - name: oracle', 'datasets:', '  - path: tasks', ''].join('\n')
  );
}
